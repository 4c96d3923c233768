// RUN: snow-opt %s -p depthwise-to-grouped | filecheck %s

// A depthwise conv over 32 channels between two device convs becomes 2 groups of 16 with
// block-diagonal 16x16 kernels (marked block_diagonal, so reports count depthwise MACs), with
// its costs in the IR. The same conv over the model input, its output read by the host, would be
// faster on the device alone but not with the host's DRAM round trip: it stays, saying why; so
// does 24 channels (padded lane groups). A channel multiplier of 2 is left as it is.

func.func @main(%x: tensor<1x32x8x8xf32>, %y: tensor<1x24x8x8xf32>) -> (tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>, tensor<1x32x8x8xf32>) {
  %w = nn.constant dense<0.5> : tensor<32x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %w1 = nn.constant dense<0.5> : tensor<32x32x1x1xf32>
  %w24 = nn.constant dense<0.5> : tensor<24x1x3x3xf32>
  %b24 = nn.constant dense<0.1> : tensor<24xf32>
  %w64 = nn.constant dense<0.5> : tensor<64x1x3x3xf32>
  %b64 = nn.constant dense<0.1> : tensor<64xf32>
  %dw = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %dw24 = nn.conv2d %y, %w24, %b24 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 24 : i64} : (tensor<1x24x8x8xf32>, tensor<24x1x3x3xf32>, tensor<24xf32>) -> tensor<1x24x8x8xf32>
  %mult = nn.conv2d %x, %w64, %b64 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64} : (tensor<1x32x8x8xf32>, tensor<64x1x3x3xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x8x8xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %inner = nn.conv2d %expand, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %project = nn.conv2d %inner, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x8x8xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  func.return %dw, %dw24, %mult, %project : tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>, tensor<1x32x8x8xf32>
}

// CHECK:      %dw = nn.conv2d %x, %w, %b {placement_cost = "device [[D:[0-9.]+]] ms + DRAM round trip 0.0082 ms vs host [[H:[0-9.]+]] ms", {{.*}}groups = 32 : i64, relu}
// CHECK-NEXT: %dw24 = nn.conv2d %y, %w24, %b24 {placement_cost = "device {{.*}} ms + DRAM round trip {{.*}} ms vs host {{.*}} ms", {{.*}}groups = 24 : i64}
// CHECK-NEXT: %mult = nn.conv2d %x, %w64, %b64 {{{.*}}groups = 32 : i64}
// CHECK-NOT:  placement_cost
// CHECK:      %[[W:.*]] = nn.constant dense_resource<{{.*}}> : tensor<32x16x3x3xf32>
// CHECK-NEXT: %inner = nn.conv2d %expand, %[[W]], %b {block_diagonal, placement_cost = "device [[D]] ms + DRAM round trip 0.0000 ms vs host [[H]] ms", {{.*}}groups = 2 : i64, relu}
