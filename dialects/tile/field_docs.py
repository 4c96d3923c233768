"""
What each `tile` attribute means for the code tile-to-asm generates: docs/dialects.md is
generated from this table (tools/gen_dialect_docs.py), and tests/test_dialects.py checks every
property of every tile op is in it.
"""

from __future__ import annotations

FIELD_DOCS: dict[str, str] = {
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
    "tile.layer.pool_slots": "Maps-buffer words of the fused pool's row ring (conv output row r in slot r mod N).",
    "tile.layer.maps_buffering": "double: maps tile i in bank i mod 2 (a residual conv: half i mod 2), the next loading "
                                 "while the current computes; whole: a tile may fill the buffer, its rows loaded "
                                 "as the previous tile's last kernel tile frees them; single: a residual conv's "
                                 "tiles in turn at the bottom.",
    "tile.layer.gather": "Maps loaded pixel by pixel (#tile.gather<sy, sx, w, cin, c0>): a strided 1x1's pixels or a "
                         "channel slice's channels; tiles, loads and windows are over the compact input.",
    "tile.layer.bypass_slices": "A residual conv's bypass in two per-kernel-tile slices at these maps-buffer words, "
                                "the next tile's slice loading pixel by pixel beside the current one.",
    "tile.layer.cu_split": "INDP: rows (absent; CU c its own output rows, cu_rows) or cols (CU c output columns "
                           "[c OW/4, (c+1) OW/4) of every row of a tile, vmov stride OW/4 x K words: a residual 1x1 "
                           "conv's bypass read where the write-back stores it). Followed.",
    "tile.layer.slice_tiles": "A residual 1x1 conv's kernel tiles per bypass slice (absent: 1): each pixel's channels "
                              "of the next group of tiles load with one LD, during the group's first tile.",
    "tile.dram_region.sym_name": "The region's name.",
    "tile.dram_region.offset": "Byte address in the layer's image (segments @x @w @y @r @slack @t).",
    "tile.dram_region.size": "Bytes; checked against what the layer moves there, and against overlaps.",
    "tile.dram_region.label": "maps, weights, output, bypass, scratch or conv_output (a fused pool's conv output).",
    "tile.dram_region.value": "The region's initial contents: the packed weight image.",
    "tile.dram_region.packing": "The weight image's layout (COOP: kernel after kernel with a 16-word bias block; "
                                "INDP: 16 kernels interleaved per vMAC); must match the layer's mode.",
    "tile.dram_region.packed_kernels": "Kernels per kernel tile in the weight image; must match the kernel tile's count.",
    "tile.kernel_tile.first": "0: the kernel tile op stands for every tile (count x repeat kernels).",
    "tile.kernel_tile.count": "Kernels a tile: one per vMAC in COOP (at most the vMACs; fewer masks the rest), "
                              "16 per vMAC of a CU in INDP (derived). Followed.",
    "tile.kernel_tile.repeat": "Kernel tiles: ceil(K / count) (derived).",
    "tile.kernel_tile.slot": "Double-buffered tiles alternate between weights words 0 and `slot`, the next loading "
                             "while the current computes (a kernel larger than the buffer: its chunks do).",
    "tile.kernel_tile.stagger": "Tiles alternate between bases 0 and F = stagger; the F words of the next tile that "
                                "miss the current one load while it computes, the rest after a flush.",
    "tile.kernel_tile.resident": "Every tile held at once (tile t at t x kernel words), loaded once for the layer.",
    "tile.maps_tile.out_rows": "Output rows [y0, y1) the tile computes (tiles cover 0..OH in order). Followed.",
    "tile.maps_tile.in_rows": "Input rows the out_rows read, padding excluded (derived).",
    "tile.maps_tile.overlap": "Input rows shared with the previous tile, re-loaded (derived).",
    "tile.maps_tile.cu": "-1: maps broadcast to every CU (an INDP row group spreads rows by cu_rows).",
    "tile.maps_tile.cu_rows": "INDP: each CU computes cu_rows consecutive rows of the row group.",
    "tile.maps_tile.ring": "A max pool's tile over a ring of N input-row slots, each row loaded once, instead of a "
                           "strip loaded whole.",
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
    "tile.layer.fence": "Whole-model programs: the layer's loads wait for the previous layer's vector ops (set where "
                        "its first loads could overwrite buffer words those still read); absent: they overlap.",
    "tile.layer.weights_before_fence": "With fence: the first kernel loads issue before it, the maps loads after (the "
                                       "previous layer reads no weights; allocate-dram decides, the verifier checks).",
    "tile.dram_region.tensor": "The tile.dram_plan tensor the region is (allocate-dram); its offset must be the tensor's.",
    "tile.dram_region.channels": "An output region that is a channel slice of a device concat's tensor: [first, count, "
                                 "total]; the write-backs go to channel first of each pixel, pixels total words apart; "
                                 "two writers of a tensor write disjoint channels; must be where the graph's concat "
                                 "places the output (tile-to-asm refuses an edit).",
    "tile.tensor.sym_name": "The buffer's name (segment name in the lowered program).",
    "tile.tensor.offset": "Byte address in the model's DRAM.", "tile.tensor.size": "Bytes.",
    "tile.tensor.live": "[first, last] positions of the module's tile.layers that use it; no live neighbour overlaps.",
    "tile.tensor.role": "activation (written by a layer or the host, read by later ones), weights, or scratch.",
}
"""Loads and windows are derived from the attributes: written out, they must be the ones the
attributes imply (an edit of one alone is refused); written empty `{}`, they are derived."""
