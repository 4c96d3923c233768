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

// RUN: snow-opt %s -p 'drop-identity{split-heads=true}' | filecheck %s --check-prefix=HEADS

// split-heads: a Split along the channels of the scales' pixel concat of flattened channel concats
// (YOLOv8's Detect with its DFL) is each output's own pixel concat of the scales' flattened inputs.

func.func @heads(%b8: tensor<1x16x8x8xf32>, %c8: tensor<1x8x8x8xf32>, %b4: tensor<1x16x4x4xf32>, %c4: tensor<1x8x4x4xf32>, %s: tensor<2xi64>) -> (tensor<1x16x80xf32>, tensor<1x8x80xf32>) {
  %h8 = nn.concat %b8, %c8 {axis = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x24x8x8xf32>
  %h4 = nn.concat %b4, %c4 {axis = 1 : i64} : (tensor<1x16x4x4xf32>, tensor<1x8x4x4xf32>) -> tensor<1x24x4x4xf32>
  %f8 = nn.reshape %h8 : (tensor<1x24x8x8xf32>) -> tensor<1x24x64xf32>
  %f4 = nn.reshape %h4 : (tensor<1x24x4x4xf32>) -> tensor<1x24x16xf32>
  %all = nn.concat %f8, %f4 {onnx_node = "cat", axis = 2 : i64} : (tensor<1x24x64xf32>, tensor<1x24x16xf32>) -> tensor<1x24x80xf32>
  %box, %cls = nn.host "Split"(%all, %s) {attrs = {axis = 1 : i64}, opset = 13 : i64} : (tensor<1x24x80xf32>, tensor<2xi64>) -> (tensor<1x16x80xf32>, tensor<1x8x80xf32>)
  func.return %box, %cls : tensor<1x16x80xf32>, tensor<1x8x80xf32>
}

// CHECK-LABEL: func.func @heads
// CHECK:       nn.host "Split"
// HEADS-LABEL: func.func @heads
// HEADS-NOT:   nn.host "Split"
// HEADS:       %[[B8:.*]] = nn.reshape %b8 : (tensor<1x16x8x8xf32>) -> tensor<1x16x64xf32>
// HEADS:       %[[B4:.*]] = nn.reshape %b4 : (tensor<1x16x4x4xf32>) -> tensor<1x16x16xf32>
// HEADS:       %[[BOX:.*]] = nn.concat %[[B8]], %[[B4]] {onnx_node = "cat.0", axis = 2 : i64}
// HEADS:       %[[C8:.*]] = nn.reshape %c8 : (tensor<1x8x8x8xf32>) -> tensor<1x8x64xf32>
// HEADS:       %[[C4:.*]] = nn.reshape %c4 : (tensor<1x8x4x4xf32>) -> tensor<1x8x16xf32>
// HEADS:       %[[CLS:.*]] = nn.concat %[[C8]], %[[C4]] {onnx_node = "cat.1", axis = 2 : i64}
// HEADS-NOT:   nn.host "Split"
// HEADS:       func.return %[[BOX]], %[[CLS]]
