// RUN: snow-opt %s -p drop-identity | filecheck %s

// A concat that puts a split's outputs back together in order, along the split's axis, is the
// split's input: every output of one ONNX Split (a YOLOv8 Detect head's Split(box, cls) ->
// Concat(box, cls) once its sigmoid moved into the convs), or channel slices covering a tensor.
// Out of order, along another axis, or a part missing: kept.

func.func @split(%x: tensor<1x80x320xf32>, %s: tensor<2xi64>) -> (tensor<1x80x320xf32>, tensor<1x80x320xf32>) {
  %a, %b = nn.host "Split"(%x, %s) {attrs = {axis = 1 : i64}, opset = 13 : i64} : (tensor<1x80x320xf32>, tensor<2xi64>) -> (tensor<1x64x320xf32>, tensor<1x16x320xf32>)
  %same = nn.concat %a, %b {axis = 1 : i64} : (tensor<1x64x320xf32>, tensor<1x16x320xf32>) -> tensor<1x80x320xf32>
  %swapped = nn.concat %b, %a {axis = 1 : i64} : (tensor<1x16x320xf32>, tensor<1x64x320xf32>) -> tensor<1x80x320xf32>
  func.return %same, %swapped : tensor<1x80x320xf32>, tensor<1x80x320xf32>
}

// CHECK-LABEL: func.func @split
// CHECK:       %a, %b = nn.host "Split"
// CHECK-NEXT:  %swapped = nn.concat %b, %a
// CHECK-NEXT:  func.return %x, %swapped

func.func @slices(%x: tensor<1x48x4x4xf32>) -> (tensor<1x48x4x4xf32>, tensor<1x32x4x4xf32>) {
  %a = nn.channel_slice %x {start = 0 : i64, size = 16 : i64} : (tensor<1x48x4x4xf32>) -> tensor<1x16x4x4xf32>
  %b = nn.channel_slice %x {start = 16 : i64, size = 32 : i64} : (tensor<1x48x4x4xf32>) -> tensor<1x32x4x4xf32>
  %c = nn.channel_slice %x {start = 16 : i64, size = 16 : i64} : (tensor<1x48x4x4xf32>) -> tensor<1x16x4x4xf32>
  %whole = nn.concat %a, %b {axis = 1 : i64} : (tensor<1x16x4x4xf32>, tensor<1x32x4x4xf32>) -> tensor<1x48x4x4xf32>
  %part = nn.concat %a, %c {axis = 1 : i64} : (tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>) -> tensor<1x32x4x4xf32>
  func.return %whole, %part : tensor<1x48x4x4xf32>, tensor<1x32x4x4xf32>
}

// CHECK-LABEL: func.func @slices
// CHECK:       %part = nn.concat %a, %c
// CHECK-NEXT:  func.return %x, %part
