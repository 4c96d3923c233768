// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv,depthwise-to-grouped,partition-host' | filecheck %s --check-prefix=PLACE
// RUN: snow-opt %s -p 'conv-transpose-to-conv,partition-host' | filecheck %s --check-prefix=HOST
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=zero-insertion}' | filecheck %s --check-prefix=ZERO

// A depthwise ConvTranspose 3x3 stride 2 pad 1 output_padding 1 (a detector's upsampling,
// 16 channels): one depthwise conv per result phase with that phase's taps only (even rows and
// columns 1x1, then 1x2, 2x1, 2x2), each computing exactly its 8x8 of the 16x16 result (offsets
// 0), interleaved from four inputs in place: partition-host places the interleave on the device,
// each phase conv writing its pixels through the write-back's steps (no host copy);
// depthwise-to-grouped places each conv as any depthwise conv. 9216 MACs and no host words,
// where zero insertion's 3x3 conv over the spread input does 36864 and the host spreads 6208.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x16x16xf32> {
  %w = nn.constant dense<0.01> : tensor<16x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 16 : i64} : (tensor<1x16x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
  func.return %y : tensor<1x16x16x16xf32>
}

// CHECK:      nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "up.phase0", conv_transpose = "phases {{[0-9.]+}} ms (9216 MACs, host 0 words), zero-insertion {{[0-9.]+}} ms (36864 MACs, host 6208 words)"{{.*}}pads = array<i64: 0, 0, 0, 0>{{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x1x1xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase1"{{.*}}pads = array<i64: 0, 0, 0, 1>{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x1x2xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase2"{{.*}}pads = array<i64: 0, 0, 1, 0>{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x1xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      nn.conv2d %x, {{.*}}onnx_node = "up.phase3"{{.*}}pads = array<i64: 0, 0, 1, 1>{{.*}} : (tensor<1x16x8x8xf32>, tensor<16x1x2x2xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
// CHECK:      nn.depth_to_space %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : ({{.*}}) -> tensor<1x16x16x16xf32>

// PLACE:      nn.depth_to_space {{.*}}place = "snowflake"

// Without depthwise-to-grouped the phase convs are the host's, and so is the interleave:
// HOST:       nn.depth_to_space {{.*}}host_reason = "interleave: phase 0 is not a device conv read only by it; the host interleaves", place = "host"

// ZERO:       %[[S:.*]] = nn.zero_insert %x {onnx_node = "up.zero_insert", strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 2, 2>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x18x18xf32>
// ZERO:       nn.conv2d %[[S]], {{.*}}groups = 16 : i64{{.*}} : (tensor<1x16x18x18xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x16x16xf32>
// ZERO-NOT:   nn.depth_to_space
