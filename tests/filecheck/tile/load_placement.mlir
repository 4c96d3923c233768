// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-rows{rows=2}' -o %t.mlir
// RUN: sed -e 's/relu, maps_buffering/prefetch_after = 40 : i64, load_next_whole, relu, maps_buffering/' %t.mlir > %t.edit.mlir
// RUN: snow-opt %t.edit.mlir | filecheck %s
// RUN: snow-run %t.edit.mlir --check --quiet --report - | filecheck %s --check-prefix=EXACT
// RUN: sed -e 's/relu, maps_buffering/prefetch_after = 8 : i64, relu, maps_buffering/' %t.mlir > %t.low.mlir
// RUN: not snow-opt %t.low.mlir -p tile-to-asm 2>&1 | filecheck %s --check-prefix=LOW
// RUN: sed -e 's/relu, maps_buffering = #tile<buffering double>, loop_order/prefetch_after = 0 : i64, relu, maps_buffering = #tile<buffering double>, loop_order/' %t.mlir > %t.zero.mlir
// RUN: not snow-opt %t.zero.mlir 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: sed -e 's/ow = 4>, maps_buffering/ow = 4>, load_next_whole, maps_buffering/' %t.mlir > %t.pool.mlir
// RUN: not snow-opt %t.pool.mlir 2>&1 | filecheck %s --check-prefix=POOL

// Two load-placement decisions of a conv layer (dialects/tile/decisions.py), absent by default:
// `prefetch_after` (vector ops of a kernel tile queued before its prefetches issue; default the
// vector queue's depth) and `load_next_whole` (the next maps strip loaded whole in the strip's last
// kernel tile, not in one piece per kernel tile). A 16 -> 32 conv (two kernel tiles) in maps
// tiles of two rows, then a 2x2 max pool.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x32x4x4xf32> {
  %w0 = nn.constant dense<0.01> : tensor<32x16x3x3xf32>
  %b0 = nn.constant dense<0.1> : tensor<32xf32>
  %c = nn.conv2d %x, %w0, %b0 {onnx_node = "conv", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<32x16x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %p = nn.max_pool %c {onnx_node = "pool", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x32x8x8xf32>) -> tensor<1x32x4x4xf32>
  func.return %p : tensor<1x32x4x4xf32>
}

// The edited layer prints both decisions and runs bit for bit the golden model's.
// CHECK:      tile.layer @conv conv attributes {{{.*}}prefetch_after = 40 : i64, load_next_whole, relu,
// EXACT:      "golden_bit_exact": true

// Fewer ops than the vector queue holds before the prefetch, or none, or on a pool: refused in one line.
// LOW:        tile-to-asm: layer @conv: prefetch_after 8: fewer than the vector queue's 16 ops: the loads could overwrite words queued vector ops still read
// ZERO:       tile.layer @conv: prefetch_after: a conv layer's ops queued before a tile's prefetches, >= the vector queue's depth
// POOL:       tile.layer @pool: load_next_whole: on a conv layer
