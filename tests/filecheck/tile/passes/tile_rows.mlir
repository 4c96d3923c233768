// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-rows{rows=2}' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-rows{rows=2}' -o %t.mlir 2>&1 | filecheck %s --check-prefix=INDP
// RUN: snow-run %t.mlir --check --quiet --report - | filecheck %s --check-prefix=EXACT
// RUN: snow-opt %t.mlir -p tile-to-asm | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-rows{rows=6}' | filecheck %s --check-prefix=KEPT
// RUN: not snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-rows{rows=0}' 2>&1 | filecheck %s --check-prefix=ZERO

// tile-rows{rows=2} on a 1-channel INDP conv, a plain COOP conv, a residual COOP conv and a
// 2x2 max pool, each computed in one maps tile of 6 (the pool: 3) output rows.

func.func @main(%x: tensor<1x1x6x6xf32>) -> tensor<1x16x3x3xf32> {
  %w0 = nn.constant dense<0.05> : tensor<16x1x3x3xf32>
  %b0 = nn.constant dense<0.0> : tensor<16xf32>
  %i = nn.conv2d %x, %w0, %b0 {onnx_node = "conv_in", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x1x6x6xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x6x6xf32>
  %w1 = nn.constant dense<0.01> : tensor<16x16x3x3xf32>
  %b1 = nn.constant dense<0.1> : tensor<16xf32>
  %a = nn.conv2d %i, %w1, %b1 {onnx_node = "conv_a", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x6x6xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x6x6xf32>
  %w2 = nn.constant dense<0.02> : tensor<16x16x3x3xf32>
  %b2 = nn.constant dense<0.0> : tensor<16xf32>
  %c = nn.conv2d %a, %w2, %b2 {onnx_node = "conv_b", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x6x6xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x6x6xf32>
  %s = nn.add %c, %a : (tensor<1x16x6x6xf32>, tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  %r = nn.relu %s : (tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  %p = nn.max_pool %r {onnx_node = "pool", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x16x6x6xf32>) -> tensor<1x16x3x3xf32>
  func.return %p : tensor<1x16x3x3xf32>
}

// The INDP conv keeps its row groups (their loads written out); every other layer gets maps
// tiles of at most 2 rows, written empty: their in_rows, overlap, loads and windows are
// derived by tile-to-asm.
// CHECK:      tile.layer @conv_in conv attributes {mode = #tile<mode INDP>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 4>, {{.*}}cu_rows = 1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 4, 6>, {{.*}}cu_rows = 1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>
// CHECK:      tile.layer @conv_a conv attributes {mode = #tile<mode COOP>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 2>,{{.*}} {}
// CHECK-NEXT:   tile.maps_tile attributes {out_rows = array<i64: 2, 4>,{{.*}} {}
// CHECK-NEXT:   tile.maps_tile attributes {out_rows = array<i64: 4, 6>,{{.*}} {}
// CHECK-NEXT: }
// CHECK:      tile.layer @conv_b conv attributes {mode = #tile<mode COOP>
// CHECK:        tile.dram_region @conv_b.bypass
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 2>,{{.*}} {}
// CHECK-NEXT:   tile.maps_tile attributes {out_rows = array<i64: 2, 4>,{{.*}} {}
// CHECK-NEXT:   tile.maps_tile attributes {out_rows = array<i64: 4, 6>,{{.*}} {}
// CHECK-NEXT: }
// CHECK:      tile.layer @pool maxpool
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 2>,{{.*}} {}
// CHECK-NEXT:   tile.maps_tile attributes {out_rows = array<i64: 2, 3>,{{.*}} {}
// CHECK-NEXT: }

// INDP:       tile-rows: layer @conv_in keeps its maps tiles: an INDP layer's tiles are row groups (cu_rows rows on each CU)
// INDP-NOT:   tile-rows

// The retiled module runs, bit for bit the golden model's: the empty tiles were derived.
// EXACT:      "golden_bit_exact": true

// ASM:        snowflake_asm.image @conv_in
// ASM:        snowflake_asm.image @conv_a
// ASM:        snowflake_asm.image @conv_b
// ASM:        snowflake_asm.image @pool
// ASM-NOT:    tile.layer

// No tile has more than 6 rows: nothing is split, the loads stay written out.
// KEPT:       tile.layer @conv_a
// KEPT:         tile.maps_tile attributes {out_rows = array<i64: 0, 6>, in_rows = array<i64: 0, 6>, overlap = 0 : i64, cu = -1 : i64} {
// KEPT-NEXT:      tile.load {buffer = #tile<buffer maps>

// ZERO:       tile-rows: rows must be >= 1, not 0
