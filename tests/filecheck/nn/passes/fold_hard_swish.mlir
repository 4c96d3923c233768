// RUN: snow-opt %s -p fold-hard-swish | filecheck %s

// Hard-swish as exporters spell it (x * Clip(x + 3, 0, 6) / 6, the Div an nn.host node; or
// times 1/6; or x * HardSigmoid(x, 1/6, 1/2)) becomes one nn.hard_swish; the ops it replaces
// are erased. A clip to [0, 5] is not hard-swish and stays.

func.func @main(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %three = nn.constant dense<3.0> : tensor<f32>
  %six = nn.constant dense<6.0> : tensor<f32>
  %sixth = nn.constant dense<0.16666667> : tensor<f32>
  %a = nn.add %x, %three : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %c = nn.clip %a {min = 0.0 : f32, max = 6.0 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.mul %x, %c : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %d = nn.host "Div"(%m, %six) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %a2 = nn.add %three, %x : (tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c2 = nn.clip %a2 {min = 0.0 : f32, max = 6.0 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %m2 = nn.mul %c2, %x : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s2 = nn.mul %m2, %sixth : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %g = nn.hard_sigmoid %x {alpha = 0.16666667 : f32, beta = 0.5 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %h = nn.mul %x, %g : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %a3 = nn.add %x, %three : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %c3 = nn.clip %a3 {min = 0.0 : f32, max = 5.0 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %m3 = nn.mul %x, %c3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %d3 = nn.host "Div"(%m3, %six) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  func.return %d, %s2, %h, %d3 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK:      %d = nn.hard_swish %x : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT: %s2 = nn.hard_swish %x
// CHECK-NEXT: %h = nn.hard_swish %x
// CHECK-NEXT: %a3 = nn.add %x, %three
// CHECK-NEXT: %c3 = nn.clip %a3 {min = 0.000000e+00 : f32, max = 5.000000e+00 : f32}
// CHECK-NEXT: %m3 = nn.mul %x, %c3
// CHECK-NEXT: %d3 = nn.host "Div"(%m3, %six)
// CHECK-NOT:  nn.hard_sigmoid
