// RUN: not snow-opt %s 2>&1 | filecheck %s

// A layer is a conv (fully connected and average-pool layers are convs, a residual add is a
// conv's bypass) or a max pool: no other kind parses.

tile.layer @l fc attributes {mode = #tile<mode COOP>} {
  tile.dram_region @r {offset = 0 : i64, size = 16 : i64, label = "weights"}
}
// CHECK: layer_kind.mlir:6:15: error: Expected `conv`, or `maxpool`.
