"""
Depthwise convs against Snowflake's bound (issue 36 item 5; docs/lowering.md, "Depthwise convs:
the bound"): MobileNetV2 / PP-LCNet shapes, each a depthwise conv between two 1x1 convs as an
exporter writes a mobile block (no host neighbour, so no DRAM round trip weighs on its
placement). Per shape: where it runs, simulated cycles, useful-MAC utilisation, the bound
(`depthwise_bound`: one useful lane of 16 per vMAC cycle on channel-innermost maps, or the DRAM
traffic with each kernel's 16-word groups as its vMAC holds them) and the measured share of it,
the same against the bound with the kernels' useful words alone ("kernels once", the bound before
2026-11-29), with depthwise-to-grouped's width chosen by cost and with
the fixed rule before it (16-channel groups); every layer checked bit for bit against the golden
model.
Also the lane shares other maps layouts would give (the derivation's table). Prints a table,
writes depthwise.json:

    python bench/depthwise.py [--only NAME] [--out DIR | --update-results]

Forms: "one layer over blocks" (the producer writes the input channel-tile-major in one layer, one
grouped conv reads a block a group: its slices' cycles on the same blocks are measured too,
"slices"), "N slices on tiles" (the producer writes the input channel-tile-major in one layer, each
slice reads its block whole), "N slices on blocks" (the producer split into one conv per block),
"N slices" (gathered from the channel-innermost input), "one layer". Where the chosen form is on
tiles, the split producer's cycles are measured too ("split", "its block").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from onnx_util import model, rand  # noqa: E402

from snowir.passes.nn import depthwise_to_grouped  # noqa: E402
from snowir.passes.nn.depthwise_to_grouped import depthwise_bound  # noqa: E402
from snowir.driver.model_api import compile as compile_model  # noqa: E402
from snowir.hw import SnowflakeConfig  # noqa: E402
from snowir.passes.nn.depthwise_slices import OVER_BLOCKS  # noqa: E402
from snowir.segments import CHANNEL_TILES  # noqa: E402

from _output import add_output_options, output_file  # noqa: E402

SHAPES = [  # name, (C, H, W, kernel, stride, the 1x1 producer's input channels): MobileNetV2's depthwise
    # layers (expansion 6: the producer reads C/6 channels), PP-LCNet's 5x5 ones
    ("mbv2 112x112x32 3x3/1", (32, 112, 112, 3, 1, 32)),
    ("mbv2 112x112x96 3x3/2", (96, 112, 112, 3, 2, 16)),
    ("mbv2 56x56x144 3x3/1", (144, 56, 56, 3, 1, 24)),
    ("mbv2 56x56x144 3x3/2", (144, 56, 56, 3, 2, 24)),
    ("mbv2 28x28x192 3x3/1", (192, 28, 28, 3, 1, 32)),
    ("mbv2 14x14x384 3x3/1", (384, 14, 14, 3, 1, 64)),
    ("mbv2 7x7x960 3x3/1", (960, 7, 7, 3, 1, 160)),
    ("lcnet 28x28x128 5x5/1", (128, 28, 28, 5, 1, 128)),
    ("lcnet 14x14x256 5x5/2", (256, 14, 14, 5, 2, 256)),
    ("lcnet 14x14x256 5x5/1", (256, 14, 14, 5, 1, 256)),
    ("lcnet 7x7x512 5x5/1", (512, 7, 7, 5, 1, 512)),
    ("narrow 56x56x24 3x3/1", (24, 56, 56, 3, 1, 24)),  # width-0.5 / 0.25 nets' narrow layers
    ("narrow 56x56x64 3x3/1", (64, 56, 56, 3, 1, 64)),
    ("narrow 28x28x48 5x5/1", (48, 28, 28, 5, 1, 48)),
    ("mbv3 28x28x88 3x3/1", (88, 28, 28, 3, 1, 24)),  # widths not a multiple of 16
    ("mbv3 14x14x200 3x3/1", (200, 14, 14, 3, 1, 80)),
]


def block(c: int, h: int, w: int, kernel: int, stride: int, cin: int | None = None) -> onnx.ModelProto:
    """`expand` 1x1 (`cin` -> C, default C -> C), `dw` (the depthwise conv, pad kernel // 2),
    `project` 1x1, ReLUs between."""
    cin = cin or c
    n = helper.make_node
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="expand"), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="dw", pads=[kernel // 2] * 4, group=c,
               strides=[stride, stride]),
             n("Relu", ["c1"], ["r1"]), n("Conv", ["r1", "w2", "b2"], ["y"], name="project")]
    inits = {"w0": rand(c, cin, 1, 1, scale=0.3 / cin ** 0.5), "b0": rand(c, seed=1, scale=0.1),
             "w1": rand(c, 1, kernel, kernel, seed=2, scale=0.3 / kernel), "b1": rand(c, seed=3, scale=0.1),
             "w2": rand(c, c, 1, 1, seed=4, scale=0.3 / c ** 0.5), "b2": rand(c, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, cin, h, w]}, {"y": [1, c, oh, ow]}, inits)


def layout_shares(kernel: int, stride: int, lanes: int = 16) -> dict[str, float]:
    """Useful lane share per MAC cycle under each maps layout (docs/lowering.md's table): the
    channel-innermost layout snowir's tensors have, and three it cannot produce (a write-back's
    lanes are contiguous channels; a gather of single words is an LD a word)."""
    k, s = kernel, stride
    side = 4  # INDP: 16 lanes as a 4 x 4 block of one channel's output pixels
    return {"hwc_coop": 1 / lanes, "hwc_indp": 1 / lanes,
            "planar_coop": k / (lanes * -(-((side - 1) * s + k) // lanes)),
            "planar_indp": k * k / (((side - 1) * s + k) ** 2),
            "unfolded_coop": k * k / (lanes * -(-(k * k) // lanes))}


def measure(c: int, h: int, w: int, kernel: int, stride: int, cin: int, hw: SnowflakeConfig,
            rule: str = "cost") -> dict:
    """Compile and run the block, check it, and return the depthwise layer's facts (its slices'
    and their concat's, summed, where it runs in 16-channel slices); `rule`: "cost" (the pass as
    it is), "split-blocks" (the producer one conv per block, no channel-tile-major writer),
    "no-blocks" (the input channel-innermost: neither), "no-slices" (the width by cost, no slice
    form), "fixed" (the rule before these: 16-channel groups, padded above 16 channels)."""
    width, sliced = depthwise_to_grouped.DepthwiseToGrouped.width, depthwise_to_grouped._sliced_cycles
    producer, writer = depthwise_to_grouped._blocked_producer, depthwise_to_grouped._tiled_writer
    over = depthwise_to_grouped._over_blocks_cycles
    if rule == "slices-on-tiles":  # the slices, not one layer over the blocks
        depthwise_to_grouped._over_blocks_cycles = lambda *_: (0.0, float("inf"))
    elif rule == "split-blocks":  # the producer split into one conv per block (no channel-tile-major writer)
        depthwise_to_grouped._tiled_writer = lambda op: None
    elif rule != "cost":  # the input channel-innermost: neither blocked form
        depthwise_to_grouped._blocked_producer = depthwise_to_grouped._tiled_writer = lambda op: None
    if rule not in ("cost", "split-blocks", "no-blocks"):
        depthwise_to_grouped._sliced_cycles = lambda *_: float("inf")
    if rule == "fixed":
        depthwise_to_grouped.DepthwiseToGrouped.width = lambda self, op, w, c: c if c <= 16 else None if c % 16 else 16
    try:
        return _measure(c, h, w, kernel, stride, cin, hw)
    finally:
        depthwise_to_grouped.DepthwiseToGrouped.width, depthwise_to_grouped._sliced_cycles = width, sliced
        depthwise_to_grouped._blocked_producer, depthwise_to_grouped._tiled_writer = producer, writer
        depthwise_to_grouped._over_blocks_cycles = over


def _measure(c: int, h: int, w: int, kernel: int, stride: int, cin: int, hw: SnowflakeConfig) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(block(c, h, w, kernel, stride, cin), path)
        compiled = compile_model(path, hw=hw)
        report = compiled.run(check=True).report.to_json()
    dw, expand = summed_layer(report, "dw"), summed_layer(report, "expand")
    form = f"{dw['parts'] - 1} slices" if dw["parts"] > 1 else "one layer"
    tiles = any(CHANNEL_TILES in op.attributes for op in compiled.module.walk())  # one producer writing every block
    over = any(OVER_BLOCKS in op.attributes for op in compiled.module.walk())  # one grouped layer reading them
    return {"where": dw["where"], "form": form + (" on blocks" if expand["parts"] > 1 else " over blocks" if over
                                                  else " on tiles" if tiles else ""),
            "cycles": dw["cycles"], "useful_macs": dw["macs"], "bit_exact": bool(report["check"]["golden_bit_exact"]),
            "block_cycles": sum(summed_layer(report, n)["cycles"] for n in ("expand", "dw", "project"))}


def summed_layer(report: dict, name: str) -> dict:
    """Layer `name` of a snow-run report, with the 16-channel slices it may run as (`name.*`,
    joined by their concat, `name`) summed: where, parts, cycles, ms, macs."""
    parts = [layer for layer in report["layers"] if layer["name"] == name or layer["name"].startswith(f"{name}.")]
    return {"where": "/".join(sorted({p["where"] for p in parts})), "parts": len(parts),
            **{key: sum(p[key] or 0 for p in parts) for key in ("cycles", "ms", "macs")}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", help="measure only the shapes whose name contains this")
    add_output_options(p, "depthwise.json")
    args = p.parse_args()
    hw = SnowflakeConfig()
    rows = []
    for name, (c, h, w, kernel, stride, cin) in SHAPES:
        if args.only and args.only not in name:
            continue
        pad = kernel // 2
        bound = depthwise_bound(c, h, w, (kernel, kernel), (stride, stride), (pad,) * 4, hw)
        row = {"shape": name, "c": c, "h": h, "w": w, "kernel": kernel, "stride": stride,
               "bound_cycles": round(bound.cycles), "bound_mac_cycles": round(bound.mac_cycles),
               "bound_dram_cycles": round(bound.dram_cycles), "bound_util_pct": 100 * bound.utilisation(hw),
               "bound_kernels_once_cycles": round(bound.cycles_kernels_once),
               "bound_dram_kernels_once_cycles": round(bound.dram_cycles_kernels_once),
               "expand_cin": cin, "layout_shares": layout_shares(kernel, stride)} \
            | measure(c, h, w, kernel, stride, cin, hw)
        fixed = measure(c, h, w, kernel, stride, cin, hw, rule="fixed")
        row |= {"fixed_where": fixed["where"], "fixed_cycles": fixed["cycles"], "fixed_bit_exact": fixed["bit_exact"]}
        if row["form"].endswith("over blocks"):  # what the slices on the same blocks give
            sl = measure(c, h, w, kernel, stride, cin, hw, rule="slices-on-tiles")
            row |= {"slices_form": sl["form"], "slices_cycles": sl["cycles"], "slices_block_cycles": sl["block_cycles"],
                    "slices_bit_exact": sl["bit_exact"]}
        if row["form"].endswith(("on tiles", "over blocks")):  # what the producer split into one conv per block gives
            split = measure(c, h, w, kernel, stride, cin, hw, rule="split-blocks")
            row |= {"split_blocks_form": split["form"], "split_blocks_cycles": split["cycles"],
                    "split_blocks_block_cycles": split["block_cycles"], "split_blocks_bit_exact": split["bit_exact"]}
        if row["form"].endswith(("on blocks", "on tiles", "over blocks")):  # what the forms over the channel-innermost input give
            flat = measure(c, h, w, kernel, stride, cin, hw, rule="no-blocks")
            row |= {"no_blocks_form": flat["form"], "no_blocks_cycles": flat["cycles"],
                    "no_blocks_block_cycles": flat["block_cycles"], "no_blocks_bit_exact": flat["bit_exact"]}
        if row["form"] != "one layer":  # what the width by cost alone gives
            whole = measure(c, h, w, kernel, stride, cin, hw, rule="no-slices")
            row |= {"no_slices_cycles": whole["cycles"], "no_slices_bit_exact": whole["bit_exact"]}
        if row["cycles"]:
            row["util_pct"] = 100 * row["useful_macs"] / (row["cycles"] * hw.macs)
            row["share_of_bound_pct"] = 100 * bound.cycles / row["cycles"]
            row["share_of_bound_kernels_once_pct"] = 100 * bound.cycles_kernels_once / row["cycles"]
        if fixed["cycles"]:
            row["fixed_share_of_bound_pct"] = 100 * bound.cycles / fixed["cycles"]
        rows.append(row)
        print(row, file=sys.stderr)
    head = (f"{'shape':<24} {'form':>18} {'where':>9} {'cycles':>10} {'bound':>9} {'MAC/DRAM':>8} {'util%':>6} "
            f"{'bound%':>6} {'of bound%':>9} {'k. once':>9} {'of once%':>8} {'exact':>5} {'block':>10} {'slices':>10} {'split':>10} {'its block':>10} "
            f"{'no blocks':>10} {'its block':>10} {'no slices':>10} {'16-groups':>10} {'of bound%':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        on = bool(r["cycles"])
        print(f"{r['shape']:<24} {r['form']:>18} {r['where']:>9} {(format(r['cycles'], ',') if on else '-'):>10} "
              f"{r['bound_cycles']:>9,} {'MAC' if r['bound_mac_cycles'] >= r['bound_dram_cycles'] else 'DRAM':>8} "
              f"{(format(r['util_pct'], '.2f') if on else '-'):>6} {r['bound_util_pct']:>6.2f} "
              f"{(format(r['share_of_bound_pct'], '.1f') if on else '-'):>9} {r['bound_kernels_once_cycles']:>9,} "
              f"{(format(r['share_of_bound_kernels_once_pct'], '.1f') if on else '-'):>8} {str(r['bit_exact']):>5} "
              f"{format(r['block_cycles'], ','):>10} "
              f"{format(r['slices_cycles'], ',') if 'slices_cycles' in r else '-':>10} "
              f"{format(r['split_blocks_cycles'], ',') if 'split_blocks_cycles' in r else '-':>10} "
              f"{format(r['split_blocks_block_cycles'], ',') if 'split_blocks_cycles' in r else '-':>10} "
              f"{format(r['no_blocks_cycles'], ',') if 'no_blocks_cycles' in r else '-':>10} "
              f"{format(r['no_blocks_block_cycles'], ',') if 'no_blocks_cycles' in r else '-':>10} "
              f"{format(r['no_slices_cycles'], ',') if 'no_slices_cycles' in r else '-':>10} "
              f"{(format(r['fixed_cycles'], ',') if r['fixed_cycles'] else r['fixed_where']):>10} "
              f"{(format(r['fixed_share_of_bound_pct'], '.1f') if r['fixed_cycles'] else '-'):>9}")
    out = output_file(args, "depthwise.json")
    out.write_text(json.dumps({"rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
