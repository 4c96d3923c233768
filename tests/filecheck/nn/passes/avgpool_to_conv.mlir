// RUN: snow-opt %s -p avgpool-to-conv | filecheck %s

// Global and unpadded average pooling become depthwise convs with weight 1/window; a
// padded avg_pool that excludes the padding keeps its op (border windows differ).

func.func @main(%x: tensor<1x3x4x4xf32>) -> (tensor<1x3x1x1xf32>, tensor<1x3x2x2xf32>, tensor<1x3x4x4xf32>) {
  %g = nn.global_avg_pool %x : (tensor<1x3x4x4xf32>) -> tensor<1x3x1x1xf32>
  %a = nn.avg_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x2x2xf32>
  %p = nn.avg_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  func.return %g, %a, %p : tensor<1x3x1x1xf32>, tensor<1x3x2x2xf32>, tensor<1x3x4x4xf32>
}

// CHECK:     nn.conv2d %x, %{{.*}}, %{{.*}} {{{.*}}groups = 3 : i64} : (tensor<1x3x4x4xf32>, tensor<3x1x4x4xf32>, tensor<3xf32>) -> tensor<1x3x1x1xf32>
// CHECK:     nn.conv2d %x, %{{.*}}, %{{.*}} {strides = array<i64: 2, 2>, {{.*}}groups = 3 : i64} : (tensor<1x3x4x4xf32>, tensor<3x1x2x2xf32>, tensor<3xf32>) -> tensor<1x3x2x2xf32>
// CHECK:     %p = nn.avg_pool %x

// A global pool whose 24x64 kernel would not fit a vMAC's weights buffer as a 16-channel diagonal
// kernel (16 x 24 x 64 words): the means of 8x8 windows (the largest of at most 64 taps dividing
// 24 x 64, the most square), then one 3x8 kernel over those.

func.func @big(%x: tensor<1x16x24x64xf32>) -> tensor<1x16x1x1xf32> {
  %g = nn.global_avg_pool %x {onnx_node = "gap"} : (tensor<1x16x24x64xf32>) -> tensor<1x16x1x1xf32>
  func.return %g : tensor<1x16x1x1xf32>
}

// CHECK-LABEL: func.func @big
// CHECK:       %[[R:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "gap.8x8", strides = array<i64: 8, 8>, {{.*}}groups = 16 : i64} : (tensor<1x16x24x64xf32>, tensor<16x1x8x8xf32>, tensor<16xf32>) -> tensor<1x16x3x8xf32>
// CHECK:       %g = nn.conv2d %[[R]], %{{.*}}, %{{.*}} {{{.*}}onnx_node = "gap"{{.*}}groups = 16 : i64} : (tensor<1x16x3x8xf32>, tensor<16x1x3x8xf32>, tensor<16xf32>) -> tensor<1x16x1x1xf32>

// 67 x 4 (67 a prime): the fewest taps over both stages is 17 x 2 windows reaching one row into
// zero padding at the bottom (pads 0, 0, 1, 0: a 4 x 2 grid over 68 x 4), each weighing 8 / 268,
// not 1/34, so that the grid's plain mean is the 268 pixels' (the weights' values:
// tests/test_se_blocks.py).

func.func @prime(%x: tensor<1x16x67x4xf32>) -> tensor<1x16x1x1xf32> {
  %g = nn.global_avg_pool %x {onnx_node = "gap"} : (tensor<1x16x67x4xf32>) -> tensor<1x16x1x1xf32>
  func.return %g : tensor<1x16x1x1xf32>
}

// CHECK-LABEL: func.func @prime
// CHECK:       %[[R:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "gap.17x2", strides = array<i64: 17, 2>, pads = array<i64: 0, 0, 1, 0>{{.*}}groups = 16 : i64} : (tensor<1x16x67x4xf32>, tensor<16x1x17x2xf32>, tensor<16xf32>) -> tensor<1x16x4x2xf32>
// CHECK:       %g = nn.conv2d %[[R]], %{{.*}}, %{{.*}} {{{.*}}onnx_node = "gap"{{.*}}groups = 16 : i64} : (tensor<1x16x4x2xf32>, tensor<16x1x4x2xf32>, tensor<16xf32>) -> tensor<1x16x1x1xf32>
