"""Interleaves written in place (issue 36 items 1 and 4): a ConvTranspose's phase convs, and a
nearest x2 upsampling's identity phase convs (resize-to-conv-transpose), each write their pixels of
the result through the write-back's address steps (pixel stride s, row stride s; the output
region's `pixels`), so no host interleave or Resize remains. Exporter-style models (onnx.helper):
each is bit-exact against the golden model on the machine, close to onnxruntime, and its end-to-end
timeline holds no host time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn, tile
from snowir.driver.model_api import compile as compile_model
from snowir.frontend.onnx_import import import_model
from snowir.passes.pipelines import NNPreparePass
from snowir.tile.placement import output_pixels, regions_of
from tests.onnx_util import model, rand, tile_level, tile_to_asm

N = helper.make_node
C = 16

# (name, ConvTranspose attributes, output channels per group, kernel)
TRANSPOSES = [
    ("k4_s2_p1", dict(strides=[2, 2], pads=[1, 1, 1, 1]), 16, 4),
    ("k3_s2_p1_op1", dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), 16, 3),
    ("k2_s2", dict(strides=[2, 2]), 16, 2),
    ("groups", dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2), 16, 4),
]


def _transpose_model(attrs: dict, mg: int, k: int, size: int = 6) -> onnx.ModelProto:
    g = attrs.get("group", 1)
    nodes = [N("Conv", ["x", "w0", "b0"], ["h"], pads=[1, 1, 1, 1]), N("Relu", ["h"], ["r"]),
             N("ConvTranspose", ["r", "w", "b"], ["t"], name="up", kernel_shape=[k, k], **attrs),
             N("Relu", ["t"], ["u"]), N("Conv", ["u", "w1", "b1"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, {"x": [1, 8, size, size]}, {"y": None},
                 {"w0": rand(C, 8, 3, 3, seed=5, scale=0.25), "b0": rand(C, seed=6, scale=0.1),
                  "w": rand(C, mg, k, k, seed=1, scale=0.25), "b": rand(mg * g, seed=2, scale=0.1),
                  "w1": rand(16, mg * g, 3, 3, seed=7, scale=0.1), "b1": rand(16, seed=8, scale=0.1)})


def _upsample_model(consumer: str, op_type: str = "Resize", **attrs) -> onnx.ModelProto:
    """A YOLO / FPN neck, small: conv -> nearest x2 -> a conv, or a concat with a finer branch
    (then a conv over the concat)."""
    c = 32
    up = [N(op_type, ["r", "", "sc"] if op_type == "Resize" else ["r", "sc"], ["u"], name="up", mode="nearest", **attrs)]
    nodes = [N("Conv", ["x", "w0", "b0"], ["h"], pads=[1, 1, 1, 1]), N("Relu", ["h"], ["r"]), *up]
    inits = {"w0": rand(c, 8, 3, 3, seed=5, scale=0.25), "b0": rand(c, seed=6, scale=0.1),
             "sc": np.array([1, 1, 2, 2], np.float32)}
    inputs = {"x": [1, 8, 6, 6]}
    if consumer == "concat":
        nodes += [N("Conv", ["x2", "w2", "b2"], ["h2"], pads=[1, 1, 1, 1]), N("Concat", ["u", "h2"], ["cat"], axis=1)]
        inits |= {"w2": rand(16, 8, 3, 3, seed=9, scale=0.25), "b2": rand(16, seed=10, scale=0.1)}
        inputs["x2"] = [1, 8, 12, 12]
        last, cin = "cat", c + 16
    else:
        last, cin = "u", c
    nodes.append(N("Conv", [last, "w1", "b1"], ["y"], pads=[1, 1, 1, 1]))
    inits |= {"w1": rand(16, cin, 3, 3, seed=7, scale=0.1), "b1": rand(16, seed=8, scale=0.1)}
    return model(nodes, inputs, {"y": None}, inits, opset=13 if op_type == "Resize" else 9)


def _ort(m: onnx.ModelProto, xs: list[np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})[0]


def _runs_in_place(m: onnx.ModelProto, xs: list[np.ndarray], phases: int) -> None:
    """The interleave is placed on the device and its phase convs write it in place; the machine is
    bit-exact, close to onnxruntime, and the end-to-end timeline has no host time."""
    compiled = compile_model(m)
    module = compiled.module
    d2s = [op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp)]
    assert len(d2s) == 1 and d2s[0].attributes["place"].data == "snowflake", d2s[0].attributes.get("host_reason")
    assert not any(isinstance(op, nn.HostOp | nn.ConvTranspose2dOp) for op in module.walk())
    assert not any(op.attributes.get("place") == nn.StringAttr("host") for op in module.walk())
    result = compiled.run(xs if len(xs) > 1 else xs[0], check=True)
    check = result.report.check
    assert check is not None and check.golden_bit_exact, check
    assert np.abs(result.outputs[0] - _ort(m, xs)).max() < 0.05  # Q8.8: a few LSBs through three layers
    total = result.report.total
    assert total.host_ms == 0 and total.end_to_end_ms == pytest.approx(total.ms + total.round_trip_ms)
    assert len(d2s[0].inputs) == phases


@pytest.mark.parametrize("name, attrs, mg, k", TRANSPOSES, ids=[t[0] for t in TRANSPOSES])
def test_conv_transpose_phases_write_the_interleave_in_place(name: str, attrs: dict, mg: int, k: int) -> None:
    _runs_in_place(_transpose_model(attrs, mg, k), [rand(1, 8, 6, 6, seed=3)], 4)


@pytest.mark.parametrize("consumer", ["conv", "concat"])
def test_nearest_upsampling_runs_on_the_device_in_place(consumer: str) -> None:
    m = _upsample_model(consumer)
    xs = [rand(1, 8, 6, 6, seed=3)] + ([rand(1, 8, 12, 12, seed=4)] if consumer == "concat" else [])
    _runs_in_place(m, xs, 4)


def test_an_opset_9_upsample_runs_on_the_device_too() -> None:
    _runs_in_place(_upsample_model("conv", "Upsample"), [rand(1, 8, 6, 6, seed=3)], 4)


@pytest.mark.parametrize("attrs, why", [
    (dict(mode="linear"), "Resize mode linear: interpolation weights"),
    (dict(coordinate_transformation_mode="half_pixel", nearest_mode="floor"), "not pixel y from y div 2"),
])
def test_other_resizes_stay_on_the_host_with_their_reason(attrs: dict, why: str) -> None:
    mode = attrs.pop("mode", "nearest")
    m = _upsample_model("conv")
    up = next(n for n in m.graph.node if n.op_type == "Resize")
    del up.attribute[:]
    up.attribute.extend([helper.make_attribute("mode", mode)] + [helper.make_attribute(k, v) for k, v in attrs.items()])
    module = import_model(m)
    NNPreparePass().apply(None, module)
    host = [op for op in module.walk() if isinstance(op, nn.HostOp)]
    assert len(host) == 1 and why in host[0].attributes["host_reason"].data
    assert host[0].attributes["place"].data == "host"


def _tile_text(tmp_path: Path) -> str:
    return tile_level(_transpose_model(*TRANSPOSES[0][1:]), tmp_path)


def test_the_tile_ir_records_each_phase_s_pixels_of_one_tensor() -> None:
    from snowir.passes.convert.nn_to_tile import NNToTilePass

    module = import_model(_transpose_model(*TRANSPOSES[0][1:]))
    NNPreparePass().apply(None, module)
    NNToTilePass().apply(None, module)
    layers = [op for op in module.ops if isinstance(op, tile.LayerOp)]
    pixels = [output_pixels(regions_of(op)["output"]) for op in layers]
    assert [p for p in pixels if p is not None] == [(0, 0, 2, 2, 12, 12), (0, 1, 2, 2, 12, 12), (1, 0, 2, 2, 12, 12),
                                                    (1, 1, 2, 2, 12, 12)]
    # each region spans the whole 12x12x16 tensor
    assert {regions_of(op)["output"].size.value.data for op, p in zip(layers, pixels) if p} == {2 * 12 * 12 * 16}


def test_an_edited_phase_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """Two phases writing the same pixels: the DRAM plan's verifier names both; two phases swapped
    (still disjoint) disagree with the graph's interleave: refused, naming what to edit instead."""
    text = _tile_text(tmp_path)
    a, b = "pixels = array<i64: 0, 1, 2, 2, 12, 12>", "pixels = array<i64: 1, 0, 2, 2, 12, 12>"
    assert a in text and b in text
    code, err = tile_to_asm(text.replace(a, b), tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "at pixels [1, 0, 2, 2] of tensor" in err and "writes too" in err
    code, err = tile_to_asm(text.replace(a, "@@").replace(b, a).replace("@@", b), tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "pixels [1, 0, 2, 2, 12, 12] where the graph places its output at [0, 1, 2, 2, 12, 12]" in err
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err


def test_one_program_per_layer_reads_each_phase_back(tmp_path: Path, capsys) -> None:
    """whole-model=false (each layer its own DRAM): each phase conv's output region is the whole
    result, the runner reads the phase's pixels back and the host assembles the interleave."""
    import json

    from tests.onnx_util import snow_run

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(_upsample_model("concat"), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report),
                     "--pipeline", "snowflake-lower{whole-model=false}"]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["total"]["host_ms"] == 0


# ---- one merged conv writing every phase in place through the CU stride (method cu-stride) ----

# (name, ConvTranspose attributes, input channels, output channels M, kernel (kh, kw)): sx·M <= 4
# vMACs a CU, sy <= 4 CUs, the phase grid exactly the result (no crop)
CU_STRIDE = [
    ("k2_s2_m1", dict(strides=[2, 2]), 24, 1, (2, 2)),  # PP-OCRv4 det's head, small
    ("k2_s2_m2", dict(strides=[2, 2]), 16, 2, (2, 2)),
    ("k4_s4_m1", dict(strides=[4, 4]), 16, 1, (4, 4)),  # four phase rows: every CU
    ("k2x1_s2x1_m4", dict(strides=[2, 1]), 16, 4, (2, 1)),  # a whole CU a phase row
]


def _head_model(attrs: dict, c: int, mg: int, k: tuple[int, int], size: int = 6) -> onnx.ModelProto:
    """A segmentation head: conv -> ReLU -> ConvTranspose to M channels, the model's output."""
    nodes = [N("Conv", ["x", "w0", "b0"], ["h"], pads=[1, 1, 1, 1]), N("Relu", ["h"], ["r"]),
             N("ConvTranspose", ["r", "w", "b"], ["y"], name="up", kernel_shape=list(k), **attrs)]
    return model(nodes, {"x": [1, 16, size, size]}, {"y": None},
                 {"w0": rand(c, 16, 3, 3, seed=5, scale=0.25), "b0": rand(c, seed=6, scale=0.1),
                  "w": rand(c, mg, *k, seed=1, scale=0.25), "b": rand(mg, seed=2, scale=0.1)})


@pytest.mark.parametrize("name, attrs, c, mg, k", CU_STRIDE, ids=[t[0] for t in CU_STRIDE])
def test_a_merged_conv_writes_its_interleave_in_place(name: str, attrs: dict, c: int, mg: int, k: tuple) -> None:
    """The cost model takes cu-stride (the merged conv's device time, no host words); the interleave
    of its one input is placed on the device, nothing runs on the host, bit-exact."""
    m = _head_model(attrs, c, mg, k)
    conv = next(op for op in compile_model(m).module.walk() if isinstance(op, nn.Conv2dOp)
                and "conv_transpose" in op.attributes)
    assert conv.attributes["conv_transpose"].data.startswith("cu-stride"), conv.attributes["conv_transpose"]
    _runs_in_place(m, [rand(1, 16, 6, 6, seed=3)], 1)


@pytest.mark.parametrize("name, attrs, mg, k, why", [
    ("m3", dict(strides=[2, 2]), 3, (2, 2), "a phase row's 2x3 channels exceed a CU's 4 vMACs"),
    ("k3_s2_p1_op1", dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), 1, (3, 3),
     "phases computed past the result (cropped)"),
])
def test_where_cu_stride_cannot_the_old_choice_stands(name: str, attrs: dict, mg: int, k: tuple, why: str) -> None:
    """Refused in one line in the conv's `conv_transpose`; the cheapest other method runs (here the
    phases in place), bit-exact."""
    m = _head_model(attrs, 16, mg, k)
    compiled = compile_model(m)
    conv = next(op for op in compiled.module.walk() if isinstance(op, nn.Conv2dOp) and "conv_transpose" in op.attributes)
    text = conv.attributes["conv_transpose"].data
    assert not text.startswith("cu-stride") and text.endswith(f"; cu-stride: {why}"), text
    x = rand(1, 16, 6, 6, seed=3)
    result = compiled.run(x, check=True)
    assert result.report.check.golden_bit_exact
    assert np.abs(result.outputs[0] - _ort(m, [x])).max() < 0.05


def test_method_sub_pixel_leaves_the_interleave_to_the_host() -> None:
    """Asked for, sub-pixel is the merged conv with the host's interleave: the result is the model's
    output, so the host applies it as it reads the grid back (`host-read`, no host time); placed on
    the host in @main, it is a host layer again, the same words."""
    from xdsl.dialects.builtin import StringAttr

    from snowir.passes.nn.conv_transpose_to_conv import ConvTransposeToConvPass

    m = _head_model(*CU_STRIDE[0][1:])
    compiled = compile_model(m, pipeline="conv-transpose-to-conv{method=sub-pixel}")
    d2s = next(op for op in compiled.module.walk() if isinstance(op, nn.DepthToSpaceOp))
    assert d2s.attributes["place"].data == "host-read" and "host_reason" not in d2s.attributes
    x = rand(1, 16, 6, 6, seed=3)
    result = compiled.run(x, check=True)
    assert result.report.check.golden_bit_exact and result.report.total.host_ms == 0
    module = import_model(m)
    ConvTransposeToConvPass(method="sub-pixel").apply(None, module)
    d2s = next(op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp))
    d2s.attributes["place"] = StringAttr("host")  # the user's edit
    layer = compile_model(module).run(x, check=True)
    assert layer.report.check.golden_bit_exact and layer.report.total.host_ms > 0
    assert np.array_equal(layer.outputs[0], result.outputs[0])


def test_a_machine_of_one_cu_keeps_the_host_interleave() -> None:
    """sy = 2 phase rows on a 1-CU machine: partition-host's refusal (plan/shapes.phases_refusal) is
    the cost model's, so cu-stride is not offered and the cheapest other method runs."""
    from snowir.hw import SnowflakeConfig
    from snowir.passes.nn.conv_transpose_to_conv import cu_stride_refusal

    ct = next(op for op in import_model(_head_model(*CU_STRIDE[0][1:])).walk() if isinstance(op, nn.ConvTranspose2dOp))
    assert cu_stride_refusal(ct, SnowflakeConfig(cus=1)) == "its 2 phase rows exceed the 1 CUs"
    assert cu_stride_refusal(ct, SnowflakeConfig()) is None


def test_an_edited_phases_placement_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """The tile IR records the merged conv's placement once (`phases` on its output region); the
    kernels' vMACs, the CU stride and the mask follow from it. An edit that disagrees with the
    graph's interleave, or that the conv cannot follow, is refused in one line."""
    text = tile_level(_head_model(*CU_STRIDE[0][1:]), tmp_path)
    placed = "phases = array<i64: 2, 2, 12, 12>"
    assert placed in text
    for edit, message in [(placed.replace("2, 2, 12", "1, 4, 12"), "phases [1, 4, 12, 12] where the graph places "
                                                                   "its output at [2, 2, 12, 12]"),
                          (", " + placed, "phases [] where the graph places its output at [2, 2, 12, 12]")]:
        code, err = tile_to_asm(text.replace(", " + placed if edit.startswith(",") else placed,
                                             "" if edit.startswith(",") else edit), tmp_path, capsys)
        assert code != 0 and len(err.strip().splitlines()) == 1 and message in err, err
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err


def test_one_program_per_layer_reads_the_merged_phases_back(tmp_path: Path, capsys) -> None:
    """whole-model=false: the merged conv's region is the whole result; the runner reads its
    channels back from the interleaved pixels."""
    import json

    from tests.onnx_util import snow_run

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(_head_model(*CU_STRIDE[1][1:]), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report),
                     "--pipeline", "snowflake-lower{whole-model=false}"]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["total"]["host_ms"] == 0
