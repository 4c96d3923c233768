"""What a device layer is, declared once (snowir/device_layers.py)."""

from __future__ import annotations

import re
from pathlib import Path

from snowir.dialects import nn
from snowir.device_layers import DEVICE_LAYER_KINDS, DEVICE_OPS, is_device_layer, kind_of

ROOT = Path(__file__).resolve().parent.parent


def test_each_kind_names_its_planner_builder_and_program() -> None:
    """Every registered kind's three functions exist, and the kinds are the device ops."""
    for k in DEVICE_LAYER_KINDS:
        for role in ("planner", "builder", "program"):
            assert callable(k.function(role)), (k.op.name, role)
    assert DEVICE_OPS == (nn.Conv2dOp, nn.MaxPoolOp)
    assert kind_of(nn.ReluOp.__new__(nn.ReluOp)) is None and not is_device_layer(nn.ReluOp.__new__(nn.ReluOp))


def test_no_library_module_spells_the_device_kinds_out() -> None:
    """The places that ask "is this a device layer?" read the registry, not their own union."""
    spelled = re.compile(r"isinstance\(\w+, \(?nn\.Conv2dOp(, | \| )nn\.MaxPoolOp\)?\)")
    hits = [str(p.relative_to(ROOT)) for d in ("snowir", "passes", "dialects") for p in (ROOT / d).rglob("*.py")
            if spelled.search(p.read_text())]
    assert hits == []


def test_the_passes_call_each_kind_through_the_registry(monkeypatch) -> None:
    """partition-host asks a kind's planner, nn-to-tile its builder and tile-to-asm its program
    by the names the registry gives (replacing a registered function changes what the passes
    call): a new kind needs no edit of the passes."""
    from collections import Counter

    import importlib
    from snowir.driver.model_api import compile as compile_model
    from snowir.resources import reset_blobs

    calls: Counter[str] = Counter()
    for k in DEVICE_LAYER_KINDS:
        for role in ("planner", "builder", "program"):
            module, name = getattr(k, role).split(":")
            real = getattr(importlib.import_module(module), name)
            monkeypatch.setattr(importlib.import_module(module), name,
                                lambda *a, _real=real, _key=f"{k.op.name} {role}": (calls.update([_key]), _real(*a))[1])
    reset_blobs()
    compiled = compile_model(ROOT / "snowir" / "data" / "digits_cnn.onnx")
    layers = [op for op in compiled.module.walk() if isinstance(op, DEVICE_OPS)]
    convs = sum(isinstance(op, nn.Conv2dOp) for op in layers)
    assert convs and calls["nn.conv2d builder"] == convs and calls["nn.conv2d program"] >= convs
    assert calls["nn.conv2d planner"] >= convs
    assert {key.split()[0] for key in calls} == {type(op).name for op in layers}
