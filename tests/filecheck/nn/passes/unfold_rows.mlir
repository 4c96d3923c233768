// RUN: snow-opt %s -p unfold-rows | filecheck %s
// RUN: snow-opt %s -p unfold-rows | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p nn-prepare | filecheck %s --check-prefix=PREP

// AlexNet's conv1: 11x11 stride 4 over 3 channels, too many interleaved kernels for INDP. Its
// 11 kernel rows become 33 channels of an unfolded input (one row per output row, zero rows of
// padding at the top), and the conv a 1x11 conv with stride (1, 4): one 363-word trace a
// pixel (23 cycles) instead of 11 of 33 words (33) or space-to-depth's 3 of 144 (27).
// Columns keep their padding, which the conv clamps. The 3x3/2 conv reads a conv output, not
// the model input, and the 7x7/2 conv's 16 kernels fit INDP: both left alone.

func.func @main(%x: tensor<1x3x35x35xf32>) -> (tensor<1x16x3x3xf32>, tensor<1x16x15x15xf32>) {
  %w = nn.constant dense<0.01> : tensor<64x3x11x11xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "conv1", strides = array<i64: 4, 4>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x35x35xf32>, tensor<64x3x11x11xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  %w2 = nn.constant dense<0.01> : tensor<16x64x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<16xf32>
  %z = nn.conv2d %y, %w2, %b2 {onnx_node = "conv2", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x64x8x8xf32>, tensor<16x64x3x3xf32>, tensor<16xf32>) -> tensor<1x16x3x3xf32>
  %w3 = nn.constant dense<0.01> : tensor<16x3x7x7xf32>
  %b3 = nn.constant dense<0.1> : tensor<16xf32>
  %v = nn.conv2d %x, %w3, %b3 {onnx_node = "stem", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x35x35xf32>, tensor<16x3x7x7xf32>, tensor<16xf32>) -> tensor<1x16x15x15xf32>
  func.return %z, %v : tensor<1x16x3x3xf32>, tensor<1x16x15x15xf32>
}

// CHECK:      %[[X:.*]] = nn.unfold_rows %x {onnx_node = "conv1.unfold_rows", kernel = 11 : i64, stride = 4 : i64, pads = array<i64: 2, 2>} : (tensor<1x3x35x35xf32>) -> tensor<1x33x8x35xf32>
// CHECK:      %[[W:.*]] = nn.constant {{.*}} : tensor<64x33x1x11xf32>
// CHECK:      nn.conv2d %[[X]], %[[W]], %{{.*}} {{{.*}}strides = array<i64: 1, 4>, pads = array<i64: 0, 2, 0, 2>{{.*}}} : {{.*}} -> tensor<1x64x8x8xf32>
// CHECK:      nn.conv2d {{.*}}strides = array<i64: 2, 2>
// CHECK-NOT:  nn.unfold_rows
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "stem"

// PREP:       nn.unfold_rows %x {{{.*}}place = "host"{{.*}}} : (tensor<1x3x35x35x!nn.fixed<8, 8>>) -> tensor<1x33x8x35x!nn.fixed<8, 8>>
// PREP-NOT:   nn.space_to_depth
