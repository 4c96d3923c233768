// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | filecheck %s
// RUN: snow-opt %s -p 'snowflake-lower' | filecheck %s --check-prefix=LINKED

// waifu2x's UNet block, small: a's 8x8 output cropped at (1, 2) to 6x6 (an ONNX Slice of H and W),
// read by a 1x1 conv as its maps and added to a 3x3 conv's output (fuse-residual-add: that conv's
// bypass). partition-host places the crop on the device; neither reader copies it: each reads the
// window of a's tensor in place, its region that tensor with `crop = [y0, x0, height, width]`.
// The 1x1's maps load row by row from the window's first pixel: 6 pixels of 16 channels (192 bytes)
// a row, rows 8 x 16 words (256 bytes) apart. One segment: no host copy between the layers.

func.func @main(%x: tensor<1x16x10x10xf32>) -> (tensor<1x16x6x6xf32>, tensor<1x16x6x6xf32>) {
  %w1 = nn.constant dense<0.01> : tensor<16x16x3x3xf32>
  %b1 = nn.constant dense<0.1> : tensor<16xf32>
  %a = nn.conv2d %x, %w1, %b1 {onnx_node = "a", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x10x10xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  %w2 = nn.constant dense<0.02> : tensor<16x16x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<16xf32>
  %c = nn.conv2d %a, %w2, %b2 {onnx_node = "c", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x6x6xf32>
  %k = nn.crop %a {onnx_node = "crop", offsets = array<i64: 1, 2>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x6x6xf32>
  %y = nn.add %c, %k {onnx_node = "res"} : (tensor<1x16x6x6xf32>, tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  %w3 = nn.constant dense<0.03> : tensor<16x16x1x1xf32>
  %b3 = nn.constant dense<0.1> : tensor<16xf32>
  %z = nn.conv2d %k, %w3, %b3 {onnx_node = "mix", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x6x6xf32>, tensor<16x16x1x1xf32>, tensor<16xf32>) -> tensor<1x16x6x6xf32>
  func.return %y, %z : tensor<1x16x6x6xf32>, tensor<1x16x6x6xf32>
}

// CHECK:      nn.crop %a {onnx_node = "crop", place = "snowflake", offsets = array<i64: 1, 2>}
// CHECK:      nn.conv2d %{{.*}} bypass %k {onnx_node = "c"
// CHECK:      tile.dram_plan {
// CHECK:        tile.tensor @a.output {offset = [[A:24576]] : i64, size = 2048 : i64
// CHECK:      tile.layer @c conv
// CHECK:        tile.dram_region @c.maps {offset = [[A]] : i64, size = 2048 : i64, label = "maps", tensor = "a.output"}
// CHECK:        tile.dram_region @c.bypass {offset = [[A]] : i64, size = 2048 : i64, label = "bypass", crop = array<i64: 1, 2, 8, 8>, tensor = "a.output"}
// CHECK:      tile.layer @mix conv
// CHECK-NEXT:   tile.dram_region @mix.maps {offset = [[A]] : i64, size = 2048 : i64, label = "maps", crop = array<i64: 1, 2, 8, 8>, tensor = "a.output"}
// CHECK:        tile.maps_tile
// the window's first pixel, (1 x 8 + 2) x 16 words (320 bytes) past the tensor's 24576; then 256 bytes a row
// CHECK:          tile.load {buffer = #tile<buffer maps>, length = 96 : i64, dram_addr = 24896 : i64, buf_addr = 0 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 96 : i64, dram_addr = 25152 : i64, buf_addr = 96 : i64
// CHECK-COUNT-3:  tile.load {buffer = #tile<buffer maps>, length = 96 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 96 : i64, dram_addr = 26176 : i64, buf_addr = 480 : i64

// LINKED:      nn.crop {{.*}}place = "snowflake"
// LINKED:      snowflake_asm.image @segment0
// LINKED:        snowflake_asm.label @c {layer = {{.*}}r = "a.output"
// LINKED:        snowflake_asm.label @mix {layer = {{.*}}x = "a.output"
// LINKED-NOT:  snowflake_asm.image
