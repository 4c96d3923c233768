"""Each schedule decision declared once (snowir/dialects/tile/decisions.py): its op property, its
docs entry, its ConvPlan field, its writing and reading and its rule all come from the declaration."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.utils.exceptions import VerifyException

from snowir.dialects import tile
from snowir.dialects.tile.decisions import DECISIONS, PLAN_DECISIONS, ConvDecisions, Decision
from snowir.hw import DEFAULT
from snowir.plan.shapes import ConvPlan, ConvShape
from snowir.tile.build import bare_conv_layer
from snowir.tile.read import conv_plan_of

OPS = {op.name: op for op in tile.Tile.operations}


@pytest.mark.parametrize("d", DECISIONS, ids=lambda d: f"{d.op}.{d.name}")
def test_declaration_gives_property_and_docs(d: Decision) -> None:
    """The declaring op has the property (with the declared constraint) and FIELD_DOCS its meaning."""
    assert d.name in OPS[d.op].get_irdl_definition().properties
    assert tile.FIELD_DOCS[f"{d.op}.{d.name}"].startswith(d.doc)


def test_plan_decisions_are_convplan_fields() -> None:
    """Every plan-level declaration is a keyword-only ConvPlan field with the declared default,
    and ConvPlan declares none of them itself."""
    own = set(ConvPlan.__annotations__)
    for f in dataclasses.fields(ConvDecisions):
        d = f.metadata["decision"]
        assert f.name == d.field and f.kw_only and f.default == d.default and f.name not in own
    assert {f.name for f in dataclasses.fields(ConvPlan)} >= {d.field for d in PLAN_DECISIONS}


def _residual_1x1() -> tile.LayerOp:
    """A COOP residual 1x1 conv whose planner chooses bypass slices of two kernel tiles."""
    s = ConvShape(c=128, h=8, w=8, k=128, kh=1, kw=1, sy=1, sx=1, pt=0, pl=0, pb=0, pr=0, relu=False, shift=8)
    rng = np.random.default_rng(0)
    weights = rng.integers(-64, 64, (s.k, s.c, 1, 1), dtype=np.int16)
    return bare_conv_layer("res", s, weights, np.zeros(s.k, np.int16), DEFAULT, mode="COOP", bypass=True)


def test_written_and_read_through_the_declarations() -> None:
    """build writes the planner's choice as the declared property, read.conv_plan_of reads it back
    into the same ConvPlan field; an edit of the property changes the plan."""
    layer = _residual_1x1()
    plan = conv_plan_of(layer)
    assert plan.bypass_slices and plan.slice_tiles == 2
    assert layer.properties["slice_tiles"] == IntegerAttr(2, i64)
    for d in PLAN_DECISIONS:
        holder = layer if d.op == "tile.layer" else next(o for o in layer.body.block.ops if o.name == d.op)
        assert d.value(holder) == getattr(plan, d.field)
    layer.properties.pop("slice_tiles")
    assert conv_plan_of(layer).slice_tiles == 1


def test_rule_is_the_verifier_message() -> None:
    """A property breaking its declared rule is refused as `name: rule`, once."""
    layer = _residual_1x1()
    layer.properties["slice_tiles"] = IntegerAttr(1, i64)
    with pytest.raises(VerifyException, match="slice_tiles: 2 or more kernel tiles a bypass slice holds"):
        layer.verify()
    layer.properties["slice_tiles"] = IntegerAttr(2, i64)
    layer.properties.pop("bypass_slices")
    with pytest.raises(VerifyException, match="slice_tiles: 2 or more kernel tiles a bypass slice holds"):
        layer.verify()


def test_ir_decisions_read_only_through_declarations() -> None:
    """No library file reads or writes a declared IR decision by its property name by hand
    (`properties["cu_rows"]`, `mt._int("cu_rows")`, `kt.slot is not None`): only decisions.py names
    it; the rest go through the declaration (`CU_ROWS.value(mt)`, `CU_ROWS.write(mt, r)`)."""
    import re
    from pathlib import Path

    from snowir.dialects.tile.decisions import IR_ONLY, PLAN_DECISIONS

    later = tuple(d for d in PLAN_DECISIONS if not d.planned)  # set by a later pass, read from the IR
    assert later
    root = Path(__file__).resolve().parent.parent
    sources = [p for d in ("snowir", "dialects", "passes", "tools") for p in (root / d).rglob("*.py")
               if p.name != "decisions.py"]
    lines = [(p, i, line) for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
             if any(d.name in line for d in IR_ONLY + later)]
    for d in IR_ONLY + later:
        by_hand = re.compile(rf"""properties(\.get\(|\.pop\(|\[)["']{d.name}["']|_ints?\(["']{d.name}["']\)"""
                             rf"""|\b(mt|kt|layer|region|out|new|source)\.{d.name}\b""")
        hits = [f"{p.relative_to(root)}:{i}" for p, i, line in lines if by_hand.search(line)]
        assert not hits, f"{d.name} read by hand: {hits}"


@pytest.mark.parametrize("name, good, bad", [("channels", (0, 8, 16), (8, 16, 16)),
                                             ("pixels", (1, 0, 2, 2, 8, 8), (2, 0, 2, 2, 8, 8))])
def test_placement_decisions_declared(name: str, good: tuple[int, ...], bad: tuple[int, ...]) -> None:
    """A dram_region's placement (`channels`: a concat slice, `pixels`: an interleave's phase) is
    a declared decision of tile.dram_region: read and written through it, its rule the verifier's
    one message, and only an 'output' region takes it."""
    from snowir.dialects.tile.decisions import CHANNELS, PIXELS

    d = {"channels": CHANNELS, "pixels": PIXELS}[name]
    region = tile.DramRegionOp("r", 0, 64, "output")
    assert d.value(region) is None
    d.write(region, good)
    assert d.value(region) == good and name in region.properties
    region.verify_()
    d.write(region, bad)
    with pytest.raises(VerifyException, match=f"{name}: " + re.escape(d.rule)):
        region.verify_()
    maps = tile.DramRegionOp("m", 0, 64, "maps")
    d.write(maps, good)
    with pytest.raises(VerifyException, match=f"{name}: "):
        maps.verify_()
    d.write(region, None)
    assert name not in region.properties


def test_the_crop_placement_is_declared_on_input_regions() -> None:
    """A crop's window (`crop` = [y0, x0, height, width]) is a declared decision of tile.dram_region
    too, but of an input region: a 'maps' or 'bypass' one takes it, an 'output' one does not; its
    rule the verifier's one message."""
    from snowir.dialects.tile.decisions import CROP

    for label in ("maps", "bypass"):
        region = tile.DramRegionOp("r", 0, 64, label)
        CROP.write(region, (1, 2, 8, 8))
        assert CROP.value(region) == (1, 2, 8, 8) and "crop" in region.properties
        region.verify_()
        CROP.write(region, (8, 2, 8, 8))
        with pytest.raises(VerifyException, match="crop: " + re.escape(CROP.rule)):
            region.verify_()
        CROP.write(region, None)
        assert "crop" not in region.properties
    out = tile.DramRegionOp("o", 0, 64, "output")
    CROP.write(out, (1, 2, 8, 8))
    with pytest.raises(VerifyException, match="crop: "):
        out.verify_()


def test_the_host_read_is_declared_on_output_regions() -> None:
    """The host's read of a merged conv's grid through its interleave (`host_read` = [sy, sx, oy, ox,
    height, width]) is a declared decision of an 'output' tile.dram_region: offsets within the
    stride and a non-empty window, else the rule's one message; a 'maps' region does not take it."""
    from snowir.dialects.tile.decisions import HOST_READ

    region = tile.DramRegionOp("o", 0, 64, "output")
    HOST_READ.write(region, (2, 2, 1, 1, 20, 20))
    assert HOST_READ.value(region) == (2, 2, 1, 1, 20, 20) and "host_read" in region.properties
    region.verify_()
    for bad in [(2, 2, 2, 1, 20, 20), (2, 2, 1, 0, 0, 20), (0, 2, 0, 1, 20, 20)]:
        HOST_READ.write(region, bad)
        with pytest.raises(VerifyException, match="host_read: " + re.escape(HOST_READ.rule)):
            region.verify_()
    HOST_READ.write(region, None)
    assert "host_read" not in region.properties
    maps = tile.DramRegionOp("m", 0, 64, "maps")
    HOST_READ.write(maps, (2, 2, 1, 1, 20, 20))
    with pytest.raises(VerifyException, match="host_read: "):
        maps.verify_()
