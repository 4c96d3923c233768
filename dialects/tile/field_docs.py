"""
What each `tile` attribute means for the code tile-to-asm generates: docs/dialects.md is
generated from this table (tools/gen_dialect_docs.py), and tests/test_dialects.py checks every
property of every tile op is in it. The schedule decisions' entries come from their declarations
(decisions.py); the rest (geometry, regions, loads, windows) are written here.
"""

from __future__ import annotations

from snowir.dialects.tile.decisions import decision_docs

_WRITTEN: dict[str, str] = {
    "tile.layer.sym_name": "The layer's name; the nn ops it computes name it (`tile = \"...\"`).",
    "tile.layer.kind": "conv or maxpool are lowered (FC layers are convs).",
    "tile.layer.mode": "COOP: a vMAC's 16 MACs share one kernel, maps broadcast; INDP: 16 kernels per vMAC, each CU "
                       "its own output rows. Followed; the weights are repacked when tiles are derived.",
    "tile.layer.loop_order": "Kloop: every kernel tile over a maps tile; Mloop: every maps tile over a kernel tile "
                             "(ungrouped and grouped COOP layers; INDP, residual and FC layers run Kloop).",
    "tile.layer.mloop_bytes": "Estimated DRAM traffic of Mloop (a report figure, C17 Figure 4; no effect on code).",
    "tile.layer.kloop_bytes": "Estimated DRAM traffic of Kloop (a report figure; no effect on code).",
    "tile.layer.relu": "Mirrors #tile.conv_shape's relu field (the write-back applies ReLU); must agree with it.",
    "tile.layer.shape": "The layer's geometry (#tile.conv_shape / #tile.pool_shape): every trace, window and address.",
    "tile.layer.pool": "A fused max pool: its MAX traces run in the conv's program, halfway through each row group.",
    "tile.dram_region.sym_name": "The region's name.",
    "tile.dram_region.offset": "Byte address in the layer's image (segments @x @w @y @r @slack @t).",
    "tile.dram_region.size": "Bytes; checked against what the layer moves there, and against overlaps.",
    "tile.dram_region.label": "maps, weights, output, bypass, scratch or conv_output (a fused pool's conv output).",
    "tile.dram_region.value": "The region's initial contents: the packed weight image.",
    "tile.dram_region.packing": "The weight image's layout (COOP: kernel after kernel; INDP: 16 kernels "
                                "interleaved per vMAC; each with its 16-word bias block unless `biases` = maps); "
                                "must match the layer's mode.",
    "tile.dram_region.packed_kernels": "Kernels per kernel tile in the weight image; must match the kernel tile's count.",
    "tile.kernel_tile.first": "0: the kernel tile op stands for every tile (count x repeat kernels).",
    "tile.kernel_tile.count": "Kernels a tile: one per vMAC in COOP (at most the vMACs; fewer masks the rest; "
                              "coop_rows: one per vMAC of a CU, at most V, every CU the same), 16 per vMAC of a CU in "
                              "INDP (derived). Followed.",
    "tile.kernel_tile.repeat": "Kernel tiles: ceil(K / count) (derived).",
    "tile.maps_tile.out_rows": "Output rows [y0, y1) the tile computes (tiles cover 0..OH in order). Followed.",
    "tile.maps_tile.in_rows": "Input rows the out_rows read, padding excluded (derived).",
    "tile.maps_tile.overlap": "Input rows shared with the previous tile, re-loaded (derived).",
    "tile.maps_tile.cu": "-1: maps broadcast to every CU (a row group, INDP's or coop_rows', spreads rows by cu_rows).",
    "tile.maps_tile.out_cols": "Column tiling: output columns [x0, x1) the tile computes (absent: all); a band's "
                               "tiles follow each other and cover the rows, bands cover 0..OW in order; each band "
                               "loads its rows W x C words apart and writes rows OW x K apart. The planner sets it "
                               "only when the kernel's input rows do not fit the maps buffer. Followed.",
    "tile.maps_tile.in_cols": "Input columns the out_cols read, padding excluded; neighbouring bands share kw - sx "
                              "(the halo, re-loaded) (derived).",
    "tile.load.buffer": "maps or weights.", "tile.load.length": "Elements.",
    "tile.load.dram_addr": "Byte address.", "tile.load.buf_addr": "Buffer element address.",
    "tile.load.unit": "Load unit: balance-loads' decision (0 before it runs).",
    "tile.load.select": "LD select: vMAC j, CU c, broadcast 16+v, or 127 = all.",
    "tile.load.load_id": "The layer's number for the load (a label).",
    "tile.window.trace_length": "Elements a MAC trace reads per kernel row.",
    "tile.window.rows": "Kernel rows a window runs (padding rows clipped).",
    "tile.window.repeat_x": "Windows along a row.", "tile.window.repeat_y": "Rows of windows.",
    "tile.window.offset_x": "Buffer step between windows of a row.", "tile.window.offset_y": "Buffer step between rows.",
    "tile.window.start": "First window's buffer element, from the tile's base.",
    "tile.window.out_addr": "Output byte address of the first window.",
    "tile.window.bias_vmov": "A bias VMOV before each kernel iteration.",
    "tile.window.bypass_vmov": "A bypass VMOV per write-back MAC (residual add).",
    "tile.dram_region.tensor": "The tile.dram_plan tensor the region is (allocate-dram); its offset must be the tensor's.",
    "tile.tensor.sym_name": "The buffer's name (segment name in the lowered program).",
    "tile.tensor.offset": "Byte address in the model's DRAM.", "tile.tensor.size": "Bytes.",
    "tile.tensor.live": "[first, last] positions of the module's tile.layers that use it; no live neighbour overlaps.",
    "tile.tensor.role": "activation (written by a layer or the host, read by later ones), weights, or scratch.",
}
"""Loads and windows are derived from the attributes: written out, they must be the ones the
attributes imply (an edit of one alone is refused); written empty `{}`, they are derived."""

_OPS = ("tile.layer", "tile.dram_region", "tile.kernel_tile", "tile.maps_tile", "tile.load", "tile.window", "tile.tensor")

FIELD_DOCS: dict[str, str] = dict(sorted((_WRITTEN | decision_docs()).items(),
                                         key=lambda kv: _OPS.index(kv[0].rsplit(".", 1)[0])))
"""Every tile op property's meaning, grouped by op (the written entries first within an op)."""
