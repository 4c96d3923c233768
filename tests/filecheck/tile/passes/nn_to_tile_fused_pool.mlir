// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{fuse-pool=false}' | filecheck %s --check-prefix=APART
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=ASM

// ResNet's stem: a 7x7/2 INDP conv whose only reader is a 3x3/2 max pool. nn-to-tile gives both
// one layer: the conv's row groups take one row per CU (each group completes consecutive rows),
// its output goes to a `conv_output` region, and `pool` says the pool runs in its program,
// writing `output`. Both nn ops name the layer.

func.func @main(%x: tensor<1x3x32x32xf32>) -> tensor<1x64x8x8xf32> {
  %w = nn.constant dense<0.01> : tensor<64x3x7x7xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %c = nn.conv2d %x, %w, %b {onnx_node = "conv1", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x32x32xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>) -> tensor<1x64x16x16xf32>
  %p = nn.max_pool %c {onnx_node = "pool1", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x64x16x16xf32>) -> tensor<1x64x8x8xf32>
  func.return %p : tensor<1x64x8x8xf32>
}

// CHECK:      nn.pad_rows %x {{.*}}place = "host", pads = array<i64: 3, 3>
// CHECK:      nn.conv2d {{.*}}tile = "conv1", strides = array<i64: 2, 2>, pads = array<i64: 0, 3, 0, 3>
// CHECK:      nn.max_pool {{.*}}tile = "conv1"
// CHECK:      tile.layer @conv1 conv attributes {{{.*}}mode = #tile<mode INDP>{{.*}}pool = #tile.pool_shape<c = 64, h = 16, w = 16, kh = 3, kw = 3, sy = 2, sx = 2, pt = 1, pl = 1, oh = 8, ow = 8>
// CHECK:        tile.dram_region @conv1.conv_output {{.*}}label = "conv_output"
// CHECK-NEXT:   tile.dram_region @conv1.output {{.*}}size = 8192 : i64, label = "output"
// one output row per CU, in groups of four from row 0: pad-rows made the row padding zero rows
// of the input (nn.pad_rows, on the host), so no row has clipped kernel rows
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 4>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 4, 8>
// CHECK-NOT:    tile.layer

// APART:      tile.layer @conv1 conv
// APART-NOT:  pool =
// APART:      tile.layer @pool1 maxpool

// ASM:        snowflake_asm.image @conv1 {{.*}}fused = "max_pool"
// ASM:        snowflake_asm.segment scratch @t
// ASM:        snowflake_asm.max
// ASM-NOT:    snowflake_asm.image @pool1
