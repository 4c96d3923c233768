// RUN: snow-opt %s -p 'fuse-activation{hw=%inputs/act_unit.json}' | filecheck %s
// RUN: snow-opt %s -p fuse-activation | filecheck %s --check-prefix=STOCK

// On a machine with the write-back activation unit, LeakyRelu, Clip, HardSigmoid, HardSwish,
// Sigmoid, Tanh and x * Sigmoid(x) fold into the producing conv's `act`; not when the conv's
// result has another user, the conv has a ReLU, or a parameter does not fit the unit's word
// (a clip bound off the 1/16 grid). On the stock machine nothing changes.

func.func @main(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %c0 = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a0 = nn.host "LeakyRelu"(%c0) {attrs = {alpha = 0.2 : f32}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c1 = nn.conv2d %a0, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a1 = nn.clip %c1 {min = 0.0 : f32, max = 6.0 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c2 = nn.conv2d %a1, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %s2 = nn.host "Sigmoid"(%c2) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %a2 = nn.mul %c2, %s2 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c3 = nn.conv2d %a2, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a3 = nn.hard_swish %c3 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c4 = nn.conv2d %a3, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a4 = nn.host "Tanh"(%c4) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c5 = nn.conv2d %a4, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a5 = nn.hard_sigmoid %c5 {alpha = 0.2 : f32, beta = 0.5 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c6 = nn.conv2d %a5, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a6 = nn.host "Sigmoid"(%c6) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c7 = nn.conv2d %a6, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a7 = nn.host "Tanh"(%c7) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c8 = nn.conv2d %a7, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a8 = nn.host "Sigmoid"(%c8) {attrs = {}, opset = 13 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c9 = nn.conv2d %a8, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %a9 = nn.clip %c9 {min = 0.0 : f32, max = 6.03 : f32} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %a9, %c7, %a1, %a2, %a3, %a4, %a5, %a6 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK:      %c0 = nn.conv2d %x, %w, %b {{{.*}}act = "leaky_relu(0.200000003)"{{[,}]}}
// CHECK-NEXT: %c1 = nn.conv2d %c0, %w, %b {{{.*}}act = "clip(0, 6)"{{[,}]}}
// CHECK-NEXT: %c2 = nn.conv2d %c1, %w, %b {{{.*}}act = "silu"{{[,}]}}
// CHECK-NEXT: %c3 = nn.conv2d %c2, %w, %b {{{.*}}act = "hard_swish(0.166666667, 0.5)"{{[,}]}}
// CHECK-NEXT: %c4 = nn.conv2d %c3, %w, %b {{{.*}}act = "tanh"{{[,}]}}
// CHECK-NEXT: %c5 = nn.conv2d %c4, %w, %b {{{.*}}act = "hard_sigmoid(0.200000003, 0.5)"{{[,}]}}
// CHECK-NEXT: %c6 = nn.conv2d %c5, %w, %b {{{.*}}act = "sigmoid"{{[,}]}}
// a second user of %c7 (the return): the Tanh stays on the host
// CHECK-NEXT: %c7 = nn.conv2d %c6, %w, %b {{{[^}]*}}groups = 1 : i64}
// CHECK-NEXT: %a7 = nn.host "Tanh"(%c7)
// after a ReLU: stays
// CHECK-NEXT: %c8 = nn.conv2d %a7, %w, %b {{{[^}]*}}relu}
// CHECK-NEXT: %a8 = nn.host "Sigmoid"(%c8)
// a clip bound off the unit's 1/16 grid: stays
// CHECK-NEXT: %c9 = nn.conv2d %a8, %w, %b {{{[^}]*}}groups = 1 : i64}
// CHECK-NEXT: %a9 = nn.clip %c9
// CHECK-NEXT: func.return %a9, %c7, %c1, %c2, %c3, %c4, %c5, %c6

// STOCK-NOT:  act =
// STOCK:      %a0 = nn.host "LeakyRelu"(%c0)
// STOCK-NOT:  act =

// A channel concat of convs read by nothing else (a wide depthwise conv's parts): every part
// takes the activation.
func.func @parts(%x: tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %p0 = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %p1 = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %cat = nn.concat %p0, %p1 {axis = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
  %y = nn.hard_swish %cat : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @parts
// CHECK:      %p0 = nn.conv2d %x, %w, %b {{{.*}}act = "hard_swish(0.166666667, 0.5)"{{[,}]}}
// CHECK-NEXT: %p1 = nn.conv2d %x, %w, %b {{{.*}}act = "hard_swish(0.166666667, 0.5)"{{[,}]}}
// CHECK-NEXT: %cat = nn.concat %p0, %p1
// CHECK-NEXT: func.return %cat
