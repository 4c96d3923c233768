// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' -o %t.mlir
// RUN: filecheck %s < %t.mlir
// RUN: snow-run %t.mlir --check --quiet --report - | filecheck %s --check-prefix=EXACT

// A resident conv (every kernel tile held at once: a 1x1 over 512 channels at 14², four tiles of
// 16 kernels, its maps in several strips) then a 3x3 conv. Every strip of the resident conv runs
// tiles 0..3 from weights word 0, so its last vector ops read the last tile's words, [3K, 4K)
// (plan/weights_end.py last_kernel_slot); the 3x3's first kernel tile fits below them, so
// allocate-dram loads it before the 3x3's fence and, priced, in the resident conv's last tile
// (before stop 53 a resident conv's last tile counted as any word: neither decision).

func.func @main(%x: tensor<1x512x14x14xf32>) -> tensor<1x32x14x14xf32> {
  %w1 = nn.constant dense<0.01> : tensor<64x512x1x1xf32>
  %b1 = nn.constant dense<0.1> : tensor<64xf32>
  %a = nn.conv2d %x, %w1, %b1 {onnx_node = "a", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x512x14x14xf32>, tensor<64x512x1x1xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32>
  %w2 = nn.constant dense<0.02> : tensor<32x64x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<32xf32>
  %y = nn.conv2d %a, %w2, %b2 {onnx_node = "b", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x64x14x14xf32>, tensor<32x64x3x3xf32>, tensor<32xf32>) -> tensor<1x32x14x14xf32>
  func.return %y : tensor<1x32x14x14xf32>
}

// CHECK:      tile.layer @a conv
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 4 : i64, resident}
// CHECK:      tile.layer @b conv attributes {{{.*}}fence, weights_before_fence, kernels_preloaded}
// EXACT:      "golden_bit_exact": true
