// RUN: snow-opt %s -p fc-to-conv | filecheck %s

// dense(flatten(x)) runs as a conv whose kernel covers the whole input; a dense on a 2-D
// tensor as a 1x1 conv between reshapes.

func.func @main(%x: tensor<1x2x3x3xf32>, %v: tensor<1x5xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %w = nn.constant dense<0.5> : tensor<4x18xf32>
  %w2 = nn.constant dense<0.5> : tensor<4x5xf32>
  %b = nn.constant dense<0.1> : tensor<4xf32>
  %f = nn.flatten %x {axis = 1 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x18xf32>
  %d = nn.dense %f, %w, %b {relu} : (tensor<1x18xf32>, tensor<4x18xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  %d2 = nn.dense %v, %w2, %b : (tensor<1x5xf32>, tensor<4x5xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  func.return %d, %d2 : tensor<1x4xf32>, tensor<1x4xf32>
}

// CHECK-NOT:  nn.dense
// CHECK-NOT:  nn.flatten
// CHECK:      nn.conv2d %x, %{{.*}}, %b {{{.*}}relu} : (tensor<1x2x3x3xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT: nn.reshape %{{.*}} : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
// CHECK:      nn.reshape %v : (tensor<1x5xf32>) -> tensor<1x5x1x1xf32>
// CHECK:      nn.conv2d %{{.*}}, %{{.*}}, %b {{{.*}}} : (tensor<1x5x1x1xf32>, tensor<4x5x1x1xf32>, tensor<4xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT: nn.reshape %{{.*}} : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
