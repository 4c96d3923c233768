"""One call a tile pass uses to ask "can this layer take this edit?" (snowir/tile/edit.edit_refusal)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.printer import Printer

from snowir.dialects import tile
from snowir.hw import DEFAULT
from snowir.plan.shapes import ConvShape
from snowir.tile.build import bare_conv_layer
from snowir.tile.edit import edit_refusal, maps_rows, set_maps_rows, split_rows


def _residual_1x1() -> tile.LayerOp:
    s = ConvShape(c=128, h=8, w=8, k=128, kh=1, kw=1, sy=1, sx=1, pt=0, pl=0, pb=0, pr=0, relu=False, shift=8)
    weights = np.random.default_rng(0).integers(-64, 64, (s.k, s.c, 1, 1), dtype=np.int16)
    return bare_conv_layer("res", s, weights, np.zeros(s.k, np.int16), DEFAULT, mode="COOP", bypass=True)


def _text(layer: tile.LayerOp) -> str:
    import io
    out = io.StringIO()
    Printer(stream=out).print_op(layer)
    return out.getvalue()


def test_followed_edits_return_none_and_leave_the_layer() -> None:
    layer = _residual_1x1()
    before = _text(layer)
    assert edit_refusal(layer, lambda l: l.properties.pop("slice_tiles"), DEFAULT) is None
    assert edit_refusal(layer, lambda l: set_maps_rows(l, split_rows(maps_rows(l), 2)), DEFAULT) is None
    assert _text(layer) == before


def test_refused_edits_return_the_one_line_reason() -> None:
    """A plan-level precondition (declared with slice_tiles), an op rule and a generator rule."""
    layer = _residual_1x1()
    three = edit_refusal(layer, lambda l: l.properties.__setitem__("slice_tiles", IntegerAttr(3, i64)), DEFAULT)
    assert three is not None and "slice_tiles 3: a 1x1 conv's whose kernel tiles, a multiple of it" in three
    one = edit_refusal(layer, lambda l: l.properties.__setitem__("slice_tiles", IntegerAttr(1, i64)), DEFAULT)
    assert one is not None and "slice_tiles: 2 or more kernel tiles" in one
    indp = edit_refusal(layer, lambda l: l.properties.__setitem__("mode", tile.ComputeModeAttr(tile.ComputeMode.INDP)),
                        DEFAULT)
    assert indp is not None and "@res" in indp and "\n" not in indp


def test_one_root_cause_one_message() -> None:
    """An INDP kernel over the weights buffer (16 kernels of a 3x3x32 conv: 4624 words) is refused
    as that, whatever slot the kernel tile names: not as 'slot N: ... must fit below it and above it'."""
    from snowir.dialects.tile.decisions import SLOT
    from snowir.tile.edit import empty_bodies

    s = ConvShape(c=32, h=8, w=8, k=64, kh=3, kw=3, sy=1, sx=1, pt=1, pl=1, pb=1, pr=1, relu=False, shift=8)
    weights = np.random.default_rng(0).integers(-64, 64, (s.k, s.c, 3, 3), dtype=np.int16)
    layer = bare_conv_layer("c", s, weights, np.zeros(s.k, np.int16), DEFAULT, mode="COOP")

    def indp(slot: int | None) -> str | None:
        def edit(l: tile.LayerOp) -> None:
            l.properties["mode"] = tile.ComputeModeAttr(tile.ComputeMode.INDP)
            empty_bodies(l)
            SLOT.write(next(o for o in l.body.block.ops if isinstance(o, tile.KernelTileOp)), slot)
        return edit_refusal(layer, edit, DEFAULT)

    why = {indp(slot) for slot in (None, 2048, 4000)}
    assert why == {"layer @c: kernel tile: 4624 words a kernel exceed the 4096-word buffer"}
