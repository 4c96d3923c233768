// RUN: snow-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect | filecheck %s

// One case per verifier rule of the tile dialect.

tile.layer @l conv attributes {} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
}
// CHECK: tile.layer @{{[^:]*}}: a conv layer needs a compute mode (COOP or INDP)

// -----
tile.layer @l maxpool attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
}
// CHECK: tile.layer @{{[^:]*}}: maxpool runs on the pool unit; it has no COOP/INDP mode

// -----
tile.layer @l maxpool attributes {relu} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
}
// CHECK: tile.layer @{{[^:]*}}: relu is fused into MAC write-back; maxpool has none

// -----
tile.layer @l conv attributes {mode = #tile<mode INDP>, pool = #tile.pool_shape<c = 64, h = 16, w = 16, kh = 3, kw = 3, sy = 2, sx = 2, pt = 1, pl = 1, oh = 8, ow = 8>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "output"}
}
// CHECK: tile.layer @{{[^:]*}}: a fused max pool needs a 'conv_output' dram_region for the conv's own output

// -----
tile.layer @l maxpool attributes {pool = #tile.pool_shape<c = 64, h = 16, w = 16, kh = 3, kw = 3, sy = 2, sx = 2, pt = 1, pl = 1, oh = 8, ow = 8>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "conv_output"}
}
// CHECK: tile.layer @{{[^:]*}}: only a conv layer fuses the max pool that reads it

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
  "test.op"() : () -> ()
}
// CHECK: tile.layer @{{[^:]*}}: 'test.op' cannot appear directly in a layer

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = -1 : i64, size = 16 : i64, label = "maps"}
}
// CHECK: tile.dram_region: offset must be >= 0, got -1

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 0 : i64, label = "maps"}
}
// CHECK: tile.dram_region: size must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "stack"}
}
// CHECK: tile.dram_region: label 'stack' is not one of maps, output, weights, bias, bypass

// -----
tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
// CHECK: 'tile.dram_region' expects parent op 'tile.layer'

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.kernel_tile attributes {first = 0 : i64, count = 0 : i64, repeat = 1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.kernel_tile: count must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.kernel_tile attributes {first = -2 : i64, count = 1 : i64, repeat = 1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.kernel_tile: first must be >= 0, got -2

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.kernel_tile attributes {first = 0 : i64, count = 1 : i64, repeat = 0 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.kernel_tile: repeat must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.kernel_tile attributes {first = 0 : i64, count = 4 : i64, repeat = 1 : i64} {
    "test.op"() : () -> ()
  }
}
// CHECK: tile.kernel_tile: a kernel tile holds only loads (windows belong to maps tiles)

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 3, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.maps_tile: out_rows must be [start, end) with 0 <= start < end

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.maps_tile: in_rows must be [start, end) with 0 <= start < end

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = -1 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.maps_tile: overlap must be >= 0, got -1

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = 16 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.maps_tile: cu must be -1 (broadcast) or a CU index < 16

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    "test.op"() : () -> ()
  }
}
// CHECK: tile.maps_tile: 'test.op' cannot appear in a maps tile

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 0 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.load: length must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = -4 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.load: dram_addr must be >= 0, got -4

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 8 : i64, select = 127 : i64}
  }
}
// CHECK: tile.load: unit 8 >= 8 load units (the encoding's)

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 4194300 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.load: [4194300, +16) overflows the 4194304-element maps buffer

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.kernel_tile attributes {first = 0 : i64, count = 4 : i64, repeat = 1 : i64} {
    tile.load {buffer = #tile<buffer weights>, length = 65537 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
  }
}
// CHECK: tile.load: [0, +65537) overflows the 65536-element weights buffer

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "maps"}
}
tile.load {buffer = #tile<buffer maps>, length = 16 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
// CHECK: 'tile.load' expects parent op to be one of 'tile.kernel_tile', 'tile.maps_tile'

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 0 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.window: trace_length must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 0 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.window: repeat_x must be >= 1, got 0

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = -16 : i64, out_addr = 0 : i64}
  }
}
// CHECK: tile.window: start must be >= 0, got -16

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 2 : i64, cu = -1 : i64} {
    tile.window {trace_length = 16 : i64, rows = 3 : i64, repeat_x = 4 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = -2 : i64}
  }
}
// CHECK: tile.window: out_addr must be >= 0, got -2

// -----
tile.dram_plan {
  tile.tensor @a {offset = 0 : i64, size = 8192 : i64, live = array<i64: 0, 2>, role = "activation"}
  tile.tensor @b {offset = 4096 : i64, size = 4096 : i64, live = array<i64: 2, 3>, role = "activation"}
}
// CHECK: tile.dram_plan: tensors @a and @b overlap in DRAM and are both live at layer 2

// -----
tile.dram_plan {
  tile.tensor @a {offset = 0 : i64, size = 4096 : i64, live = array<i64: 0, 0>, role = "activation"}
}
tile.layer @l maxpool attributes {} {
  tile.dram_region @r {offset = 4096 : i64, size = 16 : i64, label = "maps", tensor = "a"}
}
// CHECK: tile.layer @l: tile.dram_region @r: offset 4096 is not its tensor @a's 0

// -----
tile.dram_plan {
  tile.tensor @a {offset = 0 : i64, size = 4096 : i64, live = array<i64: 3, 1>, role = "activation"}
}
// CHECK: tile.tensor: @a: live must be [first, last] layer positions, first <= last

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @l.output {offset = 0 : i64, size = 4096 : i64, label = "output", crop = array<i64: 1, 2, 8, 8>}
}
// CHECK: tile.dram_region: crop: [y0, x0, height, width] marks a 'maps' or 'bypass' region that is a crop's window, 0 <= y0 < height, 0 <= x0 < width

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @l.maps {offset = 0 : i64, size = 4096 : i64, label = "maps", crop = array<i64: 8, 2, 8, 8>}
}
// CHECK: tile.dram_region: crop: [y0, x0, height, width] marks a 'maps' or 'bypass' region that is a crop's window, 0 <= y0 < height, 0 <= x0 < width
