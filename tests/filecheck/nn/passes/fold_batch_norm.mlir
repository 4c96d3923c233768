// RUN: snow-opt %s -p fold-batch-norm | filecheck %s

// batch_norm after a conv folds into the conv; caffe2 "Scale" mul/add by per-channel
// constants fold too; a batch_norm with no conv to fold into becomes a depthwise 1x1 conv.

func.func @main(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %g = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %be = nn.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %m = nn.constant dense<[0.5, -0.5]> : tensor<2xf32>
  %v = nn.constant dense<[1.0, 4.0]> : tensor<2xf32>
  %s = nn.constant dense<[[[3.0]], [[4.0]]]> : tensor<2x1x1xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %bn = nn.batch_norm %c, %g, %be, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %sc = nn.mul %bn, %s : (tensor<1x2x4x4xf32>, tensor<2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %sh = nn.add %sc, %s : (tensor<1x2x4x4xf32>, tensor<2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %alone = nn.batch_norm %x, %g, %be, %m, %v {epsilon = 0.0 : f32} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return %sh, %alone : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @main
// CHECK-NOT:   nn.batch_norm
// CHECK-NOT:   nn.mul
// CHECK:       %[[C:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {{{.*}}groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
// CHECK:       %[[D:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {{{.*}}groups = 2 : i64} : (tensor<1x2x4x4xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NOT:   nn.batch_norm
// CHECK:       func.return %[[C]], %[[D]]
