// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-run %s --check --quiet --report - | filecheck %s --check-prefix=EXACT
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' -o %t.mlir
// RUN: sed -e 's/, coop_rows//' %t.mlir > %t.removed.mlir
// RUN: not snow-opt %t.removed.mlir -p tile-to-asm 2>&1 | filecheck %s --check-prefix=STALE

// COOP with the CUs splitting output rows (`coop_rows`, snowir/plan/coop_rows.py): a 32 -> 3 3x3
// output conv over 66 x 66. Broadcast COOP would give 3 of the 16 vMACs work; the planner takes
// row groups instead, each CU its `cu_rows` rows from its own maps load (select c) and the 4-kernel
// tile broadcast to vMAC v of every CU (select 16 + v): 12 of 16 vMACs busy.

func.func @main(%x: tensor<1x32x66x66xf32>) -> tensor<1x3x66x66xf32> {
  %w = nn.constant dense<0.01> : tensor<3x32x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<3xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "head", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x66x66xf32>, tensor<3x32x3x3xf32>, tensor<3xf32>) -> tensor<1x3x66x66xf32>
  func.return %y : tensor<1x3x66x66xf32>
}

// CHECK:      tile.layer @head conv attributes {{{.*}}coop_rows
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 4 : i64, repeat = 1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer weights>, {{.*}}select = 16 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer weights>, {{.*}}select = 17 : i64
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 1>, {{.*}}cu_rows = 1 : i64}
// CHECK:        tile.maps_tile attributes {{{.*}}cu_rows = {{[2-9]}} : i64}
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, {{.*}}select = 0 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, {{.*}}select = 1 : i64

// EXACT: "golden_bit_exact": true

// coop_rows removed, its row groups left: refused in one line naming the layer.
// STALE: layer @head: maps tile {{[0-9]+}}: cu_rows belongs to row groups
