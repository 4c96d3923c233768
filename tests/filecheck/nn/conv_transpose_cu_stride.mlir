// RUN: snow-opt %s -p conv-transpose-to-conv | filecheck %s
// RUN: snow-opt %s -p nn-prepare | filecheck %s --check-prefix=PREP
// RUN: snow-opt %s -p nn-prepare,nn-to-tile | filecheck %s --check-prefix=TILE
// RUN: snow-opt %s -p nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'conv-transpose-to-conv{method=sub-pixel},nn-prepare' | filecheck %s --check-prefix=HOST

// A segmentation head's last layer, small (PP-OCRv4 det's, 24 -> 1 at 4x6): ConvTranspose 2x2
// stride 2, and beside it the same with 3 output channels. Sub-pixel makes each one merged 1x1
// conv over the 4 phases (a, b) x M channels; its write-back writes a pixel's phases together.
// Method cu-stride (the cheapest: the merged conv's device time, no host words) writes them in
// place instead: phase row a's sx*M = 2 kernels on CU a's vMACs 0-1 (weights loaded to vMACs 0,
// 1, 4, 5), `vmov stride` one result row (12 pixels x 1 channel x 2 bytes = 24), the write-back
// mask those vMACs (0x33 = 51), the conv's pixels 2 words and its rows 2 result rows apart:
// the output region records the placement as phases = [sy, sx, height, width], and
// partition-host puts the interleave on the device (no host copy); sub-pixel costs as much here,
// its interleave no host words (only the host reads the result: `host-read`), and the tie goes to
// cu-stride. With M = 3 a phase row's 6 channels exceed a CU's 4 vMACs: cu-stride is refused in
// the conv's `conv_transpose`, and the merged conv (no host words: the host reads its interleave
// as it copies the result back) beats the phases method (one conv per phase, in place). With a
// device reader the interleave is priced as a host copy again. Method sub-pixel, asked for, leaves the
// interleave to the host, which applies it as it reads the merged conv's grid back (the result is
// the model's output: `host-read`, no host layer; docs/lowering.md "The host reads the interleave").

func.func @main(%x: tensor<1x24x4x6xf32>) -> (tensor<1x1x8x12xf32>, tensor<1x3x8x12xf32>) {
  %w = nn.constant dense<0.01> : tensor<24x1x2x2xf32>
  %b = nn.constant dense<0.1> : tensor<1xf32>
  %y = nn.conv_transpose2d %x, %w, %b {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x24x4x6xf32>, tensor<24x1x2x2xf32>, tensor<1xf32>) -> tensor<1x1x8x12xf32>
  %w3 = nn.constant dense<0.02> : tensor<24x3x2x2xf32>
  %b3 = nn.constant dense<0.1> : tensor<3xf32>
  %y3 = nn.conv_transpose2d %x, %w3, %b3 {onnx_node = "up3", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x24x4x6xf32>, tensor<24x3x2x2xf32>, tensor<3xf32>) -> tensor<1x3x8x12xf32>
  func.return %y, %y3 : tensor<1x1x8x12xf32>, tensor<1x3x8x12xf32>
}

// CHECK:      %[[C:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {onnx_node = "up", conv_transpose = "cu-stride {{[0-9.]+}} ms (2304 MACs, host 0 words), sub-pixel {{[0-9.]+}} ms (2304 MACs, host 0 words), phases {{.*}}"{{.*}} -> tensor<1x4x4x6xf32>
// CHECK-NEXT: nn.depth_to_space %[[C]] {onnx_node = "up.interleave", block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : (tensor<1x4x4x6xf32>) -> tensor<1x1x8x12xf32>
// CHECK:      %[[C3:.*]] = nn.conv2d %x, {{.*}}onnx_node = "up3", conv_transpose = "sub-pixel {{.*}} (6912 MACs, host 0 words), phases {{.*}}; cu-stride: a phase row's 2x3 channels exceed a CU's 4 vMACs"{{.*}} -> tensor<1x12x4x6xf32>
// CHECK-NEXT: nn.depth_to_space %[[C3]] {onnx_node = "up3.interleave", place = "host-read", {{.*}} -> tensor<1x3x8x12xf32>
// CHECK-NOT:  nn.conv_transpose2d

// PREP:       nn.depth_to_space %{{.*}} {onnx_node = "up.interleave", place = "snowflake"{{.*}} -> tensor<1x1x8x12x!nn.fixed<8, 8>>
// PREP:       nn.depth_to_space {{.*}}onnx_node = "up3.interleave", place = "host-read"{{.*}} -> tensor<1x3x8x12x!nn.fixed<8, 8>>

// TILE:       tile.layer @up conv {{.*}}shape = #tile.conv_shape<c = 24, h = 4, w = 6, k = 4, kh = 1, kw = 1,
// TILE:       tile.dram_region @up.output {{{.*}}label = "output", phases = array<i64: 2, 2, 8, 12>}
// TILE-NEXT:  tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 1 : i64
// TILE-NEXT:  tile.load {buffer = #tile<buffer weights>, {{.*}}select = 0 : i64
// TILE-NEXT:  tile.load {buffer = #tile<buffer weights>, {{.*}}select = 1 : i64
// TILE-NEXT:  tile.load {buffer = #tile<buffer weights>, {{.*}}select = 4 : i64
// TILE-NEXT:  tile.load {buffer = #tile<buffer weights>, {{.*}}select = 5 : i64
// TILE-NEXT:  }
// TILE:       tile.window {{{.*}}repeat_x = 6 : i64, repeat_y = 4 : i64

// ASM:        snowflake_asm.image @up
// ASM:        snowflake_asm.movi r16, 24
// ASM-NEXT:   snowflake_asm.vmov coop stride r16
// ASM:        snowflake_asm.ld weights r16, r19, r18 unit 0 to 0
// ASM:        snowflake_asm.ld weights r16, r19, r18 unit 0 to 1
// ASM:        snowflake_asm.ld weights r16, r19, r18 unit 0 to 4
// ASM:        snowflake_asm.ld weights r16, r19, r18 unit 0 to 5
// ASM-NOT:    snowflake_asm.ld weights
// ASM:        snowflake_asm.movi r16, 51
// ASM-NEXT:   snowflake_asm.vmov coop mask r16
// ASM:        snowflake_asm.image @up3

// HOST:       nn.depth_to_space {{.*}}onnx_node = "up.interleave", {{.*}}place = "host-read"{{.*}} -> tensor<1x1x8x12x!nn.fixed<8, 8>>
