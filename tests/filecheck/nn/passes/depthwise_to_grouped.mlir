// RUN: snow-opt %s -p depthwise-to-grouped | filecheck %s

// A depthwise conv over 32 channels becomes 2 groups of 16 with block-diagonal 16x16 kernels
// (marked block_diagonal, so reports count depthwise MACs); 24 channels (not a multiple of 16)
// and a channel multiplier of 2 stay as they are.

func.func @main(%x: tensor<1x32x8x8xf32>, %y: tensor<1x24x8x8xf32>) -> (tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>) {
  %w = nn.constant dense<0.5> : tensor<32x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %w24 = nn.constant dense<0.5> : tensor<24x1x3x3xf32>
  %b24 = nn.constant dense<0.1> : tensor<24xf32>
  %w64 = nn.constant dense<0.5> : tensor<64x1x3x3xf32>
  %b64 = nn.constant dense<0.1> : tensor<64xf32>
  %dw = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %dw24 = nn.conv2d %y, %w24, %b24 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 24 : i64} : (tensor<1x24x8x8xf32>, tensor<24x1x3x3xf32>, tensor<24xf32>) -> tensor<1x24x8x8xf32>
  %mult = nn.conv2d %x, %w64, %b64 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64} : (tensor<1x32x8x8xf32>, tensor<64x1x3x3xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  func.return %dw, %dw24, %mult : tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>
}

// CHECK:      %[[W:.*]] = nn.constant dense_resource<{{.*}}> : tensor<32x16x3x3xf32>
// CHECK-NEXT: %dw = nn.conv2d %x, %[[W]], %b {block_diagonal, {{.*}}groups = 2 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x16x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
// CHECK-NEXT: %dw24 = nn.conv2d %y, %w24, %b24 {{{.*}}groups = 24 : i64}
// CHECK-NEXT: %mult = nn.conv2d %x, %w64, %b64 {{{.*}}groups = 32 : i64}
