// RUN: snow-opt %s -p cascade-max-pool | filecheck %s

// YOLO's SPP: one tensor pooled 13x13, 5x5 and 9x9 (stride 1, "same" padding) and concatenated.
// The pools become a chain of 5x5 windows (SPPF), the smallest first, where the first pool was:
// 9x9 = 5x5 over the 5x5 result, 13x13 = 5x5 over the 9x9 one. Readers keep their operands.

func.func @spp(%x: tensor<1x16x13x13xf32>) -> tensor<1x64x13x13xf32> {
  %p13 = nn.max_pool %x {onnx_node = "MaxPool_140", kernel = array<i64: 13, 13>, strides = array<i64: 1, 1>, pads = array<i64: 6, 6, 6, 6>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x13x13xf32>
  %p5 = nn.max_pool %x {onnx_node = "MaxPool_138", kernel = array<i64: 5, 5>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x13x13xf32>
  %p9 = nn.max_pool %x {onnx_node = "MaxPool_139", kernel = array<i64: 9, 9>, strides = array<i64: 1, 1>, pads = array<i64: 4, 4, 4, 4>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x13x13xf32>
  %cat = nn.concat %x, %p5, %p9, %p13 {axis = 1 : i64} : (tensor<1x16x13x13xf32>, tensor<1x16x13x13xf32>, tensor<1x16x13x13xf32>, tensor<1x16x13x13xf32>) -> tensor<1x64x13x13xf32>
  func.return %cat : tensor<1x64x13x13xf32>
}

// CHECK-LABEL: func.func @spp
// CHECK-NEXT:  %p5 = nn.max_pool %x {onnx_node = "MaxPool_138", kernel = array<i64: 5, 5>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>}
// CHECK-NEXT:  %p9 = nn.max_pool %p5 {onnx_node = "MaxPool_139", kernel = array<i64: 5, 5>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>}
// CHECK-NEXT:  %p13 = nn.max_pool %p9 {onnx_node = "MaxPool_140", kernel = array<i64: 5, 5>, strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>}
// CHECK-NEXT:  %cat = nn.concat %x, %p5, %p9, %p13

// Not the same padding (a stride-2 pool, a pool padded on one side), or a kernel that shrinks in
// one axis while it grows in the other: left as written.

func.func @mixed(%x: tensor<1x16x13x13xf32>) -> (tensor<1x16x7x7xf32>, tensor<1x16x13x13xf32>, tensor<1x16x13x13xf32>) {
  %s2 = nn.max_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x7x7xf32>
  %a = nn.max_pool %x {kernel = array<i64: 5, 3>, strides = array<i64: 1, 1>, pads = array<i64: 2, 1, 2, 1>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x13x13xf32>
  %b = nn.max_pool %x {kernel = array<i64: 3, 5>, strides = array<i64: 1, 1>, pads = array<i64: 1, 2, 1, 2>} : (tensor<1x16x13x13xf32>) -> tensor<1x16x13x13xf32>
  func.return %s2, %a, %b : tensor<1x16x7x7xf32>, tensor<1x16x13x13xf32>, tensor<1x16x13x13xf32>
}

// CHECK-LABEL: func.func @mixed
// CHECK-NEXT:  %s2 = nn.max_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>
// CHECK-NEXT:  %a = nn.max_pool %x {kernel = array<i64: 5, 3>
// CHECK-NEXT:  %b = nn.max_pool %x {kernel = array<i64: 3, 5>
