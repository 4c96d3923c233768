"""ConvTranspose on the device (issue 36 item 1): imported as nn.conv_transpose2d, rewritten by
conv-transpose-to-conv into a stride-1 device conv over every output phase and an interleave.
Each exporter-style model runs on the machine model bit-exact with the golden model, the golden
result equals the golden ConvTranspose (exact sums, one write-back rounding), and the output is
within Q8.8 tolerance of onnxruntime fp32."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.driver.model_api import compile as compile_model
from snowir.fixedpoint import quantize, saturate, writeback_rounded
from snowir.frontend.onnx_import import import_model
from snowir.golden import Golden, conv_transpose_sum, run_golden
from snowir.host_model import host_bytes, host_ms
from snowir.hw import SnowflakeConfig
from snowir.passes.nn.conv_transpose_to_conv import ConvTransposeToConvPass, axis_plan, plans
from snowir.passes.nn.quantize import QuantizePass
from tests.onnx_util import model, ort_run, rand

N = helper.make_node
C, HW = 8, 8

# (name, attributes, input channels, output channels per group, kernel)
CASES = [
    ("s1_k3_pads", dict(strides=[1, 1], pads=[1, 1, 1, 1]), 8, 4, 3),
    ("s2_k2", dict(strides=[2, 2]), 8, 4, 2),
    ("s2_k3_pads_outpad", dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), 8, 4, 3),
    ("s2_k4_p1", dict(strides=[2, 2], pads=[1, 1, 1, 1]), 8, 6, 4),
    ("s3_k3_asymmetric", dict(strides=[3, 3], pads=[0, 2, 1, 0], output_padding=[2, 1]), 8, 4, 3),
    ("s3_k4_dilated", dict(strides=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]), 8, 4, 4),
    ("s2_k3_dilated", dict(strides=[2, 2], dilations=[2, 2]), 8, 4, 3),
    ("s2x1_output_shape", dict(strides=[2, 1], output_shape=[17, 9]), 8, 4, 2),
    ("s2_same_lower", dict(strides=[2, 2], auto_pad="SAME_LOWER"), 8, 4, 3),
    ("grouped", dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2), 8, 8, 4),
    ("depthwise", dict(strides=[2, 2], pads=[1, 1, 1, 1], group=16), 16, 1, 4),
    # waifu2x UpConv7's 4x4/2 with pads 3: the crop cuts the phase grid inside the input
    ("s2_k4_p3", dict(strides=[2, 2], pads=[3, 3, 3, 3]), 8, 4, 4),
]


def _model(attrs: dict, c: int, mg: int, k: int, relu: bool = False) -> onnx.ModelProto:
    g = attrs.get("group", 1)
    nodes = [N("Conv", ["x", "w0", "b0"], ["h"], pads=[1, 1, 1, 1]), N("Relu", ["h"], ["r"]),
             N("ConvTranspose", ["r", "w", "b"], ["t" if relu else "y"], kernel_shape=[k, k], **attrs)]
    if relu:
        nodes.append(N("Relu", ["t"], ["y"]))
    return model(nodes, {"x": [1, C, HW, HW]}, {"y": None},
                 {"w0": rand(c, C, 3, 3, seed=5, scale=0.25), "b0": rand(c, seed=6, scale=0.1),
                  "w": rand(c, mg, k, k, seed=1, scale=0.25), "b": rand(mg * g, seed=2, scale=0.1)})


@pytest.mark.parametrize("name, attrs, c, mg, k", CASES, ids=[c[0] for c in CASES])
def test_conv_transpose_runs_on_the_device_bit_exact(name: str, attrs: dict, c: int, mg: int, k: int) -> None:
    m = _model(attrs, c, mg, k)
    onnx.checker.check_model(m)
    x = rand(1, C, HW, HW, seed=3)
    compiled = compile_model(m)
    convs = [op for op in compiled.module.walk() if isinstance(op, nn.Conv2dOp) and "conv_transpose" in op.attributes]
    assert convs and not any(isinstance(op, nn.ConvTranspose2dOp | nn.HostOp) for op in compiled.module.walk())
    result = compiled.run(x, check=True)
    check = result.report.check
    assert check is not None and check.golden_bit_exact, check
    ref = ort_run(m, x)
    assert result.outputs[0].shape == ref.shape
    assert np.abs(result.outputs[0] - ref).max() < 0.05  # Q8.8: a few LSBs through two layers
    # placement: a grouped conv with few kernels per group is the host's, as any conv (partition-host)
    if name != "grouped":
        assert all(op.attributes["place"].data == "snowflake" for op in convs), name


METHOD_CASES = [("zero-insertion", CASES[i]) for i in (3, 4, 5, 7, 10)] + \
    [("phases", CASES[i]) for i in (2, 4, 6, 10, 11)]


@pytest.mark.parametrize("method, case", METHOD_CASES, ids=[f"{m}-{c[0]}" for m, c in METHOD_CASES])
def test_each_method_runs_on_the_device_bit_exact(method: str, case: tuple) -> None:
    name, attrs, c, mg, k = case
    m = _model(attrs, c, mg, k)
    x = rand(1, C, HW, HW, seed=3)
    compiled = compile_model(m, pipeline=f"conv-transpose-to-conv{{method={method}}}")
    layout = [op for op in compiled.module.walk() if isinstance(op, nn.ZeroInsertOp | nn.DepthToSpaceOp)]
    # the zero insertion's layout is the host's; the phases write the interleave in place
    assert len(layout) == 1 and layout[0].attributes["place"].data == ("host" if method == "zero-insertion" else "snowflake")
    if method == "zero-insertion":
        assert isinstance(layout[0], nn.ZeroInsertOp)
    else:  # one conv per phase, each with no more taps than the merged conv's sub-kernels
        assert len(layout[0].inputs) == attrs["strides"][0] * attrs["strides"][1]
    result = compiled.run(x, check=True)
    assert result.report.check.golden_bit_exact, result.report.check
    assert np.abs(result.outputs[0] - ort_run(m, x)).max() < 0.05


def test_the_cost_model_takes_zero_insertion_for_few_input_channels() -> None:
    """2 -> 32 channels read by a conv: zero insertion's host layout moves the 2-channel input,
    sub-pixel's interleave the 32-channel output (and its 2-channel traces use few lanes either
    way). As the model's output, the host would read sub-pixel's interleave at no cost of its own
    (`host-read`): then the merged conv wins."""
    nodes = [N("ConvTranspose", ["x", "w", "b"], ["t"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             N("Conv", ["t", "w1", "b1"], ["y"], kernel_shape=[1, 1])]
    inits = {"w": rand(2, 32, 3, 3, scale=0.3), "b": rand(32, seed=2, scale=0.1),
             "w1": rand(16, 32, 1, 1, seed=4, scale=0.1), "b1": rand(16, seed=5, scale=0.1)}
    m = model(nodes, {"x": [1, 2, HW, HW]}, {"y": None}, inits)
    ct = next(op for op in import_model(m).walk() if isinstance(op, nn.ConvTranspose2dOp))
    ranked = {p.kind: p for p in plans(ct, SnowflakeConfig())}
    assert list(ranked)[0] == "zero-insertion"
    assert ranked["zero-insertion"].host_words < min(ranked["sub-pixel"].host_words, ranked["phases"].host_words)
    alone = model(nodes[:1], {"x": [1, 2, HW, HW]}, {"t": None}, inits)
    ct = next(op for op in import_model(alone).walk() if isinstance(op, nn.ConvTranspose2dOp))
    assert [p.kind for p in plans(ct, SnowflakeConfig())][0] == "sub-pixel"
    compiled = compile_model(m)
    conv = next(op for op in compiled.module.walk()
                if isinstance(op, nn.Conv2dOp) and "conv_transpose" in op.attributes)
    assert conv.attributes["conv_transpose"].data.startswith("zero-insertion")
    x = rand(1, 2, HW, HW, seed=3)
    result = compiled.run(x, check=True)
    assert result.report.check.golden_bit_exact
    assert np.abs(result.outputs[0] - ort_run(m, x)).max() < 0.05


def _fixed_conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict, wf: int, oh_ow) -> np.ndarray:
    """ConvTranspose in Q8.8 (weights in Q.wf): exact sums of the products, one rounding."""
    pads = attrs.get("pads", [0, 0, 0, 0])
    acc = conv_transpose_sum(quantize(x, 8), quantize(w, wf), attrs.get("strides", [1, 1]), pads,
                             attrs.get("dilations", [1, 1]), attrs.get("group", 1), oh_ow, dtype=np.float64)
    return saturate(writeback_rounded(acc.astype(np.int64), quantize(b, 8).astype(np.int64).reshape(1, -1, 1, 1),
                                      0, wf), False)


@pytest.mark.parametrize("name, attrs, c, mg, k", [CASES[i] for i in (3, 4, 5, 10)], ids=["s2_k4", "s3_asym", "s3_dil", "dw"])
def test_decomposed_convs_equal_the_golden_conv_transpose(name: str, attrs: dict, c: int, mg: int, k: int) -> None:
    g = attrs.get("group", 1)
    w, b = rand(c, mg, k, k, seed=1, scale=0.25), rand(mg * g, seed=2, scale=0.1)
    m = model([N("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[k, k], **attrs)],
              {"x": [1, c, HW, HW]}, {"y": None}, {"w": w, "b": b})
    x = rand(1, c, HW, HW, seed=3)
    oh_ow = ort_run(m, x).shape[2:]
    # the golden model's own ConvTranspose (weights quantised as the activations: Q8.8)
    direct = import_model(m)
    QuantizePass().apply(None, direct)
    golden = Golden(direct)
    env = golden.inputs([x])
    for op in golden.main.body.block.ops:
        if op.name.startswith("nn."):
            golden.step(op, env)
    ct = next(op for op in direct.walk() if isinstance(op, nn.ConvTranspose2dOp))
    assert np.array_equal(env[ct.output].words, _fixed_conv_transpose(x, w, b, attrs, 8, oh_ow))
    # every decomposition, quantised by nn-prepare (weights in their own format): the same bits
    for method in [p.kind for p in plans(ct, SnowflakeConfig())]:
        compiled = compile_model(m, pipeline=f"conv-transpose-to-conv{{method={method}}}")
        conv = next(op for op in compiled.module.walk() if isinstance(op, nn.Conv2dOp))
        assert conv.attributes["conv_transpose"].data.startswith(method)
        got = compiled.run(x, engine="golden").outputs[0]
        wf = conv.attributes["w_frac"].value.data
        assert np.array_equal(quantize(got, 8), _fixed_conv_transpose(x, w, b, attrs, wf, oh_ow)), method


def test_relu_after_the_transposed_conv_folds_into_the_device_conv() -> None:
    m = _model(dict(strides=[2, 2], pads=[1, 1, 1, 1]), 8, 4, 4, relu=True)
    compiled = compile_model(m)
    ops = [op for op in compiled.module.walk() if op.name.startswith("nn.") and not isinstance(op, nn.ConstantOp)]
    assert [op.name for op in ops[-2:]] == ["nn.conv2d", "nn.depth_to_space"] and not any(op.name == "nn.relu" for op in ops)
    assert ops[-2].relu is not None
    x = rand(1, C, HW, HW, seed=3)
    result = compiled.run(x, check=True)
    assert result.report.check.golden_bit_exact
    assert np.abs(result.outputs[0] - ort_run(m, x)).max() < 0.05


def test_sub_pixel_is_a_quarter_of_zero_insertion_for_a_4x4_stride_2() -> None:
    m = model([N("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])],
              {"x": [1, 16, 8, 8]}, {"y": None}, {"w": rand(16, 3, 4, 4)})
    ct = next(op for op in import_model(m).walk() if isinstance(op, nn.ConvTranspose2dOp))
    ranked = {p.kind: p for p in plans(ct, SnowflakeConfig())}
    sub, phases, zero = ranked["sub-pixel"], ranked["phases"], ranked["zero-insertion"]
    # one conv per result phase: 2x2 taps too (k = 2s), over exactly its 8 of the result's 16 rows (columns)
    assert phases.macs == 3 * 16 * (8 * 2 + 8 * 2) ** 2 < sub.macs and phases.host_words == 0
    # 2x2 sub-kernels over a 9x9 phase grid (one row and column of it outside the crop) vs 4x4 taps at 16x16
    assert sub.macs == 4 * 3 * 9 * 9 * 16 * 2 * 2 and zero.macs == 3 * 16 * 16 * 16 * 4 * 4


@pytest.mark.parametrize("size, k, s, d, top, out", [(8, 4, 2, 1, 3, 13), (8, 3, 2, 2, 0, 19), (8, 2, 3, 1, -1, 26),
                                                     (5, 3, 2, 1, 6, 3)])
def test_axis_plan_reads_every_tap_once(size: int, k: int, s: int, d: int, top: int, out: int) -> None:
    """Along one axis, output y of the plan's conv + interleave sums exactly the (input, tap)
    pairs with s·i + d·k − top = y: each tap in one phase at one sub-kernel index."""
    p = axis_plan(size, k, s, d, top, out)
    for y in range(out):
        grid, phase = divmod(y + p.offset, s)
        got = sorted((grid + u - p.pad_lo, kk) for kk, a, u in p.taps if a == phase and 0 <= grid + u - p.pad_lo < size)
        want = sorted((i, kk) for i in range(size) for kk in range(k) if s * i + d * kk - top == y)
        assert got == want, y
    assert p.out == size + p.pad_lo + p.pad_hi - p.length + 1 >= (out - 1 + p.offset) // s + 1


def test_the_merged_convs_interleave_is_priced_as_a_host_copy_of_16_bit_words() -> None:
    """One merged conv (method sub-pixel) writes a pixel's four phases together: the host interleaves,
    as it reads the grid back where it alone reads the result (the pass asks for `host-read` with the
    reason a host layer would keep; partition-host grants it here: the model's output), else as a
    layer priced as a copy of 16-bit words."""
    module = import_model(_model(dict(strides=[2, 2], pads=[1, 1, 1, 1]), 8, 4, 4))
    ConvTransposeToConvPass(method="sub-pixel").apply(None, module)
    d2s = next(op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp))
    assert d2s.attributes["place"].data == "host-read" and "merged conv" in d2s.attributes["host_reason"].data
    compiled = compile_model(_model(dict(strides=[2, 2], pads=[1, 1, 1, 1]), 8, 4, 4),
                             pipeline="conv-transpose-to-conv{method=sub-pixel}")
    d2s = next(op for op in compiled.module.walk() if isinstance(op, nn.DepthToSpaceOp))
    assert d2s.attributes["place"].data == "host-read" and "host_reason" not in d2s.attributes
    assert host_bytes(d2s) == 2 * (16 * 9 * 9 + 4 * 16 * 16) and host_ms(d2s) == host_bytes(d2s) / 1e6
    assert run_golden(compiled.module, rand(1, C, HW, HW, seed=3))[0].shape == (1, 4, 16, 16)


def test_calibrated_formats_move_through_the_interleave_unchanged() -> None:
    """format=auto: the interleave's input and output share one format (a permutation of words:
    the host copies them as they are), also when the crop drops the input's largest values."""
    from snowir.calibration import choose_formats
    from snowir.passes.pipelines import NNPreparePass

    module = import_model(_model(dict(strides=[2, 2], pads=[1, 1, 1, 1]), 8, 4, 4))
    NNPreparePass(quantize=False).apply(None, module)
    d2s = next(op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp))
    convs = [op for op in module.walk() if isinstance(op, nn.Conv2dOp)]
    peak = {v: 1.0 for op in module.walk() if op.name.startswith("nn.") for v in op.results}
    peak[d2s.inputs[0]] = 100.0  # the cropped grid row held the largest value
    frac, _ = choose_formats(module, peak, {op: 12 for op in convs}, 1.0)
    assert frac[d2s.inputs[0]] == frac[d2s.output] == 8


def test_an_unrewritten_conv_transpose_counts_the_taps_that_land() -> None:
    """A pipeline without conv-transpose-to-conv leaves nn.conv_transpose2d to the host: its
    MACs are the nn.host node's count (the (input, tap) pairs inside the output)."""
    from snowir.host_model import useful_macs

    node = N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    kept = import_model(model([node], {"x": [1, 8, 5, 5]}, {"y": [1, 16, 9, 9]}, {"w": rand(8, 16, 3, 3)}))
    host = import_model(model([node], {"x": [1, 8, 5, 5], "w": [8, 16, 3, 3]}, {"y": [1, 16, 9, 9]}, {}))
    ct = next(op for op in kept.walk() if isinstance(op, nn.ConvTranspose2dOp))
    node_op = next(op for op in host.walk() if isinstance(op, nn.HostOp))
    assert useful_macs(ct) == useful_macs(node_op) == 8 * 16 * 13 * 13


def _random_attrs(rng: np.random.Generator) -> tuple[dict, int, int, int, int]:
    """Attributes ONNX allows: kernel 1-4 per axis, stride 1-3, dilation 1-2, pads (may crop past
    the kernel), output_padding < max(stride, dilation), groups 1 / 2 / depthwise."""
    k = [int(v) for v in rng.integers(1, 5, 2)]
    s = [int(v) for v in rng.integers(1, 4, 2)]
    d = [int(v) for v in rng.integers(1, 3, 2)]
    span = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    pads = [int(rng.integers(0, span[i % 2] + 1)) for i in range(4)]
    outpad = [int(rng.integers(0, max(s[i], d[i]))) for i in range(2)]
    g, c, mg = [(1, 4, 3), (2, 4, 2), (4, 4, 1)][int(rng.integers(0, 3))]
    return dict(kernel_shape=k, strides=s, dilations=d, pads=pads, output_padding=outpad, group=g), c, mg, g, 5


# seed 256: a depthwise one whose phase convs, quantised alone, took more weight fraction bits than
# the kernel's (w_frac_max); CT_SEEDS=300 runs 300 (all pass)
@pytest.mark.parametrize("seed", [*range(int(os.environ.get("CT_SEEDS", 12))), 256])
def test_random_conv_transposes_decompose_exactly(seed: int) -> None:
    """Both decompositions of random ConvTransposes: float within 1e-4 of onnxruntime, and in
    fixed point the same words as the golden ConvTranspose (exact sums, one rounding)."""
    from snowir.fixedpoint import dequantize

    rng = np.random.default_rng(seed)
    attrs, c, mg, g, hw = _random_attrs(rng)
    while True:
        try:
            m = model([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": [1, c, hw, hw]}, {"y": None},
                      {"w": rand(c, mg, *attrs["kernel_shape"], seed=seed, scale=0.3), "b": rand(mg * g, seed=1, scale=0.1)})
            x = rand(1, c, hw, hw, seed=seed + 100)
            ref = ort_run(m, x)
            break
        except Exception:  # noqa: BLE001 - pads that crop the whole output: draw again
            attrs, c, mg, g, hw = _random_attrs(rng)
    w = numpy_weights(m)
    for method in ("sub-pixel", "phases", "zero-insertion"):
        module = import_model(m)
        ConvTransposeToConvPass(method=method).apply(None, module)
        assert np.abs(run_golden(module, x)[0] - ref).max() < 1e-4, (attrs, method)
        QuantizePass().apply(None, module)
        conv = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp))
        want = _fixed_conv_transpose(x, w["w"], w["b"], attrs, conv.attributes["w_frac"].value.data, ref.shape[2:])
        assert np.array_equal(quantize(run_golden(module, x)[0], 8), want), (attrs, method)
        assert np.array_equal(dequantize(want, 8), run_golden(module, x)[0])


def numpy_weights(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}


def _head(activation: str = "Sigmoid") -> onnx.ModelProto:
    """A detector head's end as Paddle exports it (PP-OCRv4 det): conv, ReLU, ConvTranspose 2x2/2
    to one channel, its BN as a Mul and an Add by per-channel constants, then the activation (the
    importer folds a BatchNormalization node into the ConvTranspose itself; these it cannot)."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="c0", pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
             n("ConvTranspose", ["r0", "wt", "bt"], ["t"], name="ct", strides=[2, 2], kernel_shape=[2, 2]),
             n("Mul", ["t", "k"], ["tk"], name="scale"), n("Add", ["tk", "s"], ["bn"], name="shift"),
             n(activation, ["bn"], ["y"], name="act")]
    inits = {"w0": rand(24, 8, 3, 3, scale=0.1), "b0": rand(24, seed=1, scale=0.1), "wt": rand(24, 1, 2, 2, seed=2, scale=0.3),
             "bt": rand(1, seed=3, scale=0.1), "k": np.full((1, 1, 1, 1), 1.4, np.float32),
             "s": np.full((1, 1, 1, 1), 0.15, np.float32)}
    return model(nodes, {"x": [1, 8, 12, 20]}, {"y": [1, 1, 24, 40]}, inits)


@pytest.mark.parametrize("unit", [0, 1])
def test_a_bn_after_the_interleave_folds_into_the_phases(unit: int) -> None:
    """The BN after a ConvTranspose's interleave scales every phase of its channel: it folds into
    the phase conv (fold-batch-norm), not a 1x1 conv over the interleaved map; with the
    write-back activation unit the sigmoid after it goes into the phase conv too. Golden and
    machine bit-exact, close to onnxruntime."""
    hw = SnowflakeConfig(writeback_activation=unit)
    c = compile_model(_head(), hw=hw)
    convs = [op for op in c.module.walk() if isinstance(op, nn.Conv2dOp)]
    assert not [op for op in c.module.walk() if isinstance(op, (nn.BatchNormOp, nn.MulOp, nn.AddOp))]
    assert [op.attributes["onnx_node"].data for op in convs] == ["c0", "ct"], [str(op.attributes.get("onnx_node")) for op in convs]
    ct = convs[1]
    assert ("act" in ct.attributes and "sigmoid" in str(ct.attributes["act"])) == bool(unit)
    x = rand(1, 8, 12, 20, seed=9)
    r = c.run(x, check=True)
    assert r.report.check.golden_bit_exact
    got = r.outputs[0] if isinstance(r.outputs, list) else next(iter(r.outputs.values()))
    np.testing.assert_allclose(got, ort_run(_head(), x), atol=0.01)


def test_the_scale_folds_into_every_phase_conv() -> None:
    """With the phases method the interleave reads four convs: the scale and shift fold into each,
    and the result is onnxruntime's."""
    from snowir.passes.nn.fold_batch_norm import FoldBatchNormPass

    module = import_model(_head())
    ConvTransposeToConvPass(method="phases").apply(None, module)
    FoldBatchNormPass().apply(None, module)
    assert not [op for op in module.walk() if isinstance(op, (nn.MulOp, nn.AddOp))]
    (d2s,) = [op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp)]
    assert len(d2s.inputs) == 4 and all(isinstance(v.owner, nn.Conv2dOp) for v in d2s.inputs)
    x = rand(1, 8, 12, 20, seed=9)
    (y,) = Golden(module).run(x)
    np.testing.assert_allclose(y, ort_run(_head(), x), rtol=1e-4, atol=1e-4)


def test_a_relu_after_the_interleave_goes_into_the_phases() -> None:
    """ConvTranspose, its BN (folded into the phase convs), then ReLU: the ReLU is applied at the
    phase convs' write-back (it commutes with the interleave), not left to the host over the
    interleaved map; golden and machine bit-exact, close to onnxruntime."""
    c = compile_model(_head("Relu"))
    assert not [op for op in c.module.walk() if isinstance(op, (nn.ReluOp, nn.MulOp, nn.AddOp))]
    (ct,) = [op for op in c.module.walk() if isinstance(op, nn.Conv2dOp) and op.attributes["onnx_node"].data == "ct"]
    assert ct.relu is not None
    x = rand(1, 8, 12, 20, seed=9)
    r = c.run(x, check=True)
    assert r.report.check.golden_bit_exact
    got = r.outputs[0] if isinstance(r.outputs, list) else next(iter(r.outputs.values()))
    np.testing.assert_allclose(got, ort_run(_head("Relu"), x), atol=0.02)  # outputs to ~2.2: a few Q8.8 LSBs


@pytest.mark.parametrize("tail, free", [([], True), (["Relu"], True), (["Relu", "Add"], False)])
def test_the_host_read_is_priced_only_where_no_later_pass_puts_a_reader_on_the_device(tail: list, free: bool) -> None:
    """The merged conv's interleave costs no host words where the model's output is all that reads
    the result, through a ReLU (moved before the interleave): the host applies it as it copies the
    result back (`host-read`). A residual Add after it (an FPN's, CenterFace's) looks like the host's
    now but becomes a device conv (fuse-residual-add): the interleave is priced as the host's copy."""
    nodes = [N("ConvTranspose", ["x", "w"], ["t"], kernel_shape=[4, 4], strides=[2, 2], pads=[3, 3, 3, 3])]
    last, inputs = "t", {"x": [1, 16, 8, 8]}
    if "Relu" in tail:
        nodes.append(N("Relu", ["t"], ["r"]))
        last = "r"
    if "Add" in tail:
        nodes.append(N("Add", ["r", "z"], ["y"]))
        last, inputs["z"] = "y", [1, 3, 12, 12]
    m = model(nodes, inputs, {last: None}, {"w": rand(16, 3, 4, 4, scale=0.1)})
    ct = next(op for op in import_model(m).walk() if isinstance(op, nn.ConvTranspose2dOp))
    sub_pixel = next(p for p in plans(ct, SnowflakeConfig()) if p.kind == "sub-pixel")
    assert (sub_pixel.host_words == 0) == free, sub_pixel
