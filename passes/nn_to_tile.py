"""
nn-to-tile{loop-order=auto|Kloop|Mloop mode=auto|COOP|INDP}: break every device conv2d / max_pool of a quantised nn
module down for the hardware: one `tile.layer` per layer with the paper's Figure 2 objects
(C17 §5.1 step 4-5) and every decision as an attribute a researcher can read and edit:

  * `mode` (COOP: 16 kernels per tile, maps broadcast to every CU; INDP for few input channels:
    64 kernels per tile broadcast to every CU, each CU its own output rows — indp_codegen),
    `loop_order` (Kloop or Mloop, the cheaper in DRAM bytes unless forced; both byte counts as
    mloop_bytes/kloop_bytes);
  * `tile.dram_region`s of the layer's program image (input maps, weights, output);
  * a `tile.kernel_tile` (16 kernels, repeated over the kernel tiles) with its weight loads;
  * one `tile.maps_tile` per output-row strip (input rows held, overlap with the previous
    strip) with its maps loads and `tile.window`s: one per row class (kernel rows clamped at
    the padding), repeat_x over the columns, repeat_y over the rows, offsets in buffer words.

The layer's geometry is kept in `shape` (C per group, H, W, K, kh, kw, sy, sx, pt, pl, pb, pr,
shift, relu, groups) so tile-to-asm can regenerate code after the decisions are edited.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.conv_plan import LoweringError, conv_layout, input_rows, plan_conv
from snowir.indp_codegen import choose_mode, indp_kernel_words, kernels_per_tile
from snowir.dialects import nn, tile
from snowir.nn_util import conv_shape, layer_name
from snowir.hw import SnowflakeConfig

def conv_tile_layer(op: nn.Conv2dOp, hw: SnowflakeConfig, loop_order: str | None,
                    mode: str | None = None) -> tile.LayerOp:
    s = conv_shape(op)
    name = layer_name(op)
    try:
        mode = choose_mode(s, hw, op.bypass is not None, mode)
        lay = conv_layout(s, op.bypass is not None, mode, hw)
        plan = plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, loop_order, lay.r_addr, mode)
    except LoweringError as e:
        raise PassFailedException(f"nn-to-tile: layer '{name}': {e}") from None
    in_b, w_addr, w_bytes, out_addr, out_b, r_addr = (lay.in_bytes, lay.w_addr, lay.w_bytes, lay.out_addr,
                                                      lay.out_bytes, lay.r_addr)
    tiles = plan.tiles
    cost = plan.dram_bytes()
    ops = [tile.DramRegionOp(f"{name}.maps", 0, in_b, "maps"),
           tile.DramRegionOp(f"{name}.weights", w_addr, w_bytes, "weights"),
           tile.DramRegionOp(f"{name}.output", out_addr, out_b, "output")]
    if r_addr is not None:
        ops.append(tile.DramRegionOp(f"{name}.bypass", r_addr, out_b, "bypass"))
    if plan.indp:  # vMAC v of every CU: 16 interleaved kernels (weights broadcast)
        words = indp_kernel_words(s, hw)
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, words, w_addr + 2 * v * words, 0, v % hw.load_units,
                                    hw.vmacs + v) for v in range(hw.vmacs_per_cu)]
        per_tile = kernels_per_tile(hw)
    else:
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, s.kernel_words, w_addr + 2 * j * s.kernel_words, 0,
                                    j % hw.load_units, j)
                        for j in range(16)] if s.kernel_words <= hw.weights_buffer_elements else []
        per_tile = 16
    ops.append(tile.KernelTileOp(0, per_tile, tiles, kernel_loads))
    row = s.w * s.cin
    prev_end = 0
    for si, strip in enumerate(plan.strips):
        base = 0
        words = (strip.r1 - strip.r0) * row
        if plan.indp:  # each CU its own rows of the row group, at the same buffer address
            r = plan.cu_rows[si]
            cu_rows = [input_rows(s.h, s.kh, s.sy, s.pt, y, y + r) for y in range(strip.y0, strip.y1, r)]
            loads = [tile.LoadOp(tile.BufferKind.MAPS, (r1 - r0) * row, 2 * r0 * row, base, c % hw.load_units, c)
                     for c, (r0, r1) in enumerate(cu_rows)]
        else:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, words, 2 * strip.r0 * row, base, 0, 31)]
        windows = []
        y = strip.y0
        while y < strip.y1:
            iy = y * s.sy - s.pt
            ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
            y_end = y + 1
            while y_end < strip.y1 and (max(0, -(y_end * s.sy - s.pt)), min(s.kh, s.h - (y_end * s.sy - s.pt))) == (ky0, ky1):
                y_end += 1
            windows.append(tile.WindowOp(s.kw * s.c if s.groups == 1 else s.c, ky1 - ky0, s.ow, y_end - y,
                                         s.sx * s.cin, s.sy * row,
                                         (iy + ky0 - strip.r0) * row if iy + ky0 >= strip.r0 else 0,
                                         out_addr + 2 * y * s.ow * s.k, bias_vmov=True,
                                         bypass_vmov=r_addr is not None))
            y = y_end
        overlap = max(0, prev_end - strip.r0) if si else 0
        prev_end = strip.r1
        ops.append(tile.MapsTileOp((strip.y0, strip.y1), (strip.r0, strip.r1), overlap, -1, loads + windows))
    extra = {"mloop_bytes": IntegerAttr(cost["Mloop"], i64), "kloop_bytes": IntegerAttr(cost["Kloop"], i64)}
    if s.relu:
        extra["relu"] = nn.UnitAttr()
    layer = tile.LayerOp(name, tile.LayerKind.CONV, ops, tile.ComputeMode(plan.mode),
                         tile.LoopOrder(plan.loop_order), extra)
    layer.attributes["shape"] = DenseArrayBase.from_list(
        i64, [s.c, s.h, s.w, s.k, s.kh, s.kw, s.sy, s.sx, s.pt, s.pl, s.pb, s.pr, s.shift, int(s.relu), s.groups])
    return layer


@dataclass(frozen=True)
class NNToTilePass(ModulePass):
    name = "nn-to-tile"
    loop_order: str = "auto"
    mode: str = "auto"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.loop_order not in ("auto", "Kloop", "Mloop"):
            raise PassFailedException(f"nn-to-tile: loop-order must be auto, Kloop or Mloop, not '{self.loop_order}'")
        if self.mode not in ("auto", "COOP", "INDP"):
            raise PassFailedException(f"nn-to-tile: mode must be auto, COOP or INDP, not '{self.mode}'")
        hw = SnowflakeConfig.load(self.hw or None)
        order = None if self.loop_order == "auto" else self.loop_order
        mode = None if self.mode == "auto" else self.mode
        layers = []
        for inner in op.walk():
            if isinstance(inner, nn.Conv2dOp):
                if not isinstance(inner.input.type.get_element_type(), nn.FixedType):
                    raise PassFailedException("nn-to-tile: quantise the module first (nn-prepare)")
                place = inner.attributes.get("place")
                if isinstance(place, StringAttr) and place.data == "host":
                    continue
                layer = conv_tile_layer(inner, hw, order, mode)
                inner.attributes["tile"] = StringAttr(layer.sym_name.data)
                layers.append(layer)
        for layer in layers:
            op.body.block.add_op(layer)
