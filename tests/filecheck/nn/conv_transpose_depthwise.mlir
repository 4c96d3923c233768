// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel}' | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel},partition-host' | filecheck %s --check-prefix=PLACE
// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s --check-prefix=AUTO

// A depthwise ConvTranspose 3x3 stride 2 pad 1 output_padding 1 (a detector's upsampling,
// 16 channels). Sub-pixel: one depthwise conv per phase, each phase's sub-kernel (2x2, 2x1,
// 1x2, 1x1 taps, padded to 2x2 with zeros) over a 9x9 grid, interleaved from four inputs;
// depthwise-to-grouped then places each as it places any depthwise conv. The cost model
// prefers zero insertion here: its layout moves 6208 words (the 16-channel input spread to
// 18x18) where the interleave moves 9280 (four 9x9 grids, then 16x16), and a depthwise conv
// uses one lane in 16 either way (36864 MACs against 20736 cost less than the 3072 extra words).

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x16x16xf32> {
  %w = nn.constant dense<0.01> : tensor<16x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 16 : i64} : (tensor<1x16x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
  func.return %y : tensor<1x16x16x16xf32>
}

// CHECK-COUNT-4: nn.conv2d %x, {{.*}}onnx_node = "up.phase{{[0-3]}}"{{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x2xf32>, tensor<16xf32>) -> tensor<1x16x9x9xf32>
// CHECK:      nn.depth_to_space %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : ({{.*}}) -> tensor<1x16x16x16xf32>

// PLACE:      nn.depth_to_space {{.*}}place = "host"

// AUTO:       %[[S:.*]] = nn.zero_insert %x {onnx_node = "up.zero_insert", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 2, 2>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x18x18xf32>
// AUTO:       nn.conv2d %[[S]], {{.*}}conv_transpose = "zero-insertion {{[0-9.]+}} ms (36864 MACs, host 6208 words), sub-pixel {{[0-9.]+}} ms (20736 MACs, host 9280 words)"{{.*}}groups = 16 : i64{{.*}} -> tensor<1x16x16x16xf32>
// AUTO-NOT:   nn.depth_to_space
