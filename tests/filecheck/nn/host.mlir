// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s

// nn.host: an ONNX node kept as it is (op type, opset, attributes as MLIR attributes, absent
// optional inputs as `slots`), with integer and boolean tensors as ONNX has them; an If whose
// branches (serialised GraphProtos, `#nn.onnx_graph`) read the outer value `x` (`captures`).

func.func @main(%x: tensor<1x4x8x8xf32>, %i: tensor<2xi64>, %v: tensor<4xf32>, %cond: tensor<i1>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x4x4xf32>, tensor<1x4x8x8xi1>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<4xf32>) {
  %s = nn.host "Sigmoid"(%x) {attrs = {}, opset = 13 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %hi = nn.constant dense<0.5> : tensor<f32>
  %c = nn.host "Clip"(%x, %hi) {attrs = {}, opset = 13 : i64, slots = array<i64: 0, 2>, n_slots = 3 : i64} : (tensor<1x4x8x8xf32>, tensor<f32>) -> tensor<1x4x8x8xf32>
  %p = nn.host "MaxPool"(%x) {attrs = {kernel_shape = array<i64: 2, 2>, dilations = array<i64: 2, 2>, auto_pad = "SAME_UPPER", strides = array<i64: 2, 2>}, opset = 13 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %z = nn.constant dense<0.0> : tensor<f32>
  %lt = nn.host "Less"(%x, %z) {attrs = {}, opset = 13 : i64} : (tensor<1x4x8x8xf32>, tensor<f32>) -> tensor<1x4x8x8xi1>
  %a, %b = nn.host "Split"(%x, %i) {attrs = {axis = 1 : i64}, opset = 13 : i64} : (tensor<1x4x8x8xf32>, tensor<2xi64>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  %y = nn.host "If"(%cond, %v) {attrs = {else_branch = #nn.onnx_graph<"ChAKAXgSAWUiCElkZW50aXR5EgRlbHNlYg8KAWUSCgoICAESBAoCCAQ=">, then_branch = #nn.onnx_graph<"CgsKAXgSAXQiA05lZxIEdGhlbmIPCgF0EgoKCAgBEgQKAggE">}, opset = 13 : i64, captures = ["x"]} : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  func.return %s, %c, %p, %lt, %a, %b, %y : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x4x4xf32>, tensor<1x4x8x8xi1>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<4xf32>
}

// CHECK:      %s = nn.host "Sigmoid"(%x) {attrs = {}, opset = 13 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK:      %c = nn.host "Clip"(%x, %hi) {attrs = {}, opset = 13 : i64, slots = array<i64: 0, 2>, n_slots = 3 : i64}
// CHECK:      %p = nn.host "MaxPool"(%x) {attrs = {kernel_shape = array<i64: 2, 2>, dilations = array<i64: 2, 2>, auto_pad = "SAME_UPPER", strides = array<i64: 2, 2>}, opset = 13 : i64}
// CHECK:      %lt = nn.host "Less"(%x, %z) {{.*}} -> tensor<1x4x8x8xi1>
// CHECK-NEXT: %a, %b = nn.host "Split"(%x, %i) {attrs = {axis = 1 : i64}, opset = 13 : i64} : (tensor<1x4x8x8xf32>, tensor<2xi64>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
// CHECK-NEXT: %y = nn.host "If"(%cond, %v) {attrs = {else_branch = #nn.onnx_graph<"ChAKAXgSAWUiCElkZW50aXR5EgRlbHNlYg8KAWUSCgoICAESBAoCCAQ=">, then_branch = #nn.onnx_graph<"CgsKAXgSAXQiA05lZxIEdGhlbmIPCgF0EgoKCAgBEgQKAggE">}, opset = 13 : i64, captures = ["x"]} : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
