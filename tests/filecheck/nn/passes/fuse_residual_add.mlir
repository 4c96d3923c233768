// RUN: snow-opt %s -p fuse-residual-add | filecheck %s

// add(conv(x), r) becomes conv(x) with `bypass r`; the add's ReLU moves into the conv.
// A conv that already has a ReLU cannot take the add (ReLU must follow the add).

func.func @main(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a = nn.add %x, %c {relu} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c2 = nn.conv2d %a, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a2 = nn.add %c2, %a : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %a, %a2 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK:      %[[F:.*]] = nn.conv2d %x, %w, %b bypass %x {{{.*}}relu} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT: %c2 = nn.conv2d %[[F]], %w, %b {{{.*}}relu}
// CHECK-NEXT: %a2 = nn.add %c2, %[[F]]
// CHECK-NEXT: func.return %[[F]], %a2
