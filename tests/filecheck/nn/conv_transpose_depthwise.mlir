// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s
// RUN: snow-opt %s -p nn-prepare | filecheck %s --check-prefix=PREP

// A depthwise ConvTranspose 3x3 stride 2 pad 1 output_padding 1 (a detector's upsampling,
// 16 channels): one depthwise conv per phase, each phase's sub-kernel (2x2, 2x1, 1x2, 1x1 taps,
// padded to 2x2 with zeros), interleaved from four inputs; depthwise-to-grouped then places
// each phase conv as it places any depthwise conv.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x16x16xf32> {
  %w = nn.constant dense<0.01> : tensor<16x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 16 : i64} : (tensor<1x16x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
  func.return %y : tensor<1x16x16x16xf32>
}

// CHECK-COUNT-4: nn.conv2d %x, {{.*}}onnx_node = "up.phase{{[0-3]}}"{{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x2xf32>, tensor<16xf32>) -> tensor<1x16x9x9xf32>
// CHECK:      nn.depth_to_space %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : ({{.*}}) -> tensor<1x16x16x16xf32>

// PREP-COUNT-4: nn.conv2d {{.*}}place = "{{host|snowflake}}"
// PREP:       nn.depth_to_space {{.*}}place = "host"
