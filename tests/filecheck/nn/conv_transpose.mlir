// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=phases}' | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=phases}' | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=phases},nn-prepare' | filecheck %s --check-prefix=PREP
// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s --check-prefix=AUTO
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel}' | filecheck %s --check-prefix=MERGED
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=zero-insertion}' | filecheck %s --check-prefix=ZERO
// RUN: not snow-opt %s -p 'conv-transpose-to-conv{method=fft}' 2>&1 | filecheck %s --check-prefix=BAD

// waifu2x UpConv7's last layer, small: ConvTranspose 4x4 stride 2 pad 3, 16 -> 3 channels, then a
// ReLU, the model's output. Per axis the taps k = 0, 2 land on even output rows and 1, 3 on odd
// ones, each phase a 2x2 sub-kernel. With method phases, one conv per result phase computes
// exactly its 6x6 of the 12x12 result and writes it in place (partition-host places the
// interleave on the device: no host copy); the crop of 3 at the bottom leaves one input row each
// phase's 2 taps would read past its last output row, so each phase gets a third, zero tap (the
// conv cannot stop inside its input): 62208 MACs (4 x 6x6 x 3 x 16 x 3x3). The merged conv
// does 37632 (7x7 grid x 12 x 16 x 2x2), and its interleave costs no host words here: only the
// host reads the result, and it applies the interleave as it copies the result back
// (`host-read`); with a device reader it would be a host copy of 1020 words. Zero insertion:
// 110592 MACs (12x12 x 3 x 16 x 4x4) and 4624 host words. So the cost model (auto) takes the
// merged conv. The ReLU moves before the interleave.
// Asked for, one merged conv with 4 phases x 3 channels, interleaved by the host (its write-back
// writes a pixel's four phases together; the pad of 3 crops the first grid row: offset 1, which
// also keeps it from writing the result in place through the CU stride: `cu-stride: ...`): the
// pass asks for `host-read` (the host applying it as it reads the grid back), which partition-host
// grants where only the host reads the result, else it places a host layer with the reason given.
// Zero insertion, asked for: the input spread by 2 and padded by 4 - 1 - 3 = 0, then a 4x4
// conv with the flipped kernel.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x3x12x12xf32> {
  %w = nn.constant dense<0.01> : tensor<16x3x4x4xf32>
  %b = nn.constant dense<0.1> : tensor<3xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x16x8x8xf32>, tensor<16x3x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
  %r = nn.relu %y : (tensor<1x3x12x12xf32>) -> tensor<1x3x12x12xf32>
  func.return %r : tensor<1x3x12x12xf32>
}

// CHECK:      nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "up.phase0", conv_transpose = "phases {{[0-9.]+}} ms (62208 MACs, host 0 words), sub-pixel {{[0-9.]+}} ms (37632 MACs, host 0 words), zero-insertion {{[0-9.]+}} ms (110592 MACs, host 4624 words); cu-stride: phases computed past the result (cropped)"{{.*}}pads = array<i64: 0, 0, 0, 0>{{.*}} : (tensor<1x16x8x8xf32>, tensor<3x16x3x3xf32>, tensor<3xf32>) -> tensor<1x3x6x6xf32>
// CHECK-COUNT-3: nn.conv2d %x, {{.*}} -> tensor<1x3x6x6xf32>
// CHECK-COUNT-4: nn.relu
// CHECK-NEXT: nn.depth_to_space %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : ({{.*}}) -> tensor<1x3x12x12xf32>
// CHECK-NOT:  nn.conv_transpose2d

// PREP-COUNT-4: nn.conv2d {{.*}}place = "snowflake"{{.*}}relu{{.*}} -> tensor<1x3x6x6x!nn.fixed<8, 8>>
// PREP:       nn.depth_to_space {{.*}}place = "snowflake"{{.*}} -> tensor<1x3x12x12x!nn.fixed<8, 8>>

// AUTO:       nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "up", conv_transpose = "sub-pixel {{[0-9.]+}} ms (37632 MACs, host 0 words), phases {{[0-9.]+}} ms (62208 MACs, host 0 words), zero-insertion {{.*}}; cu-stride: phases computed past the result (cropped)"{{.*}} -> tensor<1x12x7x7xf32>
// AUTO:       nn.depth_to_space {{.*}}onnx_node = "up.interleave", place = "host-read"

// MERGED:      %[[W:.*]] = nn.constant {{.*}} : tensor<12x16x2x2xf32>
// MERGED:      %[[C:.*]] = nn.conv2d %x, %[[W]], %{{.*}} {{{.*}}strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>{{.*}}} : {{.*}} -> tensor<1x12x7x7xf32>
// MERGED-NEXT: %[[R:.*]] = nn.relu %[[C]]
// MERGED-NEXT: nn.depth_to_space %[[R]] {onnx_node = "up.interleave", place = "host-read", host_reason = "interleave of one merged conv's phases (method sub-pixel): {{.*}}the host interleaves", block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x12x7x7xf32>) -> tensor<1x3x12x12xf32>

// ZERO:       %[[S:.*]] = nn.zero_insert %x {onnx_node = "up.zero_insert", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x16x8x8xf32>) -> tensor<1x16x15x15xf32>
// ZERO:       %[[C:.*]] = nn.conv2d %[[S]], %{{.*}}, %b {{{.*}}pads = array<i64: 0, 0, 0, 0>{{.*}}} : (tensor<1x16x15x15xf32>, tensor<3x16x4x4xf32>, tensor<3xf32>) -> tensor<1x3x12x12xf32>
// ZERO-NEXT:  nn.relu %[[C]]

// BAD: conv-transpose-to-conv: method 'fft' is not auto, cu-stride, sub-pixel, phases or zero-insertion
