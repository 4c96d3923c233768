// RUN: snow-opt %s -p fold-focus | filecheck %s

// YOLOv5's Focus as torch exports it: x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
// x[..., 1::2, 1::2], each a Slice on H then one on W, concatenated on channels before a 3x3
// conv. The conv reads x instead, with stride 2, pads 2 and a 6x6 kernel (the four phases'
// 3x3 kernels interleaved); the eight Slices and the Concat vanish. A crop (rows and columns
// [0, 6) of 8) is not a space-to-depth and stays.

func.func @focus(%x: tensor<1x3x8x8xf32>) -> tensor<1x16x4x4xf32> {
  %z = nn.constant dense<0> : tensor<1xi64>
  %o = nn.constant dense<1> : tensor<1xi64>
  %end = nn.constant dense<9223372036854775807> : tensor<1xi64>
  %a2 = nn.constant dense<2> : tensor<1xi64>
  %a3 = nn.constant dense<3> : tensor<1xi64>
  %two = nn.constant dense<2> : tensor<1xi64>
  %w = nn.constant dense<0.25> : tensor<16x12x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %r0 = nn.host "Slice"(%x, %z, %end, %a2, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x8xf32>
  %p0 = nn.host "Slice"(%r0, %z, %end, %a3, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x4x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x4xf32>
  %r1 = nn.host "Slice"(%x, %o, %end, %a2, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x8xf32>
  %p1 = nn.host "Slice"(%r1, %z, %end, %a3, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x4x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x4xf32>
  %r2 = nn.host "Slice"(%x, %z, %end, %a2, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x8xf32>
  %p2 = nn.host "Slice"(%r2, %o, %end, %a3, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x4x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x4xf32>
  %r3 = nn.host "Slice"(%x, %o, %end, %a2, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x8xf32>
  %p3 = nn.host "Slice"(%r3, %o, %end, %a3, %two) {opset = 13 : i64, attrs = {}} : (tensor<1x3x4x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x3x4x4xf32>
  %cat = nn.concat %p0, %p1, %p2, %p3 {axis = 1 : i64} : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x12x4x4xf32>
  %y = nn.conv2d %cat, %w, %b {onnx_node = "Conv_41", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x12x4x4xf32>, tensor<16x12x3x3xf32>, tensor<16xf32>) -> tensor<1x16x4x4xf32>
  func.return %y : tensor<1x16x4x4xf32>
}

// CHECK-LABEL: func.func @focus
// CHECK-NOT:   nn.host
// CHECK-NOT:   nn.concat
// CHECK:       %y = nn.conv2d %x, %{{.*}}, %b {onnx_node = "Conv_41", strides = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>, {{.*}}relu} : (tensor<1x3x8x8xf32>, tensor<16x3x6x6xf32>, tensor<16xf32>) -> tensor<1x16x4x4xf32>
// CHECK-NEXT:  func.return %y

func.func @crop(%x: tensor<1x3x8x8xf32>) -> tensor<1x16x3x3xf32> {
  %s0 = nn.constant dense<[0, 0]> : tensor<2xi64>
  %s1 = nn.constant dense<[1, 1]> : tensor<2xi64>
  %e = nn.constant dense<[6, 6]> : tensor<2xi64>
  %ax = nn.constant dense<[2, 3]> : tensor<2xi64>
  %st = nn.constant dense<[2, 2]> : tensor<2xi64>
  %w = nn.constant dense<0.25> : tensor<16x6x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %p0 = nn.host "Slice"(%x, %s0, %e, %ax, %st) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<1x3x3x3xf32>
  %p1 = nn.host "Slice"(%x, %s1, %e, %ax, %st) {opset = 13 : i64, attrs = {}} : (tensor<1x3x8x8xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<1x3x3x3xf32>
  %cat = nn.concat %p0, %p1 {axis = 1 : i64} : (tensor<1x3x3x3xf32>, tensor<1x3x3x3xf32>) -> tensor<1x6x3x3xf32>
  %y = nn.conv2d %cat, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x6x3x3xf32>, tensor<16x6x3x3xf32>, tensor<16xf32>) -> tensor<1x16x3x3xf32>
  func.return %y : tensor<1x16x3x3xf32>
}

// CHECK-LABEL: func.func @crop
// CHECK:       nn.host "Slice"(%x
// CHECK:       nn.host "Slice"(%x
// CHECK:       %cat = nn.concat
// CHECK:       %y = nn.conv2d %cat,
