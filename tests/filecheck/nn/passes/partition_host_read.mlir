// RUN: snow-opt %s -p partition-host | filecheck %s

// A detector tail: the two scales' box convs flattened and concatenated on the pixel axis (no device
// placement: a device layer writes whole pixels), a softmax over bins on the host, the boxes and a
// second host result concatenated for the output. The pixel concat only moves device tensors to a
// host layer (through a reshape): the host applies it as it copies the convs' words back
// (`host-read`, no host layer). The output's concat takes host results only it reads: each host
// layer writes its result in its slice (`host-read`). A concat whose host input another op reads
// too (here the model's output) stays a host copy.

func.func @main(%x: tensor<1x16x4x4xf32>, %y: tensor<1x16x2x2xf32>) -> (tensor<1x32x20xf32>, tensor<1x16x40xf32>, tensor<1x16x20xf32>) {
  %w = nn.constant dense<0.5> : tensor<16x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %c0 = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x4x4xf32>, tensor<16x16x1x1xf32>, tensor<16xf32>) -> tensor<1x16x4x4xf32>
  %c1 = nn.conv2d %y, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x2x2xf32>, tensor<16x16x1x1xf32>, tensor<16xf32>) -> tensor<1x16x2x2xf32>
  %f0 = nn.reshape %c0 : (tensor<1x16x4x4xf32>) -> tensor<1x16x16xf32>
  %f1 = nn.reshape %c1 : (tensor<1x16x2x2xf32>) -> tensor<1x16x4xf32>
  %bins = nn.concat %f0, %f1 {onnx_node = "cat_scales", axis = 2 : i64} : (tensor<1x16x16xf32>, tensor<1x16x4xf32>) -> tensor<1x16x20xf32>
  %r = nn.reshape %bins : (tensor<1x16x20xf32>) -> tensor<1x4x4x20xf32>
  %s = nn.host "Softmax"(%r) {onnx_node = "dfl_softmax", opset = 13 : i64, attrs = {axis = 1 : i64}} : (tensor<1x4x4x20xf32>) -> tensor<1x4x4x20xf32>
  %back = nn.reshape %s : (tensor<1x4x4x20xf32>) -> tensor<1x16x20xf32>
  %e = nn.host "Exp"(%back) {onnx_node = "exp", opset = 13 : i64, attrs = {}} : (tensor<1x16x20xf32>) -> tensor<1x16x20xf32>
  %n = nn.host "Neg"(%back) {onnx_node = "neg", opset = 13 : i64, attrs = {}} : (tensor<1x16x20xf32>) -> tensor<1x16x20xf32>
  %out = nn.concat %e, %n {onnx_node = "cat_out", axis = 1 : i64} : (tensor<1x16x20xf32>, tensor<1x16x20xf32>) -> tensor<1x32x20xf32>
  %a = nn.host "Abs"(%back) {onnx_node = "abs", opset = 13 : i64, attrs = {}} : (tensor<1x16x20xf32>) -> tensor<1x16x20xf32>
  %shared = nn.concat %a, %bins {onnx_node = "cat_shared", axis = 2 : i64} : (tensor<1x16x20xf32>, tensor<1x16x20xf32>) -> tensor<1x16x40xf32>
  func.return %out, %shared, %a : tensor<1x32x20xf32>, tensor<1x16x40xf32>, tensor<1x16x20xf32>
}

// CHECK:      %bins = nn.concat %f0, %f1 {onnx_node = "cat_scales", place = "host-read", axis = 2 : i64}
// CHECK:      %s = nn.host "Softmax"(%r) {onnx_node = "dfl_softmax", {{.*}}place = "host"
// CHECK:      %out = nn.concat %e, %n {onnx_node = "cat_out", place = "host-read", axis = 1 : i64}
// CHECK:      %shared = nn.concat %a, %bins {onnx_node = "cat_shared", {{.*}}place = "host", axis = 2 : i64}
