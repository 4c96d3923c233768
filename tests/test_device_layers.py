"""What a device layer is, declared once (snowir/device_layers.py)."""

from __future__ import annotations

import re
from pathlib import Path

from snowir.dialects import nn
from snowir.device_layers import DEVICE_LAYER_KINDS, DEVICE_OPS, is_device_layer, kind_of

ROOT = Path(__file__).resolve().parent.parent


def test_each_kind_names_its_planner_builder_and_generator() -> None:
    """Every registered kind's three functions exist, and the kinds are the device ops."""
    for k in DEVICE_LAYER_KINDS:
        for role in ("planner", "builder", "generator"):
            assert callable(k.function(role)), (k.op.name, role)
    assert DEVICE_OPS == (nn.Conv2dOp, nn.MaxPoolOp)
    assert kind_of(nn.ReluOp.__new__(nn.ReluOp)) is None and not is_device_layer(nn.ReluOp.__new__(nn.ReluOp))


def test_no_library_module_spells_the_device_kinds_out() -> None:
    """The places that ask "is this a device layer?" read the registry, not their own union."""
    spelled = re.compile(r"isinstance\(\w+, \(?nn\.Conv2dOp(, | \| )nn\.MaxPoolOp\)?\)")
    hits = [str(p.relative_to(ROOT)) for d in ("snowir", "passes", "dialects") for p in (ROOT / d).rglob("*.py")
            if spelled.search(p.read_text())]
    assert hits == []
