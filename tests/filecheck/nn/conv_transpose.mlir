// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s
// RUN: snow-opt %s -p conv-transpose-to-conv | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p nn-prepare | filecheck %s --check-prefix=PREP
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=zero-insertion}' | filecheck %s --check-prefix=ZERO
// RUN: not snow-opt %s -p 'conv-transpose-to-conv{method=fft}' 2>&1 | filecheck %s --check-prefix=BAD

// waifu2x UpConv7's last layer, small: ConvTranspose 4x4 stride 2 pad 3, 16 -> 3 channels, then a
// ReLU. Per axis the taps k = 0, 2 land on even output rows and 1, 3 on odd ones, each phase a
// 2x2 sub-kernel: one stride-1 conv with 4 phases x 3 channels, its output interleaved. The pad
// of 3 crops the first grid row (offset 1); the ReLU moves before the interleave. 37632 MACs
// (7x7 grid x 12 x 16 x 2x2) against zero insertion's 110592 (12x12 x 3 x 16 x 4x4), and the
// interleave moves 1020 words where zero insertion's layout would move 4624: sub-pixel (one conv
// per phase has the same taps here, k = 2s, in four layers of 3 kernels: fewer lanes busy).
// Zero insertion, asked for: the input spread by 2 and padded by 4 - 1 - 3 = 0, then a 4x4
// conv with the flipped kernel.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x3x12x12xf32> {
  %w = nn.constant dense<0.01> : tensor<16x3x4x4xf32>
  %b = nn.constant dense<0.1> : tensor<3xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<16x3x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
  %r = nn.relu %y : (tensor<1x3x12x12xf32>) -> tensor<1x3x12x12xf32>
  func.return %r : tensor<1x3x12x12xf32>
}

// CHECK:      %[[W:.*]] = nn.constant {{.*}} : tensor<12x16x2x2xf32>
// CHECK:      %[[C:.*]] = nn.conv2d %x, %[[W]], %{{.*}} {{{.*}}conv_transpose = "sub-pixel {{[0-9.]+}} ms (37632 MACs, host 1020 words), phases {{[0-9.]+}} ms (37632 MACs, host 1020 words), zero-insertion {{[0-9.]+}} ms (110592 MACs, host 4624 words)"{{.*}}strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>{{.*}}} : {{.*}} -> tensor<1x12x7x7xf32>
// CHECK-NEXT: %[[R:.*]] = nn.relu %[[C]]
// CHECK-NEXT: nn.depth_to_space %[[R]] {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x12x7x7xf32>) -> tensor<1x3x12x12xf32>
// CHECK-NOT:  nn.conv_transpose2d

// PREP:       nn.conv2d {{.*}}place = "snowflake"{{.*}}relu{{.*}} -> tensor<1x12x7x7x!nn.fixed<8, 8>>
// PREP:       nn.depth_to_space {{.*}}place = "host"{{.*}} -> tensor<1x3x12x12x!nn.fixed<8, 8>>

// ZERO:       %[[S:.*]] = nn.zero_insert %x {onnx_node = "up.zero_insert", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x15x15xf32>
// ZERO:       %[[C:.*]] = nn.conv2d %[[S]], %{{.*}}, %b {{{.*}}pads = array<i64: 0, 0, 0, 0>{{.*}}} : (tensor<1x16x15x15xf32>, tensor<3x16x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
// ZERO-NEXT:  nn.relu %[[C]]

// BAD: conv-transpose-to-conv: method 'fft' is not auto, sub-pixel, phases or zero-insertion
