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
