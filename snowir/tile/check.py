"""
The tile verifier for one hardware configuration (what a researcher leaves empty is derived
first: snowir/tile/derive.py).

`check_conv`, `check_pool`: every rule the code generators rely on, one line naming the layer,
the op and the rule when broken (and what may be edited instead). Loads and windows written out must be
the ones the attributes imply: the generators follow the attributes, so a load edited alone
is refused rather than ignored.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from xdsl.ir import Operation

from snowir.dialects import tile
from snowir.dialects.tile.decisions import CHANNELS, CU_ROWS, MAPS_BUFFERING, PHASES, PIXELS, PLAN_DECISIONS, RING
from snowir.dialects.tile.refusals import bias_refusal
from snowir.hw import SnowflakeConfig
from snowir.plan.fused_pool import fusable, maps_words, place_ring
from snowir.plan.indp import interior_rows
from snowir.plan.indp_columns import column_layout, columns_refusal
from snowir.plan.pool import check_pool_channels, max_pool_rows, row_maxs
from snowir.plan.shapes import (BIAS_BLOCK, ConvPlan, LoweringError, PoolShape, TRACE_CHUNK, band_plans, bands_of,
                                coop_kernels, gather_of, indp_kernel_words, input_columns, input_rows,
                                kernels_per_tile, plan_machine)
from snowir.plan.layout import phases_refusal
from snowir.plan.pool_shapes import GUARD, PoolTile, ring_schedule
from snowir.plan.conv import slice_words
from snowir.resources import int16_array, int16_words
from snowir.tile.bodies import body_difference, conv_tile_body, pool_tile_body
from snowir.tile.build import layout_of, packed_words, shape_of
from snowir.tile.placement import (host_read_refusal, input_bytes, input_crop, output_bytes, output_channels,
                                   output_phases, output_pixels, region_tiles, regions_of, tiles_refusal)
from snowir.tile.derive import holds, maps_at
from snowir.tile.read import TileError, kernel_tile_of, maps_tiles_of


NOT_SCHEDULE = ("unit", "load_id")
"""tile.load fields a body comparison leaves out: load units are balance-loads' decision (checked
apart), load IDs number the layer's loads (a label)."""


def _schedule_key(op: Operation) -> Hashable:
    """What a tile op says about the schedule: its name, properties but NOT_SCHEDULE, children."""
    props = tuple(sorted(((k, v) for k, v in op.properties.items() if k not in NOT_SCHEDULE),
                         key=lambda kv: kv[0]))
    children = tuple(_schedule_key(c) for r in op.regions for c in tile.body_ops(op)) if op.regions else ()
    return op.name, props, children


def _what(layer: tile.LayerOp, op: Operation) -> str:
    if isinstance(op, tile.KernelTileOp):
        return "kernel tile"
    return f"maps tile {[o for o in layer.body.block.ops if isinstance(o, tile.MapsTileOp)].index(op)}"


def check_bodies(layer: tile.LayerOp, want: list[Operation]) -> None:
    """Loads and windows written out must be the ones the tiles' attributes imply."""
    for op in layer.walk():
        if isinstance(op, tile.LoadOp) and op._int("unit") != 0:
            raise TileError(layer, "tile.load unit: load units are balance-loads' decision "
                                   "(run balance-loads{units=N}, or edit the snowflake_asm)")
    have = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp | tile.MapsTileOp)]
    for a, b in zip(have, want):
        if _schedule_key(a) != _schedule_key(b):
            ka, kb = dict(a.properties), dict(b.properties)
            diff = sorted(k for k in ka.keys() | kb.keys() if k not in NOT_SCHEDULE and ka.get(k) != kb.get(k))
            if diff:
                raise TileError(layer, f"{_what(layer, a)}: {diff[0]} is derived from the other attributes "
                                       f"(write the tile's body empty `{{}}` to recompute it)")
            if not tile.body_ops(a):
                raise TileError(layer, f"{_what(layer, a)}: a body with no ops (braces on separate lines) is "
                                       f"checked as written; its attributes imply {len(tile.body_ops(b))} loads and "
                                       "windows: write the body `{}` on one line to derive them")
            raise TileError(layer, f"{_what(layer, a)}: its loads and windows differ from what its attributes imply, "
                                   f"{body_difference(a, b)}; they are derived: edit the attributes (out_rows, count, cu_rows, ring, the "
                                   "layer's mode, loop_order, maps_buffering, ...) and write the body empty `{}`")


def _cover(layer: tile.LayerOp, rows: list[tuple[int, int]], oh: int, first: int = 0) -> None:
    starts = [0] + [y1 for _, y1 in rows[:-1]]
    for i, ((y0, y1), want) in enumerate(zip(rows, starts), first):
        if y0 != want:
            raise TileError(layer, f"maps tile {i}: out_rows start at {y0}, not {want}: maps tiles cover output "
                                   f"rows 0..{oh} in order")
    if rows[-1][1] != oh:
        raise TileError(layer, f"maps tile {first + len(rows) - 1}: out_rows end at {rows[-1][1]}, not {oh}: maps tiles "
                               f"cover output rows 0..{oh} in order")


def _in_rows(layer: tile.LayerOp, i: int, mt: tile.MapsTileOp, want: tuple[int, int], prev: int,
             first: bool | None = None) -> None:
    if mt._ints("in_rows") != want:
        raise TileError(layer, f"maps tile {i}: in_rows {list(mt._ints('in_rows'))} are not the {list(want)} its "
                               "out_rows read (derived: write the body empty `{}` to recompute)")
    overlap = 0 if (i == 0 if first is None else first) else max(0, prev - want[0])
    if mt._int("overlap") != overlap:
        raise TileError(layer, f"maps tile {i}: overlap {mt._int('overlap')} is not {overlap} (derived: write the "
                               "body empty `{}` to recompute)")


def _regions(layer: tile.LayerOp, sizes: dict[str, int]) -> None:
    regions = regions_of(layer)
    for label, need in sizes.items():
        r = regions.get(label)
        if r is None:
            raise TileError(layer, f"no '{label}' tile.dram_region")
        if r.size.value.data < need:
            raise TileError(layer, f"tile.dram_region @{r.sym_name.data}: {r.size.value.data} bytes, the layer "
                                   f"moves {need} there")
    # regions the model's DRAM plan placed are checked there (a residual input that is also the
    # maps is one tensor, read through two regions)
    spans = sorted((r.offset.value.data, r.offset.value.data + r.size.value.data, r.sym_name.data)
                   for r in regions.values() if r.tensor is None)
    for (a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise TileError(layer, f"tile.dram_region @{bn} overlaps @{an}")


def check_slice(layer: tile.LayerOp, k: int) -> None:
    """An output region that is a device concat's channel slice (`channels`) holds the layer's k
    channels of every pixel, and is the layer's own output (a fused pool's conv writes
    `conv_output`, the pool `output` of its own: neither steps a wider tensor's pixels). An
    interleave's phase (`pixels`) is a conv's output only: a max pool writes whole pixels, row after
    row (accepted, the pool wrote its rows over the phase's tensor as if `pixels` were not there)."""
    out = regions_of(layer).get("output")
    pool = layer.pool is not None or not isinstance(layer.shape, tile.ConvShapeAttr)
    if out is not None and PIXELS.value(out) is not None and pool:
        raise TileError(layer, f"tile.dram_region @{out.sym_name.data}: pixels: a max pool writes whole pixels of its "
                               "own, not an interleave's phase (remove pixels)")
    if out is not None and PHASES.value(out) is not None and (pool or PIXELS.value(out) or CHANNELS.value(out)):
        raise TileError(layer, f"tile.dram_region @{out.sym_name.data}: phases: a conv's own output, the whole "
                               "result of its interleave (remove phases, or the pool, pixels or channels)")
    if out is not None and (why := host_read_refusal(out, layer)) is not None:
        raise TileError(layer, why)
    if out is None or CHANNELS.value(out) is None:
        return
    _, count, _ = output_channels(out)
    if layer.pool is not None:
        raise TileError(layer, f"tile.dram_region @{out.sym_name.data}: channels: a fused pool writes an output of its "
                               "own (remove channels, or the pool)")
    if count != k:
        raise TileError(layer, f"tile.dram_region @{out.sym_name.data}: channels count {count}: the layer writes its "
                               f"{k} channels")


def check_crops(layer: tile.LayerOp, sizes: dict[str, tuple[int, int]]) -> None:
    """An input region that is a crop's window (`crop`) holds the layer's input (of `sizes[label]`
    rows and columns) inside its tensor, and is smaller than it (else it means nothing); a max pool
    reads its own input's rows whole."""
    for label, region in regions_of(layer).items():
        window = input_crop(region)
        if window is None:
            continue
        if label not in sizes:
            raise TileError(layer, f"tile.dram_region @{region.sym_name.data}: crop: a max pool loads whole rows of "
                                   "an input of its own (remove crop)")
        (y0, x0, height, width), (h, w) = window, sizes[label]
        if (h, w) == (height, width):
            raise TileError(layer, f"tile.dram_region @{region.sym_name.data}: crop {list(window)}: the window is "
                                   f"its whole {height}x{width} tensor, no crop (remove crop)")
        if y0 + h > height or x0 + w > width:
            raise TileError(layer, f"tile.dram_region @{region.sym_name.data}: crop {list(window)}: the layer's "
                                   f"{h}x{w} {label} reaches past the {height}x{width} tensor")


def check_conv(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    hw = plan_machine(plan, hw)  # its maps tiles leave a `maps` layout's bias block room
    full = shape_of(layer)
    s = plan.shape
    kt = kernel_tile_of(layer)
    tiles = maps_tiles_of(layer)
    regions = regions_of(layer)
    indp = plan.indp
    fc = s.kernel_words > hw.weights_buffer_elements
    for d in PLAN_DECISIONS:  # the declared decisions' plan-level preconditions
        if (why := d.refusal(plan, hw)) is not None:
            raise TileError(layer, why)
    # kernel tiles
    if kt._int("first") != 0:
        raise TileError(layer, "kernel tile: first must be 0 (the tile repeats over kernels count x repeat; edit count)")
    if indp and plan.kernels != kernels_per_tile(hw):
        raise TileError(layer, f"kernel tile: count {plan.kernels}: an INDP tile is {kernels_per_tile(hw)} kernels "
                               "(16 per vMAC; write the body empty `{}` to derive it)")
    if not indp:
        if plan.kernels > hw.vmacs:
            raise TileError(layer, f"kernel tile: count {plan.kernels} > the {hw.vmacs} vMACs (one kernel each in COOP)")
        per_group = full.group_kernels
        if full.groups > 1 and per_group % plan.kernels:
            raise TileError(layer, f"kernel tile: count {plan.kernels} does not divide a group's {per_group} kernels "
                                   "(a tile never spans two groups)")
        if full.groups > 1 and plan.kernels != coop_kernels(hw, full):
            raise TileError(layer, f"kernel tile: count {plan.kernels}: a grouped conv takes {coop_kernels(hw, full)} "
                                   "kernels a tile (edit count on ungrouped layers)")
    if plan.tiles != -(-full.k // plan.kernels):
        raise TileError(layer, f"kernel tile: repeat {plan.tiles} is not ceil({full.k} / {plan.kernels}) = "
                               f"{-(-full.k // plan.kernels)} (derived: write the body empty `{{}}` to recompute)")
    w = regions.get("weights")
    if w is not None and w.packing is not None:
        packed = (w.packing.data.value, w.packed_kernels.value.data)  # type: ignore[union-attr]
        if packed != (plan.mode, plan.kernels):
            raise TileError(layer, f"tile.dram_region @{w.sym_name.data}: weights packed for {packed[0]}, "
                                   f"{packed[1]} kernels a tile; the layer runs {plan.mode} with {plan.kernels} (write "
                                   "the kernel tile's body empty `{}` to repack them)")
        words = int16_words(w.value) if w.value is not None else None
        if words is not None and words != packed_words(full, plan.mode, plan.kernels, hw):
            raise TileError(layer, f"tile.dram_region @{w.sym_name.data}: biases {full.bias_at}: the image keeps them "
                                   "the other way (write the kernel tile's body empty `{}` to repack it, and the maps "
                                   "tiles' to place them for the buffer it leaves)")
    if full.bias_at == "maps" and (why := bias_refusal(plan, hw)) is not None:
        raise TileError(layer, f"tile.dram_region @{w.sym_name.data if w is not None else 'weights'}: biases maps: "
                               f"{why} (remove biases)")
    words = indp_kernel_words(s, hw) if indp else s.kernel_words
    if not fc and words > hw.weights_buffer_elements:
        # one root cause, one message: whatever holds the tiles (slot, stagger, resident), the kernel
        # itself does not fit (only a COOP kernel over the buffer streams in chunks)
        bare = indp_kernel_words(replace(s, bias_at="maps"), hw) if indp else replace(s, bias_at="maps").kernel_words
        hint = f" (without their bias blocks, biases = maps: {bare})" if s.bias_at == "kernel" \
            and bare <= hw.weights_buffer_elements else ""
        raise TileError(layer, f"kernel tile: {words} words a kernel exceed the {hw.weights_buffer_elements}-word "
                               f"buffer{hint}")
    if plan.double_buffer_weights:
        if fc:
            chunk = (plan.w_slot - BIAS_BLOCK) // hw.lanes * hw.lanes
            if chunk < hw.lanes or plan.w_slot + chunk + BIAS_BLOCK > hw.weights_buffer_elements:
                raise TileError(layer, f"kernel tile: slot {plan.w_slot}: two chunks of a kernel larger than the "
                                       f"buffer must fit its {hw.weights_buffer_elements} words")
        elif not holds("slot", plan.w_slot, words, plan.tiles, hw):
            raise TileError(layer, f"kernel tile: slot {plan.w_slot}: a kernel's {words} words must fit below it and "
                                   f"above it within the {hw.weights_buffer_elements}-word weights buffer")
    elif fc:
        raise TileError(layer, "kernel tile: a kernel larger than the weights buffer streams in chunks: it needs a slot")
    kloop_coop = not indp and plan.loop_order == "Kloop" and full.groups == 1
    columns = indp and plan.cu_split == "cols"
    if plan.stagger:
        if not (kloop_coop or columns) or fc:
            raise TileError(layer, "kernel tile: stagger applies to ungrouped COOP Kloop layers and column-split "
                                   "INDP ones (remove it)")
        unrolled = s.cin == s.c and s.c <= TRACE_CHUNK  # codegen/pixels.py unrolls such pixels, on r14
        if not columns and s.kh == s.kw == 1 and (unrolled or plan.bypass_addr is not None):
            raise TileError(layer, "kernel tile: stagger: this 1x1 conv's pixel code uses the stagger's registers "
                                   "(remove it)")
        if plan.stagger % 2 or not holds("stagger", plan.stagger, words, plan.tiles, hw):
            raise TileError(layer, f"kernel tile: stagger {plan.stagger} must be even, below the kernel's {words} words, "
                                   f"and the kernel at it within the {hw.weights_buffer_elements}-word buffer")
    if columns:
        why = columns_refusal(full, hw)
        if why is not None:
            raise TileError(layer, f"cu_split = cols: {why.removeprefix('INDP with a residual bypass needs ')} "
                                   "(remove cu_split)")
    if plan.resident_weights:
        if not (kloop_coop or columns) or fc:
            raise TileError(layer, "kernel tile: resident applies to ungrouped COOP Kloop layers and column-split "
                                   "INDP ones (remove it)")
        if not holds("resident", 1, words, plan.tiles, hw):
            raise TileError(layer, f"kernel tile: resident: {plan.tiles} tiles of {words} words exceed the "
                                   f"{hw.weights_buffer_elements}-word weights buffer")
    # loop order
    if plan.loop_order == "Mloop" and (indp or plan.bypass_addr is not None or plan.pool is not None or fc):
        kind = "an INDP" if indp else "a residual" if plan.bypass_addr is not None else \
            "a fused pool's" if plan.pool is not None else "a fully connected"
        raise TileError(layer, f"loop_order Mloop: {kind} layer runs Kloop only")
    # maps tiles
    if plan.column_tiled:
        _check_columns(layer, plan, tiles, hw, fc)
    else:
        _check_rows(layer, plan, tiles, 0, hw, fc)
    if plan.pool is not None:
        _check_ring(layer, plan, hw)
    elif "conv_output" in regions:
        raise TileError(layer, "a 'conv_output' region is a fused pool's: without `pool` the conv writes 'output' "
                               "(remove the pool's regions, or keep `pool`)")
    if plan.gather is not None and plan.gather != gather_of(full):
        want = gather_of(full)
        raise TileError(layer, f"gather {list(plan.gather)}: " + (
            f"follows from the shape: {list(want)} (or remove it to read the input in place)" if want else
            "only a strided 1x1 conv or a conv over a channel slice gathers its maps (remove it)"))
    if plan.bypass_slices and (plan.bypass_addr is None or indp):
        raise TileError(layer, "bypass_slices: a COOP residual conv's")
    check_slice(layer, full.k)
    if (why := tiles_refusal(layer, full, plan, hw)) is not None:
        raise TileError(layer, why)
    check_crops(layer, {"maps": (full.h, full.w), "bypass": (full.oh, full.ow)})
    sizes = {"maps": input_bytes(regions.get("maps"), full.h * full.w, full.cin),
             "weights": 2 * packed_words(full, plan.mode, plan.kernels, hw),
             "output" if plan.pool is None else "conv_output": output_bytes(regions["output"], full) if plan.pool is None
             else full.oh * full.ow * full.k * 2}
    if plan.bypass_addr is not None:
        r_tiles = region_tiles(regions["bypass"]) if "bypass" in regions else None
        # a channel-tile-major bypass: the whole tensor, its blocks' width a pixel
        sizes["bypass"] = input_bytes(regions.get("bypass"), full.oh * full.ow, full.k if r_tiles is None else r_tiles[0])
    pixels = output_pixels(regions["output"]) if plan.pool is None else None
    if pixels is not None:  # an interleave's phase: every pixel it writes inside the tensor
        oy, ox, sy, sx, height, width = pixels
        if oy + sy * (full.oh - 1) >= height or ox + sx * (full.ow - 1) >= width:
            raise TileError(layer, f"tile.dram_region @{regions['output'].sym_name.data}: pixels {list(pixels)}: its "
                                   f"{full.oh}x{full.ow} output reaches past the {height}x{width} tensor")
    phases = output_phases(regions["output"]) if plan.pool is None else None
    if phases is not None and (why := phases_refusal(plan, phases, hw)) is not None:
        raise TileError(layer, f"tile.dram_region @{regions['output'].sym_name.data}: phases {list(phases)}: {why}")
    if plan.pool is not None:
        sizes["output"] = plan.pool.oh * plan.pool.ow * plan.pool.c * 2
    _regions(layer, sizes)
    if w is not None and w.value is not None and 2 * int16_array(w.value).size != w.size.value.data:
        # the region is its image's DRAM segment, byte for byte (larger: the segment would not verify)
        raise TileError(layer, f"tile.dram_region @{w.sym_name.data}: {w.size.value.data} bytes are not its image's "
                               f"{2 * int16_array(w.value).size}")
    want = conv_tile_body(full, plan, layout_of(layer), hw)
    if len(want) != 1 + len(tiles):
        raise TileError(layer, f"{len(tiles)} maps tiles where its rows give {len(want) - 1}")
    check_bodies(layer, want)


def _check_columns(layer: tile.LayerOp, plan: ConvPlan, tiles: list[tile.MapsTileOp], hw: SnowflakeConfig,
                   fc: bool) -> None:
    """A column-tiled conv: its bands cover the output columns in order, each band's tiles its
    rows, each tile's in_cols the columns its out_cols read, each band's tiles fit the buffer."""
    s = plan.shape
    what = ("an INDP layer" if plan.indp else "a residual conv" if plan.bypass_addr is not None else
            "a fused pool's conv" if plan.pool is not None else "a gathering conv" if plan.gather is not None else
            "a kernel streamed in chunks" if fc else None)
    if what is not None:
        raise TileError(layer, f"maps tile 0: out_cols: {what} is not column-tiled (remove out_cols)")
    uncut = [i for i, st in enumerate(plan.strips) if st.cols is None]
    if uncut:
        raise TileError(layer, f"maps tile {uncut[0]}: no out_cols: every maps tile of a column-tiled layer names "
                               "its output columns")
    bands = bands_of(plan)
    at = 0
    for x0, x1 in bands:
        i = next(i for i, st in enumerate(plan.strips) if st.cols == (x0, x1))
        if x0 != at or x1 > s.ow:
            raise TileError(layer, f"maps tile {i}: out_cols [{x0}, {x1}): column bands cover output columns "
                                   f"0..{s.ow} in order, each band's tiles together")
        at = x1
    if at != s.ow:
        raise TileError(layer, f"maps tile {len(tiles) - 1}: out_cols end at {at}, not {s.ow}: column bands cover "
                               f"output columns 0..{s.ow} in order")
    first = 0
    for (x0, x1), band in band_plans(plan):
        want = input_columns(s, x0, x1)
        for i in range(first, first + len(band.strips)):
            if tuple(tiles[i]._ints("in_cols")) != want:
                raise TileError(layer, f"maps tile {i}: in_cols {list(tiles[i]._ints('in_cols'))} are not the "
                                       f"{list(want)} its out_cols read (derived: write the body empty `{{}}`)")
        _check_rows(layer, band, tiles[first:first + len(band.strips)], first, hw, fc)
        first += len(band.strips)


def _check_rows(layer: tile.LayerOp, plan: ConvPlan, tiles: list[tile.MapsTileOp], first: int,
                hw: SnowflakeConfig, fc: bool) -> None:
    """Maps tiles (the layer's, or a column band's from tile `first` on) cover the output rows in
    order, read the input rows they say, and fit the buffer as the layer's buffering places them."""
    s = plan.shape
    rows = [(st.y0, st.y1) for st in plan.strips]
    _cover(layer, rows, s.oh, first)
    prev = 0
    for j, (mt, st) in enumerate(zip(tiles, plan.strips)):
        i = first + j
        if mt._int("cu") != -1:
            raise TileError(layer, f"maps tile {i}: cu {mt._int('cu')}: maps tiles are broadcast (-1); an INDP "
                                   "row group spreads its rows over the CUs by cu_rows")
        if RING.value(mt) is not None:
            raise TileError(layer, f"maps tile {i}: ring belongs to max pool layers")
        if not plan.row_groups and CU_ROWS.value(mt) is not None:
            raise TileError(layer, f"maps tile {i}: cu_rows belongs to row groups, INDP's or coop_rows' (write the "
                                   "body empty `{}`, or set coop_rows)")
        _in_rows(layer, i, mt, input_rows(s.h, s.kh, s.sy, s.pt, st.y0, st.y1), prev, j == 0)
        prev = st.r1
    _check_maps_room(layer, plan, hw, fc)


def _check_maps_room(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig, fc: bool) -> None:
    s = plan.shape
    row = s.w * s.cin
    buffering = MAPS_BUFFERING.value(layer)
    strips = plan.strips
    if fc:
        if len(strips) != 1 or s.h * row > hw.maps_buffer_elements:
            raise TileError(layer, "a kernel larger than the weights buffer needs the whole input in one maps tile")
        return
    if plan.indp or plan.coop_rows:
        if buffering != tile.MapsBuffering.DOUBLE:
            raise TileError(layer, f"maps_buffering {buffering.value}: row groups (INDP, coop_rows) are double-buffered")
        if plan.cu_split == "cols":
            lay = column_layout(s, hw, max(st.y1 - st.y0 for st in strips))
            if lay.words > hw.maps_buffer_elements:
                i = max(range(len(strips)), key=lambda j: strips[j].y1 - strips[j].y0)
                raise TileError(layer, f"maps tile {i}: two row groups of {lay.rows} rows take {lay.words} words of "
                                       f"the {hw.maps_buffer_elements}-word maps buffer (split the tile)")
            return
        top, bottom = interior_rows(s)
        for i, st in enumerate(strips):
            r = plan.cu_rows[i]
            if (st.y1 - st.y0) % r or (st.y1 - st.y0) // r > hw.cus:
                raise TileError(layer, f"maps tile {i}: {st.y1 - st.y0} rows are not up to {hw.cus} CUs x cu_rows {r}")
            cus = (st.y1 - st.y0) // r
            if (cus > 1 or r > 1) and (st.y0 < top or st.y1 > bottom):
                fix = f"cu_rows = 1 and out_rows [{st.y0}, {st.y0 + 1})" if r > 1 else \
                    f"out_rows [{st.y0}, {st.y0 + 1}): one row on one CU"
                raise TileError(layer, f"maps tile {i}: rows whose kernel rows padding clips form single-row groups "
                                       f"({fix}; or write the bodies empty `{{}}` to derive the groups)")
            need = max(b - a for a, b in (input_rows(s.h, s.kh, s.sy, s.pt, st.y0 + c * r, st.y0 + (c + 1) * r)
                                          for c in range(cus))) * row
            if need > hw.maps_bank_elements:
                raise TileError(layer, f"maps tile {i}: a CU's {need} words exceed a {hw.maps_bank_elements}-word bank")
        return
    if plan.bypass_addr is not None:
        out_row = s.ow * s.k
        if plan.bypass_slices:
            if buffering != tile.MapsBuffering.SINGLE:
                raise TileError(layer, f"maps_buffering {buffering.value}: with bypass slices the maps tiles take "
                                       "turns at the bottom of the buffer (single)")
            n = slice_words(plan)
            b0, b1 = plan.slice_bases
            if b1 - b0 < n or b1 + n > hw.maps_buffer_elements:
                raise TileError(layer, f"bypass_slices {[b0, b1]}: two slices of {n} words within the buffer")
            limit, extra = b0, 0
        else:
            double = buffering == tile.MapsBuffering.DOUBLE and len(strips) > 1
            if buffering == tile.MapsBuffering.WHOLE:
                raise TileError(layer, "maps_buffering whole: a residual conv's tiles are single or double (halves)")
            limit, extra = (hw.maps_buffer_elements // 2 if double else hw.maps_buffer_elements), out_row
        for i, st in enumerate(strips):
            need = (st.r1 - st.r0) * row + (st.y1 - st.y0) * extra
            if need > limit:
                raise TileError(layer, f"maps tile {i}: {need} words (maps{' + bypass rows' if extra else ''}) exceed "
                                       f"the {limit} words its buffering gives (split the tile)")
        return
    if buffering == tile.MapsBuffering.SINGLE:
        raise TileError(layer, "maps_buffering single is a residual conv's (double or whole)")
    # (a grouped conv over blocks loads a maps tile a kernel tile: its tiles alternate banks even alone)
    limit = hw.maps_buffer_elements if buffering == tile.MapsBuffering.WHOLE or (len(strips) == 1 and not s.block_maps) \
        else hw.maps_bank_elements
    for i, st in enumerate(strips):
        need = (st.r1 - st.r0) * row + s.overread  # a padded depthwise conv's last lanes read past the tile
        if need > limit:
            whole = ", or maps_buffering = whole" if limit < hw.maps_buffer_elements else ""
            raise TileError(layer, f"maps tile {i}: {need} words exceed the {limit}-word "
                                   f"{'buffer' if limit == hw.maps_buffer_elements else 'bank'} (split the tile{whole})")


def _check_ring(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    p = plan.pool
    assert p is not None
    if not fusable(plan, p, hw):
        raise TileError(layer, "pool: a fused max pool reads an INDP conv's, or a plain COOP Kloop conv's with "
                               "banked strips, output whole (its shape), channels the pool unit takes")
    span = ring_schedule(plan, p)[2]
    slots = plan.pool_slots
    size = p.w * p.c + GUARD
    if len(slots) < span:
        raise TileError(layer, f"pool_slots: {len(slots)} slots, the pool needs {span} rows at once "
                               f"({_slots_hint(plan, p, span, size, hw)})")
    used = maps_words(plan)
    for a in slots:
        bank = a // hw.maps_bank_elements
        if bank > 1 or a % 2 or a < bank * hw.maps_bank_elements + used[bank] or \
                a + size > (bank + 1) * hw.maps_bank_elements:
            raise TileError(layer, f"pool_slots: slot {a} must be even and hold {size} words above the row groups' "
                                   f"or strips' maps, within its bank ({_slots_hint(plan, p, span, size, hw)})")
    ordered = sorted(slots)
    if any(b < a + size for a, b in zip(ordered, ordered[1:])):
        raise TileError(layer, f"pool_slots: slots of {size} words overlap ({_slots_hint(plan, p, span, size, hw)})")


def _slots_hint(plan: ConvPlan, p: PoolShape, span: int, size: int, hw: SnowflakeConfig) -> str:
    """What to write when a fused pool's slots do not serve its strips: the slots that would, or
    (no room for them above the maps) shorter maps tiles."""
    fits = place_ring(plan, p, hw)
    if fits is None:
        return (f"{span} slots of {size} words do not fit above the maps tiles' maps in their banks: make the "
                "maps tiles shorter")
    return (f"write pool_slots = array<i64: {', '.join(map(str, fits))}>, or every maps tile's body empty `{{}}` "
            "to derive them")


def check_pool(layer: tile.LayerOp, p: PoolShape, tiles: list[PoolTile], hw: SnowflakeConfig) -> None:
    try:
        check_pool_channels(p, hw)
    except LoweringError as e:
        raise TileError(layer, str(e)) from None
    maps = maps_tiles_of(layer)
    cut = [i for i, mt in enumerate(maps) if mt.out_cols is not None]
    if cut:
        raise TileError(layer, f"maps tile {cut[0]}: out_cols: max pools are not column-tiled (remove out_cols)")
    _cover(layer, [(t.strip.y0, t.strip.y1) for t in tiles], p.oh)
    buffering = MAPS_BUFFERING.value(layer)
    if buffering == tile.MapsBuffering.SINGLE:
        raise TileError(layer, "maps_buffering single is a residual conv's (double or whole)")
    row = p.w * p.cin
    for i, (mt, t) in enumerate(zip(maps, tiles)):
        st = t.strip
        if mt._int("cu") != -1:
            raise TileError(layer, f"maps tile {i}: cu {mt._int('cu')}: a max pool's maps are broadcast to every CU "
                                   "(cu = -1)")
        if CU_ROWS.value(mt) is not None:
            raise TileError(layer, f"maps tile {i}: cu_rows: a max pool's maps are broadcast to every CU, not split "
                                   "in row groups (remove cu_rows)")
        _in_rows(layer, i, mt, input_rows(p.h, p.kh, p.sy, p.pt, st.y0, st.y1), 0)
        if t.ring:
            per_row = row_maxs(p, hw)
            if t.ring < p.kh + p.sy or t.ring > max_pool_rows(p, hw, True):
                raise TileError(layer, f"maps tile {i}: ring {t.ring}: at least {p.kh + p.sy} rows (a window and the "
                                       f"next row's) and at most {max_pool_rows(p, hw, True)} in the buffer")
            if per_row < hw.vector_queue_depth and st.y1 - st.y0 > 1:
                raise TileError(layer, f"maps tile {i}: ring: an output row of {per_row} MAXs is shorter than the "
                                       f"{hw.vector_queue_depth}-deep vector queue (slots would be reloaded while "
                                       "read): use strips (remove ring)")
        elif st.r1 - st.r0 > max_pool_rows(p, hw, buffering == tile.MapsBuffering.WHOLE):
            whole = buffering == tile.MapsBuffering.WHOLE
            fix = "split the tile" if whole else "split the tile, or maps_buffering = whole"
            raise TileError(layer, f"maps tile {i}: {st.r1 - st.r0} input rows exceed the "
                                   f"{max_pool_rows(p, hw, whole)} its {'buffer' if whole else 'bank'} holds ({fix})")
    check_slice(layer, p.c)
    if (why := tiles_refusal(layer, None, None, hw)) is not None:
        raise TileError(layer, why)
    check_crops(layer, {})
    total = output_channels(regions_of(layer)["output"])[2] if "output" in regions_of(layer) else 0
    _regions(layer, {"maps": p.h * row * 2, "output": p.oh * p.ow * (total or p.c) * 2})
    check_bodies(layer, [*pool_tile_body(p, tiles, hw, maps_at(layer))])
