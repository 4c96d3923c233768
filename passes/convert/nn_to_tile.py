"""
nn-to-tile{mode=auto|COOP|INDP hw=path.json}: the workload breakdown (C17 §5.1, steps 3-5).

Every device conv2d and max_pool of a quantised nn module becomes one `tile.layer`, the
paper's Figure 2 object, with every decision as IR a researcher can read and edit:

  * the geometry as a typed `#tile.conv_shape` / `#tile.pool_shape`;
  * `mode`: COOP (one kernel per vMAC in a tile, 16 on 4 CUs x 4 vMACs, maps broadcast to every
    CU) or INDP for few input channels (16 kernels per vMAC of a CU: 64, each CU its own output
    rows), by lane occupancy;
  * `tile.dram_region`s of the layer's program image: input maps, weights (carrying the
    weight image packed for the mode), output, residual bypass;
  * a `tile.kernel_tile` (single-kernel granularity, repeated over the kernel tiles) with
    its weight loads, and a `tile.maps_tile` per output-row strip sized to the maps buffer
    of the `hw` configuration, with its loads and `tile.window`s;
  * `pool` (`fuse-pool`, on by default): a max pool that is the only reader of an INDP conv, or
    of a plain COOP Kloop conv, is computed by the conv's program when that pays (INDP: one row
    per CU per row group; COOP: strips short enough for the pool's row ring beside them; the
    pool's loads and MAXs between the groups' or strips' MACs); both nn ops name the layer.

The loop order is left to `tile-loop-order`. Loads are all on unit 0 here (`balance-loads`
spreads them). The nn op keeps its place in `@main` and names its layer (`tile = "..."`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import nn
from snowir.device_layers import DEVICE_OPS, kind_of
from snowir.hw import SnowflakeConfig
from snowir.nn_util import layer_name, on_host
from snowir.plan.shapes import LoweringError
from snowir.tile.kinds import BuildOptions


def device_layers(module: ModuleOp) -> list[nn.Conv2dOp | nn.MaxPoolOp]:
    """The convs and max pools partition-host left on the device, in graph order."""
    out = []
    for op in module.walk():
        if isinstance(op, DEVICE_OPS) and not on_host(op):
            out.append(op)
    return out


def unique_symbol(name: str, taken: set[str]) -> str:
    sym, n = name, 0
    while sym in taken:
        n += 1
        sym = f"{name}_{n}"
    taken.add(sym)
    return sym


@dataclass(frozen=True)
class NNToTilePass(ModulePass):
    name = "nn-to-tile"
    mode: str = "auto"
    hw: str = ""
    fuse_pool: bool = True
    """A max pool that is the only reader of an INDP or plain COOP conv runs in the conv's program (one
    `tile.layer` with `pool`, named by both nn ops; snowir/plan/fused_pool.py)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.mode not in ("auto", "COOP", "INDP"):
            raise PassFailedException(f"nn-to-tile: mode must be auto, COOP or INDP, not '{self.mode}'")
        hw = SnowflakeConfig.load(self.hw or None)
        mode = None if self.mode == "auto" else self.mode
        taken = {o.sym_name.data for o in op.walk() if hasattr(o, "sym_name") and isinstance(o.sym_name, StringAttr)}
        options = BuildOptions(mode, self.fuse_pool)
        layers = []
        for inner in device_layers(op):
            if "tile" in inner.attributes or "image" in inner.attributes:
                continue  # already broken down
            if not isinstance(inner.input.type.get_element_type(), nn.FixedType):
                raise PassFailedException("nn-to-tile: quantise the module first (nn-prepare)")
            kind = kind_of(inner)
            assert kind is not None  # device_layers: DEVICE_OPS only
            name = layer_name(inner, inner.name.removeprefix("nn."))
            sym = unique_symbol(name, taken)
            try:
                layer, pool = kind.function("builder")(inner, sym, hw, options)
            except LoweringError as e:
                raise PassFailedException(f"nn-to-tile: layer '{name}' ({inner.name}): {e}") from None
            inner.attributes["tile"] = StringAttr(sym)
            if pool is not None:
                pool.attributes["tile"] = StringAttr(sym)  # computed by the conv's program
            layers.append(layer)
        for layer in layers:
            op.body.block.add_op(layer)
