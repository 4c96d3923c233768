// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | filecheck %s
// RUN: snow-opt %s -p 'snowflake-lower' | filecheck %s --check-prefix=LINKED

// A fire module: two convs over one input, concatenated, read by a third. partition-host places
// the concat on the device; allocate-dram gives it one tensor, which both producers' output regions
// are (each with its channel slice: channels = [first, count, total]) and the reader's maps region;
// the windows write whole pixels 32 channels apart from the slice's first channel. One segment: no
// host copy between the layers.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32> {
  %w1 = nn.constant dense<0.01> : tensor<16x16x1x1xf32>
  %b1 = nn.constant dense<0.1> : tensor<16xf32>
  %a = nn.conv2d %x, %w1, %b1 {onnx_node = "left", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<16x16x1x1xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  %w2 = nn.constant dense<0.02> : tensor<16x16x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<16xf32>
  %b = nn.conv2d %x, %w2, %b2 {onnx_node = "right", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  %c = nn.concat %a, %b {onnx_node = "cat", axis = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<1x16x8x8xf32>) -> tensor<1x32x8x8xf32>
  %w3 = nn.constant dense<0.01> : tensor<16x32x1x1xf32>
  %b3 = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv2d %c, %w3, %b3 {onnx_node = "mix", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x8x8xf32>, tensor<16x32x1x1xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  func.return %y : tensor<1x16x8x8xf32>
}

// CHECK:      tile.dram_plan {
// CHECK:        tile.tensor @cat {offset = [[CAT:[0-9]+]] : i64, size = 4096 : i64, live = array<i64: 0, 2>, role = "activation"}
// CHECK:      tile.layer @left conv
// CHECK:        tile.dram_region @left.output {offset = [[CAT]] : i64, size = 4096 : i64, label = "output", channels = array<i64: 0, 16, 32>, tensor = "cat"}
// CHECK:        tile.window {{.*}}out_addr = [[CAT]] : i64
// CHECK:      tile.layer @right conv
// CHECK:        tile.dram_region @right.output {offset = [[CAT]] : i64, size = 4096 : i64, label = "output", channels = array<i64: 16, 16, 32>, tensor = "cat"}
// 16 channels (32 bytes) past the tensor's start; the next window's first row 64 bytes a pixel further
// CHECK:        tile.window {trace_length = 48 : i64, rows = 2 : i64, repeat_x = 8 : i64, repeat_y = 1 : i64, {{.*}}out_addr = 16416 : i64
// CHECK-NEXT:   tile.window {trace_length = 48 : i64, rows = 3 : i64, repeat_x = 8 : i64, repeat_y = 6 : i64, {{.*}}out_addr = 16928 : i64
// CHECK:      tile.layer @mix conv
// CHECK-NEXT:   tile.dram_region @mix.maps {offset = [[CAT]] : i64, size = 4096 : i64, label = "maps", tensor = "cat"}

// LINKED:      nn.concat {{.*}}place = "snowflake"
// LINKED:      snowflake_asm.image @segment0
// LINKED:        snowflake_asm.segment output @cat at 16384 size 4096
// LINKED:        snowflake_asm.label @left {layer = {{.*}}y = "cat"
// LINKED:        snowflake_asm.label @right {layer = {{.*}}y = "cat"
// LINKED:        snowflake_asm.label @mix {layer = {{.*}}x = "cat"
// LINKED-NOT:  snowflake_asm.image
