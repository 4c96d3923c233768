"""Resident kernel tiles (`resident` on a kernel tile: every tile held at once, loaded once for the
layer), their loads and the layer after them (snowir/codegen/conv.py `_resident_tiles`,
`resident_ahead`; snowir/plan/weights_end.py `last_kernel_slot`).

A resident conv whose first strip needs loads issued after its cold start (bypass slices) loads
its kernel tiles one tile ahead in that strip rather than all at once behind it, where those loads
queued behind every tile's kernels. And a resident
conv's last kernel tile sits at (T-1)K..TK, so the next conv's first kernels load before its
fence or in that tile (`weights_before_fence`, `kernels_preloaded`), as after a double-buffered
conv; and a resident conv's own tile 0 may be preloaded, its other tiles loading after its fence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from onnx import helper

from onnx_util import model, rand
from snowir.codegen import conv as conv_codegen
from snowir.dialects import tile
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model
from snowir.hw import SnowflakeConfig
from snowir.plan.weights_end import last_kernel_slot
from snowir.tile.read import conv_plan_of
from snowir.tools.snow_opt import main

SIXTEEN_CUS = {"cus": 16, "dram_gbps": 4.2}


def _lower(m: onnx.ModelProto, tmp_path: Path, hw: dict, prepare: str = "") -> tuple[Path, Path]:
    """`m` at the tile level for the machine `hw` (its JSON and the tile-level file); `prepare`:
    more nn-prepare options."""
    hw_file, path, out = tmp_path / "hw.json", tmp_path / "m.onnx", tmp_path / "t.mlir"
    hw_file.write_text(json.dumps(hw))
    onnx.save(m, path)
    o = f"{{hw={hw_file}}}"
    p = f"{{hw={hw_file} {prepare}}}" if prepare else o
    assert main([str(path), "-p", f"nn-prepare{p},nn-to-tile{o},tile-loop-order{o},allocate-dram{o}",
                 "-o", str(out)]) in (0, None)
    return hw_file, out


def _cycles(path: Path, hw_file: Path, engine: str = "fast") -> dict[str, int]:
    run = run_model_on_device(path, check=True, hw=SnowflakeConfig.load(str(hw_file)), engine=engine)
    assert run.report["check"]["golden_bit_exact"] is True
    return {layer["name"]: layer["cycles"] for layer in run.report["layers"] if layer["cycles"]}


def _layer_line(text: str, name: str) -> str:
    return next(x for x in text.splitlines() if f"tile.layer @{name} " in x)


def test_a_bypass_slice_conv_loads_its_resident_tiles_one_ahead(tmp_path: Path, monkeypatch) -> None:
    """ResNet-50's 14² bottleneck on 16 CUs: a 1x1 1024 -> 256, then the 1x1 256 -> 1024 adding the
    block input, resident (16 tiles of 64 kernels) with bypass slices. Its kernels one tile ahead in
    the first strip, not all 557 KB behind it (where the next tile's slice waited for them): faster,
    bit-exact on both engines (the reference engine faults on a load over words a pending op reads).
    Its kernel tile 0 is loaded by the 1x1 before it (`kernels_preloaded`), the other tiles after its
    fence."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="a"), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["c"], name="b"), n("Add", ["c", "x"], ["s"]), n("Relu", ["s"], ["y"])]
    inits = {"w1": rand(256, 1024, 1, 1, seed=1, scale=0.03), "b1": rand(256, seed=2, scale=0.1),
             "w2": rand(1024, 256, 1, 1, seed=3, scale=0.05), "b2": rand(1024, seed=4, scale=0.1)}
    hw_file, path = _lower(model(nodes, {"x": [1, 1024, 14, 14]}, {"y": None}, inits), tmp_path, SIXTEEN_CUS)
    text = path.read_text()
    assert "bypass_slices" in _layer_line(text, "b")
    plans = {}
    real = conv_codegen.resident_ahead

    def spy(plan):
        plans[plan.shape.k] = plan
        return real(plan)

    monkeypatch.setattr(conv_codegen, "resident_ahead", spy)
    ahead = _cycles(path, hw_file)
    assert plans[1024].resident_weights and real(plans[1024])  # the path ran
    assert _cycles(path, hw_file, "reference")["b"] == ahead["b"]
    monkeypatch.setattr(conv_codegen, "resident_ahead", lambda plan: False)
    burst = _cycles(path, hw_file)
    assert ahead["a"] == burst["a"] and ahead["b"] < burst["b"], (ahead, burst)  # 87,639 against 89,780
    # a resident conv's tile 0 is preloaded too (its other tiles load after its fence)
    assert "kernels_preloaded" in _layer_line(text, "b")
    monkeypatch.setattr(conv_codegen, "resident_ahead", real)
    off = tmp_path / "off.mlir"
    off.write_text(re.sub(r", (weights_before_fence|kernels_preloaded)", "", text))
    assert _cycles(off, hw_file)["b"] > ahead["b"]  # 89,208


def test_a_plain_resident_conv_loads_its_tiles_at_once() -> None:
    """Without slices in its first strip the tiles still go at once: one tile's
    kernels loaded beside the previous tile's short MACs leave the bus idle between them (ResNet-50's
    14² 1x1 1024 -> 256 on 16 CUs: +3.4 k cycles)."""
    from dataclasses import replace

    from snowir.plan.conv import plan_conv
    from snowir.plan.shapes import ConvShape

    hw = SnowflakeConfig(**SIXTEEN_CUS)
    plan = plan_conv(ConvShape(1024, 14, 14, 256, 1, 1, 1, 1, 0, 0, 0, 0, True, 15), hw, 0, 1 << 24, 1 << 25)
    assert plan.resident_weights and not conv_codegen.resident_ahead(plan)
    assert conv_codegen.resident_ahead(replace(plan, bypass_slices=True, paired_start=False))
    # a paired start (its two strips first, tiles 1..T-1 behind them) loads the tiles at once
    assert not conv_codegen.resident_ahead(replace(plan, bypass_slices=True, paired_start=True))
    assert not conv_codegen.resident_ahead(replace(plan, resident_weights=False, bypass_slices=True))


def test_a_gathered_part_reading_its_bypass_as_rows_loads_its_tiles_at_once(tmp_path: Path, monkeypatch) -> None:
    """ResNet-50's 14² 1x1 1024 -> 256 on 8 CUs at 4.2 GB/s as four channel parts (split-kernels
    without kernel parts, which since stop 54 make it two kernel parts there), the later ones
    resident, gathering their 256 channels and reading the previous part's sums as bypass rows (no
    slices). One tile ahead they ran +1.3 to +3.0 k cycles each (the model +0.10 ms against stop 52):
    their tiles go at once, which measures faster here, bit-exact."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w", "b"], ["c"], name="p"), n("Relu", ["c"], ["y"])]
    inits = {"w": rand(256, 1024, 1, 1, seed=1, scale=0.03), "b": rand(256, seed=2, scale=0.1)}
    hw_file, path = _lower(model(nodes, {"x": [1, 1024, 14, 14]}, {"y": None}, inits), tmp_path,
                           {"cus": 8, "dram_gbps": 4.2}, "split-kernel-parts=false")
    parts = [conv_plan_of(op) for op in load_model(path)[0].ops if isinstance(op, tile.LayerOp)]
    later = [p for p in parts if p.bypass_addr is not None]
    assert len(parts) > 2 and later and all(p.resident_weights and p.gather is not None and not p.bypass_slices
                                            for p in later)
    assert not any(conv_codegen.resident_ahead(p) for p in later)
    at_once = _cycles(path, hw_file)
    monkeypatch.setattr(conv_codegen, "resident_ahead", lambda plan: plan.resident_weights and plan.tiles > 1
                        and plan.gather is not None and not plan.paired_start)
    ahead = _cycles(path, hw_file)
    assert sum(at_once.values()) < sum(ahead.values()), (at_once, ahead)


@pytest.mark.parametrize("hw", [{}, SIXTEEN_CUS], ids=["default", "16 CUs"])
def test_the_conv_after_a_resident_conv_has_its_kernels_preloaded(tmp_path: Path, hw: dict) -> None:
    """A resident 1x1 (tiles 0..T-1 at t x K, every strip from word 0: its last tile reads
    [(T-1)K, TK)) then a 3x3 conv: the 3x3's first kernel tile fits below that tile, so it loads
    before the fence, and the resident conv's last tile loads it (`kernels_preloaded`; before,
    a resident conv's last tile counted as any word and the 3x3 loaded its kernels at its start,
    after the fence). The 3x3 is faster, the resident conv not slower, bit-exact on both engines."""
    c, k, k2 = (512, 64, 32) if not hw else (1024, 256, 64)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="a"), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="b")]
    inits = {"w1": rand(k, c, 1, 1, seed=1, scale=0.03), "b1": rand(k, seed=2, scale=0.1),
             "w2": rand(k2, k, 3, 3, seed=3, scale=0.05), "b2": rand(k2, seed=4, scale=0.1)}
    hw_file, path = _lower(model(nodes, {"x": [1, c, 14, 14]}, {"y": None}, inits), tmp_path, hw)
    text = path.read_text()
    assert "resident" in text and "kernels_preloaded" in _layer_line(text, "b")
    module, _ = load_model(path)
    apply_pipeline(module, "allocate-dram")
    a = conv_plan_of(next(op for op in module.ops if isinstance(op, tile.LayerOp) and op.sym_name.data == "a"))
    kw = a.shape.kernel_words
    assert last_kernel_slot(a, SnowflakeConfig.load(str(hw_file))) == ((a.tiles - 1) * kw, a.tiles * kw)
    on = _cycles(path, hw_file)
    assert _cycles(path, hw_file, "reference") == on
    off_path = tmp_path / "off.mlir"
    off_path.write_text(re.sub(r", (weights_before_fence|kernels_preloaded)", "", text))
    off = _cycles(off_path, hw_file)
    assert on["b"] < off["b"] and on["a"] <= off["a"], (on, off)  # 16 CUs: b 47,134 -> 43,095
