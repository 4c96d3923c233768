// RUN: snow-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The DRAM plan's channel-slice rules: two layers writing one tensor write disjoint channels.

tile.dram_plan {
  tile.tensor @cat {offset = 0 : i64, size = 4096 : i64, live = array<i64: 0, 1>, role = "activation"}
}
tile.layer @left conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @left.output {offset = 0 : i64, size = 4096 : i64, label = "output", channels = array<i64: 0, 16, 32>, tensor = "cat"}
}
tile.layer @right conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @right.output {offset = 0 : i64, size = 4096 : i64, label = "output", channels = array<i64: 8, 16, 32>, tensor = "cat"}
}
// CHECK: tile.layer @right: tile.dram_region @right.output: writes channels [8, 24) of tensor @cat, which layer @left writes too ([0, 16))

// -----
tile.dram_plan {
  tile.tensor @y {offset = 0 : i64, size = 4096 : i64, live = array<i64: 0, 1>, role = "activation"}
}
tile.layer @a conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @a.output {offset = 0 : i64, size = 4096 : i64, label = "output", tensor = "y"}
}
tile.layer @b conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @b.output {offset = 0 : i64, size = 4096 : i64, label = "output", channels = array<i64: 16, 16, 32>, tensor = "y"}
}
// CHECK: tile.layer @b: tile.dram_region @b.output: writes channels [16, 32) of tensor @y, which layer @a writes too

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @l.output {offset = 0 : i64, size = 4096 : i64, label = "output", channels = array<i64: 24, 16, 32>}
}
// CHECK: tile.dram_region: channels: [first, count, total] marks an 'output' region that is a channel slice, first + count <= total

// -----
tile.layer @l conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @l.maps {offset = 0 : i64, size = 4096 : i64, label = "maps", channels = array<i64: 0, 16, 32>}
}
// CHECK: tile.dram_region: channels: [first, count, total] marks an 'output' region that is a channel slice, first + count <= total
