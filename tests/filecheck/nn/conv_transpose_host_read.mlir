// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel},partition-host' | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel},nn-prepare,nn-to-tile' | filecheck %s --check-prefix=TILE
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel},nn-prepare,nn-to-tile,tile-loop-order,allocate-dram,tile-to-asm,link-segments' | filecheck %s --check-prefix=ASM

// waifu2x UpConv7's last layer, small (16 -> 3, 4x4 stride 2 pad 3, 8x8 -> 12x12), as one merged
// conv (12 kernels: 2x2 phases x 3 channels over a 7x7 grid) and its interleave, which crops the
// grid's first row and column (offsets 1, 1). Its result is the model's output: only the host
// reads it, so partition-host places the interleave `host-read` (no host layer): the conv writes
// its grid as it would anyway and the host applies the permutation as it copies the result's
// 3x12x12 words back, each once. nn-to-tile records that read on the conv's output region
// (`host_read = [sy, sx, oy, ox, height, width]`), tile-to-asm hands it to the image and
// link-segments to the layer's marker, which the runner's read follows. Beside it the same
// ConvTranspose read by a conv: the device cannot read through the permutation, so that
// interleave stays a host layer, both reasons given.

func.func @main(%x: tensor<1x16x8x8xf32>) -> (tensor<1x3x12x12xf32>, tensor<1x16x12x12xf32>) {
  %w = nn.constant dense<0.01> : tensor<16x3x4x4xf32>
  %b = nn.constant dense<0.1> : tensor<3xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<16x3x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
  %y2 = nn.conv_transpose2d %x, %w, %b {onnx_node = "up2", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<16x3x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
  %wc = nn.constant dense<0.02> : tensor<16x3x3x3xf32>
  %bc = nn.constant dense<0.1> : tensor<16xf32>
  %c = nn.conv2d %y2, %wc, %bc {onnx_node = "conv", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x12x12xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x16x12x12xf32>
  func.return %y, %c : tensor<1x3x12x12xf32>, tensor<1x16x12x12xf32>
}

// CHECK:      %[[G:.*]] = nn.conv2d %x, {{.*}}onnx_node = "up", {{.*}}place = "snowflake"{{.*}} -> tensor<1x12x7x7xf32>
// CHECK-NEXT: nn.depth_to_space %[[G]] {onnx_node = "up.interleave", place = "host-read", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x12x7x7xf32>) -> tensor<1x3x12x12xf32>
// CHECK:      nn.depth_to_space %{{.*}} {onnx_node = "up2.interleave", place = "host", host_reason = "interleave of one merged conv's phases (method sub-pixel): {{.*}}; host-read: 'conv' (nn.conv2d) may run on the device, which cannot read through the interleave"

// TILE:       tile.layer @up
// TILE:       tile.dram_region @up.output {{.*}}host_read = array<i64: 2, 2, 1, 1, 12, 12>
// TILE:       tile.layer @up2
// TILE-NOT:   host_read
// TILE:       tile.layer @conv

// ASM:        snowflake_asm.label @up {layer = {{.*}}y = "up.output", {{.*}}host_read = "2,2,1,1,12,12"}}
// ASM-NOT:    host_read
