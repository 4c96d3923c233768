// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv,partition-host' | filecheck %s --check-prefix=PLACE
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=zero-insertion}' | filecheck %s --check-prefix=ZERO

// A depthwise ConvTranspose 3x3 stride 2 pad 1 output_padding 1 (a detector's upsampling,
// 16 channels): one depthwise conv per phase with that phase's taps only (2x2, 2x1, 1x2, 1x1),
// each over the grid rows and columns the interleave reads it at (the crop of 1 drops the first
// odd-phase row: 9 or 8), interleaved from four inputs; depthwise-to-grouped then places each as
// it places any depthwise conv. 10816 MACs, where zero insertion's 3x3 conv over the spread
// input does 36864: they cost the same here (the host copies 8720 words against 6208, and a
// depthwise conv keeps one lane in 16 busy), and the tie goes to the phases.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x16x16xf32> {
  %w = nn.constant dense<0.01> : tensor<16x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 16 : i64} : (tensor<1x16x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
  func.return %y : tensor<1x16x16x16xf32>
}

// CHECK:      nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "up.phase0", conv_transpose = "phases {{[0-9.]+}} ms (10816 MACs, host 8720 words), zero-insertion {{[0-9.]+}} ms (36864 MACs, host 6208 words)"{{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x2xf32>, tensor<16xf32>) -> tensor<1x16x9x9xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase1"{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x1xf32>, tensor<16xf32>) -> tensor<1x16x9x8xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase2"{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x1x2xf32>, tensor<16xf32>) -> tensor<1x16x8x9xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase3"{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x1x1xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      nn.depth_to_space %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : ({{.*}}) -> tensor<1x16x16x16xf32>

// PLACE:      nn.depth_to_space {{.*}}place = "host"

// ZERO:       %[[S:.*]] = nn.zero_insert %x {onnx_node = "up.zero_insert", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 2, 2>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x18x18xf32>
// ZERO:       nn.conv2d %[[S]], {{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x18x18xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
// ZERO-NOT:   nn.depth_to_space
