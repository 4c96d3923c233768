"""
Where a conv's weight image keeps its biases (issue 38 item 1): the VMOV select `mbias` (the bias
operand from the maps buffer, docs/isa.md) on both engines, and the weights region's `biases`
decision (kernel / maps): chosen by cost, followed bit-exact (COOP and INDP, with and without a
bypass, both engines), faster where it lets the kernels stay resident or INDP run, its edits
followed or refused in one line, and the golden model reading a `maps` image in a whole model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import StringAttr
from xdsl.utils.exceptions import PassFailedException, VerifyException

from snowir import api
from snowir.dialects import snowflake_asm as sf
from snowir.driver.model_api import compile as compile_model
from snowir.hw import SnowflakeConfig
from snowir.machine.encoding import EncodingError, decode, encode
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.plan.conv import plan_conv
from snowir.plan.shapes import ConvShape, LoweringError
from snowir.tile.build import bare_conv_layer
from snowir.tile.edit import empty_bodies
from snowir.tile.placement import regions_of
from test_lowering import conv_case

HW = SnowflakeConfig()
CUS16 = SnowflakeConfig(cus=16)
NARROW = SnowflakeConfig(maps_bank_bytes=8192, weights_buffer_bytes=2048)  # 4096-word banks, 1024-word weights


# ---------------------------------------------------------------------------------- the ISA

def _mbias_program(mode: str, shared: bool, block: np.ndarray, stride: int | None) -> str:
    """Zero maps and weights, the bias block at maps word 100 of every CU, `vmov mbias`, one MAC
    written back: the output is the bias operand each vMAC (lane) got."""
    words = ", ".join(str(int(v)) for v in block)
    out = 4 * 16 * 16 * 2
    set_stride = f"  snowflake_asm.movi r6, {stride}\n  snowflake_asm.vmov {mode} stride r6\n" if stride else ""
    return f"""
snowflake_asm.segment input @x at 0 size 512
snowflake_asm.segment data @b at 512 size {2 * block.size} = dense<[{words}]> : tensor<{block.size}xi16>
snowflake_asm.segment output @y at {512 + 2 * block.size} size {out}
snowflake_asm.program @p {{
  snowflake_asm.movi r1, 0
  snowflake_asm.movi r2, 512
  snowflake_asm.movi r3, 256
  snowflake_asm.movi r4, {512 + 2 * block.size}
  snowflake_asm.movi r5, {block.size}
  snowflake_asm.movi r7, 100
  snowflake_asm.ld maps r0, r1, r3 unit 0 to all
  snowflake_asm.ld weights r0, r1, r3 unit 1 to all
  snowflake_asm.ld maps r7, r2, r5 unit 2 to all
{set_stride}  snowflake_asm.vmov {mode} mbias r7{' shared' if shared else ''}
  snowflake_asm.mac {mode} r4, r0, r0 trace 1 wb
}}
"""


@pytest.mark.parametrize("mode, shared, stride", [("coop", False, None), ("coop", True, None), ("indp", True, None),
                                                  ("indp", False, None), ("coop", False, 16)])
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vmov_mbias_reads_the_maps_buffer_as_bypass_does(mode: str, shared: bool, stride: int | None,
                                                           engine: str) -> None:
    """CU c reads at rs1 + c*S/2 (S the CU stride: the write-back layout read back, as `vmov
    bypass`), COOP word v to vMAC v, INDP words 16v..16v+15 to vMAC v's lanes; `shared`: every CU
    at rs1. With zero maps and weights the write-back is the bias each vMAC got."""
    indp = mode == "indp"
    per_cu = HW.vmacs_per_cu * (HW.lanes if indp else 1)
    step = 0 if shared else (stride or 2 * per_cu) // 2
    block = (np.arange((HW.cus - 1) * step + per_cu) * 3 + 1).astype(np.int16)
    module = api.parse_text(_mbias_program(mode, shared, block, stride))
    run = run_image(assemble(module, HW), HW, engine, {"x": np.zeros(256, np.int16)}, module=module)
    y = run.outputs["y"]
    s = stride or 2 * per_cu
    for c in range(HW.cus):  # CU c's write-back at c*S bytes: its per_cu words from block[c*step]
        got = y[c * s // 2:c * s // 2 + per_cu]
        assert np.array_equal(got, block[c * step:c * step + per_cu]), (c, got)


def test_mbias_stays_for_later_write_backs() -> None:
    """Unlike bypass, the bias operand is not consumed: a second write-back adds it again."""
    block = np.arange(16, dtype=np.int16) + 5
    text = _mbias_program("coop", False, block, None).replace(
        "  snowflake_asm.mac coop r4, r0, r0 trace 1 wb\n",
        "  snowflake_asm.mac coop r4, r0, r0 trace 1 wb\n  snowflake_asm.addi r4, r4, 32\n"
        "  snowflake_asm.mac coop r4, r0, r0 trace 1 wb\n")
    module = api.parse_text(text)
    y = run_image(assemble(module, HW), HW, "fast", {"x": np.zeros(256, np.int16)}, module=module).outputs["y"]
    assert np.array_equal(y[:16], block) and np.array_equal(y[16:32], block)


def test_mbias_encoding_and_its_shared_flag() -> None:
    """`shared` is bit 6, reserved unless the select is mbias (code 6): the verifier refuses it on
    another select, the decoder a word with the bit set, and the text round-trips."""
    op = sf.VmovOp(sf.VectorMode.INDP, sf.VmovSelect.MBIAS, 7, shared=True)
    op.verify()
    word = encode(op, 0, {})
    assert word & 0b111 == 6 and word >> 6 & 1 and str(decode(word, 0)).endswith("vmov indp mbias r7 shared")
    with pytest.raises(VerifyException, match="shared applies to mbias"):
        sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.BYPASS, 7, shared=True).verify()
    bias = encode(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.BIAS, 7), 0, {})
    with pytest.raises(EncodingError, match="reserved bits"):
        decode(bias | 1 << 6, 0)


# ---------------------------------------------------------------------------------- the decision

@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("case", [
    dict(args=(40, 9, 9, 40, 1, 1, 1, 0)),                          # COOP 1x1, 3 tiles, the last masked
    dict(args=(5, 7, 6, 40, 3, 2, 2, 0)),                           # COOP 3x2/2 over 5 channels
    dict(args=(64, 8, 8, 64, 3, 3, 1, 1), bypass=True),             # COOP residual 3x3 (bypass rows)
    dict(args=(64, 8, 8, 128, 1, 1, 1, 0), bypass=True, mode="COOP"),  # COOP residual 1x1 (bypass slices)
    dict(args=(3, 12, 12, 64, 3, 3, 1, 1), mode="INDP"),            # INDP row groups (weights broadcast: shared)
    dict(args=(64, 8, 8, 64, 1, 1, 1, 0), bypass=True, mode="INDP"),  # INDP, the CUs splitting columns
], ids=["coop_1x1", "coop_strided", "residual_rows", "residual_slices", "indp_rows", "indp_cols"])
def test_maps_layout_is_bit_exact(case: dict, engine: str) -> None:
    """The biases in the maps buffer (forced, `biases = maps`) on every program kind that takes
    them, both engines: bit-exact with the golden model, every kernel tile's bias read by `vmov
    mbias` (none from the weights buffer), the same cycles on both engines."""
    case = dict(case)
    args = case.pop("args")
    run, got, want, plan, image = conv_case(*args, shift=12, engine=engine, biases="maps", **case)
    assert plan.shape.bias_at == "maps" and np.array_equal(got, want)
    selects = [op.select.data for op in sf_ops(image) if isinstance(op, sf.VmovOp)]
    assert sf.VmovSelect.MBIAS in selects and sf.VmovSelect.BIAS not in selects
    assert all(op.shared is not None for op in sf_ops(image)
               if isinstance(op, sf.VmovOp) and op.select.data == sf.VmovSelect.MBIAS) == plan.indp
    if engine == "reference":
        assert run.cycles == conv_case(*args, shift=12, biases="maps", **case)[0].cycles


def sf_ops(image) -> list:
    from snowir.machine.image import disassemble

    return [op for op in disassemble(image).walk() if isinstance(op, sf.SnowflakeInstruction)]


def test_chosen_where_it_keeps_kernels_resident_on_16_cus() -> None:
    """ResNet-50's 14x14 1x1 1024 -> 256 on 16 CUs: four kernel tiles of 1040 words with their bias
    blocks exceed a vMAC's 4096 words; of 1024 they stay resident. The planner takes the maps
    layout, and it runs in about 70% of the stock layout's cycles, bit-exact (about 60% before issue
    38's strip-change decisions; 80,665 against 114,789 after)."""
    s = ConvShape(1024, 14, 14, 256, 1, 1, 1, 1, 0, 0, 0, 0, True, 12)
    assert plan_conv(s, CUS16, 0, 0, 0).shape.bias_at == "maps"
    runs = {}
    for biases in ("kernel", None):
        run, got, want, plan, _ = conv_case(1024, 14, 14, 256, 1, 1, 1, 0, shift=12, hw=CUS16, biases=biases)
        assert np.array_equal(got, want)
        runs[plan.shape.bias_at] = (run.cycles, plan.resident_weights)
    assert runs["maps"][1] and not runs["kernel"][1]
    assert runs["maps"][0] < 0.72 * runs["kernel"][0], runs


def test_chosen_where_indp_needs_it() -> None:
    """A residual 1x1 over 256 channels, INDP with the CUs splitting columns: 16 interleaved kernels
    and their biases (4112 words) do not fit a vMAC, the kernels alone (4096) do; the stock layout is
    refused in one line, and `nn-to-tile{mode=INDP}` keeps the biases in the maps buffer."""
    s = ConvShape(256, 4, 8, 128, 1, 1, 1, 1, 0, 0, 0, 0, True, 12)
    with pytest.raises(LoweringError, match="4112 words > 4096"):
        plan_conv(s, HW, 0, 0, 0, None, 0, "INDP", "kernel")
    run, got, want, plan, _ = conv_case(256, 4, 8, 128, 1, 1, 1, 0, bypass=True, mode="INDP", shift=12)
    assert plan.cu_split == "cols" and plan.shape.bias_at == "maps" and np.array_equal(got, want)


def test_double_buffered_where_a_kernel_then_fits_a_slot() -> None:
    """ResNet-50's 128 -> 512 residual 1x1 (INDP, columns; here over 8 x 32): 16 kernels of 128 taps
    are 2064 words with their biases (staggered), 2048 without (double-buffered in the weights slots):
    the planner takes the latter, ~7% faster, bit-exact (at 28 x 28, in the model: 232.0 k -> 210.6 k)."""
    runs = {}
    for biases in ("kernel", None):
        run, got, want, plan, _ = conv_case(128, 8, 32, 512, 1, 1, 1, 0, bypass=True, mode="INDP", shift=12,
                                            biases=biases)
        assert np.array_equal(got, want)
        runs[plan.shape.bias_at] = (run.cycles, plan.double_buffer_weights, plan.stagger)
    assert runs["maps"][1] and runs["kernel"][2] and not runs["kernel"][1]
    assert runs["maps"][0] < 0.95 * runs["kernel"][0], runs


def test_stock_layout_kept_where_the_blocks_cost_nothing() -> None:
    """Where the 16 words a kernel change how nothing is held, the layer keeps the stock image
    unpriced: ResNet-50's 3x3 64 -> 64 at 56x56 (double-buffered either way)."""
    s = ConvShape(64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, True, 12)
    assert plan_conv(s, HW, 0, 0, 0).shape.bias_at == "kernel"


# ---------------------------------------------------------------------------------- edits

def _to_kernel(layer) -> None:
    regions_of(layer)["weights"].properties["biases"] = StringAttr("kernel")
    empty_bodies(layer)


def test_edit_to_the_stock_layout_is_followed() -> None:
    """`biases` maps -> kernel with the bodies written empty: the image repacks with bias blocks, the
    maps tiles take the whole banks again, the kernel tiles no longer fit resident (dropped: loaded
    per strip): bit-exact and slower."""
    chosen, got, want, plan, _ = conv_case(248, 8, 8, 64, 1, 1, 1, 0, shift=12, hw=NARROW)
    assert plan.shape.bias_at == "maps" and plan.resident_weights and np.array_equal(got, want)
    edited, got, want, plan, image = conv_case(248, 8, 8, 64, 1, 1, 1, 0, shift=12, hw=NARROW, edit=_to_kernel)
    assert plan.shape.bias_at == "kernel" and np.array_equal(got, want)  # (plan: as edited, before derivation)
    assert not any(isinstance(op, sf.VmovOp) and op.select.data == sf.VmovSelect.MBIAS for op in sf_ops(image))
    assert edited.cycles > chosen.cycles


def test_edits_refused_in_one_line() -> None:
    """`biases` removed with the image and tiles kept: tile-to-asm refuses, naming what to write
    empty; a word the declaration does not know, or `biases` on another region: the verifier."""
    def edit(layer) -> None:
        regions_of(layer)["weights"].properties["biases"] = StringAttr("kernel")

    with pytest.raises(PassFailedException) as refused:
        conv_case(248, 8, 8, 64, 1, 1, 1, 0, shift=12, hw=NARROW, edit=edit)
    message = str(refused.value)
    assert "biases kernel: the image keeps them the other way (write the kernel tile's body empty" in message
    assert "\n" not in message.strip()
    for label, word in (("weights", "both"), ("maps", "maps")):
        layer = bare_conv_layer("conv", ConvShape(248, 8, 8, 64, 1, 1, 1, 1, 0, 0, 0, 0, True, 12),
                                np.zeros((64, 248, 1, 1), np.int16), np.zeros(64, np.int16), NARROW)
        regions_of(layer)[label].properties["biases"] = StringAttr(word)
        with pytest.raises(VerifyException, match="biases: kernel or maps, on a 'weights' region"):
            layer.verify()


def test_maps_refused_where_a_program_reads_the_kernel_block() -> None:
    """A conv with windows of padding alone writes their bias back through a MAC on the kernel's
    zero bias word: `biases = maps` is refused there, naming why."""
    def to_maps(layer) -> None:
        regions_of(layer)["weights"].properties["biases"] = StringAttr("maps")
        empty_bodies(layer)

    with pytest.raises(PassFailedException, match="biases maps: its windows of padding alone"):
        conv_case(16, 6, 6, 16, 1, 1, 1, 1, shift=12, edit=to_maps)


# ---------------------------------------------------------------------------------- a whole model

def test_whole_model_golden_reads_the_maps_image(tmp_path) -> None:
    """Two convs through snowflake-lower on the narrow machine: the first keeps its biases in the
    maps buffer (its segment's marker says `biases`), and the golden model, unpacking the weights
    from the linked image, agrees with the machine bit for bit on both engines."""
    rng = np.random.default_rng(0)
    w0 = numpy_helper.from_array((rng.standard_normal((64, 248, 1, 1)) * 0.05).astype(np.float32), "w0")
    b0 = numpy_helper.from_array((rng.standard_normal(64) * 0.2).astype(np.float32), "b0")
    w1 = numpy_helper.from_array((rng.standard_normal((16, 64, 3, 3)) * 0.05).astype(np.float32), "w1")
    b1 = numpy_helper.from_array((rng.standard_normal(16) * 0.2).astype(np.float32), "b1")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="reduce"),
         helper.make_node("Relu", ["c0"], ["r0"]),
         helper.make_node("Conv", ["r0", "w1", "b1"], ["y"], pads=[1, 1, 1, 1], name="head")],
        "biases_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 248, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [w0, b0, w1, b1])
    path = tmp_path / "net.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    compiled = compile_model(path, None, NARROW)
    facts = [op.attributes["layer"] for op in compiled.module.walk()
             if isinstance(op, sf.LabelOp) and "layer" in op.attributes]
    assert any("biases" in f.data and f.data["biases"].data == "maps" for f in facts)
    x = rng.uniform(-1, 1, (1, 248, 8, 8)).astype(np.float32)
    for engine in ("fast", "reference"):
        report = compiled.run(x, engine=engine, check=True).report
        assert report.check.golden_bit_exact, engine
