"""Machines with 1-16 CUs and 1-4 vMACs per CU (issue 14): a COOP kernel tile is one kernel
per vMAC (4 on one CU, 64 on 16), the LD select field widens to 7 bits past 31 selects and the
write-back mask takes one VMOV per 32 vMACs. Every layer kind the code generator emits runs
bit-exact against the numpy golden model on each shape of machine, on both engines."""

from __future__ import annotations

import numpy as np
import pytest

from snowir.codegen.builder import AsmBuilder
from snowir.plan.shapes import LoweringError
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.machine.encoding import decode, encode
from test_lowering import conv_case

MACHINES = [SnowflakeConfig(cus=1), SnowflakeConfig(cus=2), SnowflakeConfig(cus=8), SnowflakeConfig(cus=16),
            SnowflakeConfig(cus=3, vmacs_per_cu=2)]
IDS = ["1x4", "2x4", "8x4", "16x4", "3x2"]

LAYERS = {  # conv_case arguments: (c, h, w, k, kh, kw, stride, pad), options
    "3x3, partial last tile": ((24, 9, 7, 40, 3, 3, 1, 1), {}),
    "7x7/2 first layer": ((3, 15, 15, 16, 7, 7, 2, 3), {}),
    "1x1, unrolled pixels": ((40, 9, 9, 72, 1, 1, 1, 0), {}),
    "Mloop over strips": ((48, 64, 24, 48, 3, 3, 1, 1), {"loop_order": "Mloop"}),
    "Kloop over strips": ((48, 64, 24, 48, 3, 3, 1, 1), {"loop_order": "Kloop"}),
    "residual 1x1": ((64, 14, 14, 96, 1, 1, 1, 0), {"bypass": True}),
    "residual 3x3": ((32, 12, 12, 48, 3, 3, 1, 1), {"bypass": True}),
    "grouped": ((16, 8, 8, 128, 3, 3, 1, 1), {"groups": 2}),
    # groups of 16 (depthwise-to-grouped's): narrower than 32 or 64 vMACs, one tile per group
    "narrow groups": ((16, 9, 9, 64, 3, 3, 1, 1), {"groups": 4}),
    "fully connected": ((4096, 1, 1, 70, 1, 1, 1, 0), {"relu": False}),
    "INDP": ((3, 20, 20, 80, 5, 5, 1, 2), {"mode": "INDP"}),
}


@pytest.mark.parametrize("hw", MACHINES, ids=IDS)
@pytest.mark.parametrize("layer", LAYERS)
def test_layers_bit_exact_on_every_machine_shape(hw: SnowflakeConfig, layer: str) -> None:
    args, options = LAYERS[layer]
    groups = options.get("groups", 1)
    per_group = args[3] // groups
    if groups > 1 and per_group % hw.vmacs and not (per_group < hw.vmacs and per_group % hw.lanes == 0):
        # a kernel tile may not span two groups: a clear refusal (partition-host runs it on the host)
        with pytest.raises(LoweringError, match=f"only multiples of {hw.vmacs} \\(a kernel tile\\)"):
            conv_case(*args, hw=hw, **options)
        return
    run, got, want, plan, _ = conv_case(*args, hw=hw, **options)
    narrow = groups > 1 and per_group < hw.vmacs and per_group % hw.lanes == 0
    assert plan.kernels == (hw.vmacs_per_cu * hw.lanes if plan.indp else per_group if narrow else hw.vmacs)
    assert np.array_equal(got, want)
    assert 0 < run.timing.macs <= run.cycles * hw.macs  # useful MACs within what the machine can do


@pytest.mark.parametrize("hw", [SnowflakeConfig(cus=2), SnowflakeConfig(cus=16)], ids=["2x4", "16x4"])
def test_engines_agree_cycle_for_cycle(hw: SnowflakeConfig) -> None:
    fast = conv_case(24, 9, 7, 40, 3, 3, 1, 1, hw=hw, bypass=True)
    ref = conv_case(24, 9, 7, 40, 3, 3, 1, 1, hw=hw, bypass=True, engine="reference")
    assert np.array_equal(fast[1], ref[1]) and np.array_equal(fast[1], fast[2])
    assert fast[0].cycles == ref[0].cycles and dict(fast[0].timing.stalls) == dict(ref[0].timing.stalls)


def test_more_cus_take_wider_kernel_tiles_and_finish_sooner() -> None:
    cycles = {}
    for cus in (1, 2, 4, 8):
        run, got, want, plan, _ = conv_case(64, 14, 14, 128, 3, 3, 1, 1, hw=SnowflakeConfig(cus=cus))
        assert np.array_equal(got, want) and plan.tiles == -(-128 // (4 * cus))
        cycles[cus] = run.cycles
    assert cycles[1] > cycles[2] > cycles[4] > cycles[8]
    assert cycles[1] > 3 * cycles[4]  # compute-bound: 4x the MACs per cycle, close to 4x faster


def test_select_field_widens_past_31_selects() -> None:
    small, big = SnowflakeConfig(), SnowflakeConfig(cus=16)
    assert (small.select_bits, big.select_bits) == (5, 7)
    ld_all = sf.LdOp(sf.LoadTarget.MAPS, 1, 2, 3, 0, sf.SELECT_ALL)
    # the 4 x 4 machine's words are the ones it always had: `all` = 31 in imm[8:4]
    assert encode(ld_all, 0, {}, small.select_bits) & 0xFFF == 31 << 4
    assert encode(ld_all, 0, {}, big.select_bits) & 0xFFF == (31 << 4) | (3 << 10)
    for select in (0, 31, 45, 63, 64 + 3, sf.SELECT_ALL):  # vMAC 31 and 63, broadcast to vMAC 3 of every CU
        op = sf.LdOp(sf.LoadTarget.WEIGHTS, 1, 2, 3, 5, select)
        word = encode(op, 0, {}, big.select_bits)
        assert decode(word, 0, big.select_bits)._int("select") == select
    with pytest.raises(Exception, match="does not fit this machine's 5-bit select field"):
        encode(sf.LdOp(sf.LoadTarget.WEIGHTS, 1, 2, 3, 0, 40), 0, {}, small.select_bits)
    with pytest.raises(Exception, match="reserved bits"):
        decode(encode(ld_all, 0, {}, big.select_bits), 0, small.select_bits)


def test_write_mask_is_one_vmov_per_32_vmacs() -> None:
    for hw, words in ((SnowflakeConfig(), 1), (SnowflakeConfig(cus=8), 1), (SnowflakeConfig(cus=16), 2)):
        b = AsmBuilder()
        b.write_mask(hw, 16, hw.all_vmacs_mask >> 1)
        vmovs = [op for op in b.ops if isinstance(op, sf.VmovOp)]
        assert [op._int("word") for op in vmovs] == list(range(words))
        for op in vmovs:
            assert decode(encode(op, 0, {}), 0)._int("word") == op._int("word")


@pytest.mark.heavy
@pytest.mark.parametrize("cus", [1, 2, 8])
def test_resnet50_lowers_on_the_machines_the_scaling_study_visits(tmp_path, cus: int) -> None:
    """bench/dse_scaling.py's sweep lowers ResNet-50 for 1-16 CUs. On one CU, 1024 -> 2048 1x1 downsample
    took the residual add with bypass slices and 1024 input channels, more than one trace a pixel.
    allocate-dram then let it preload the next conv's first strip beside pixels that run unpipelined
    and take no row loads. Codegen failed on an assertion. maps_preloaded now refuses that carrier,
    and every configuration lowers to a program."""
    from snowir.tools.light_models import build
    from snowir.tools.snow_opt import main

    hw = tmp_path / "hw.json"
    hw.write_text(f'{{"cus": {cus}}}')
    out = tmp_path / "r50.mlir"
    assert main([str(build("resnet50")), "-p", f"snowflake-lower{{hw={hw}}}", "-o", str(out)]) in (0, None)
    assert "snowflake_asm" in out.read_text()[:200000]


def test_a_deeper_vector_queue_holds_the_1x1_slices_prefetch_back() -> None:
    """A residual 1x1 with bypass slices on a machine queuing 32 vector ops: its next kernels (and a
    channel-tile-major bypass's next slice) load once a full queue of the tile's ops follows the
    previous tile's, not after a fixed 16 (the loads overwrote a slot a queued op still read: a
    machine fault, found by a held-out audit). Bit-exact."""
    import onnx
    from onnx import helper
    from tests.onnx_util import model, rand
    from snowir.driver.model_api import compile as compile_model

    n = helper.make_node
    c, h, mid = 512, 14, 128
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="a", kernel_shape=[1, 1]), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["y"], name="y", kernel_shape=[1, 1]), n("Add", ["y", "x"], ["s"]),
             n("Relu", ["s"], ["o"])]
    inits = {"w1": rand(mid, c, 1, 1, seed=1, scale=c ** -0.5), "b1": rand(mid, seed=2, scale=0.1),
             "w2": rand(c, mid, 1, 1, seed=3, scale=mid ** -0.5), "b2": rand(c, seed=4, scale=0.1)}
    m: onnx.ModelProto = model(nodes, {"x": [1, c, h, h]}, {"o": None}, inits)
    compiled = compile_model(m, hw=SnowflakeConfig(vector_queue_depth=32))
    check = compiled.run(rand(1, c, h, h, seed=7), check=True).report.check
    assert check is not None and check.golden_bit_exact, check


def test_a_given_pipeline_lowers_for_the_machine_it_runs_on() -> None:
    """compile(m, pipeline, hw=...) / snow-run --pipeline --hw: the pipeline's passes that name no
    machine lower for `hw` (a held-out audit: `snowflake-lower{whole-model=false}` on 16 CUs built
    its programs for the default machine and the run refused them, "built for cus 4")."""
    from snowir.driver.model_api import compile as compile_model
    from tests.onnx_util import GraphBuilder, rand

    g = GraphBuilder()
    y = g.conv("x", 32, 64, 3, "c", relu=True)
    m = g.model({"x": [1, 32, 12, 12]}, y)
    hw = SnowflakeConfig(cus=16)
    compiled = compile_model(m, "snowflake-lower{whole-model=false}", hw=hw)
    check = compiled.run(rand(1, 32, 12, 12, seed=3), check=True).report.check
    assert check.golden_bit_exact, check
