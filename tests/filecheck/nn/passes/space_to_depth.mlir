// RUN: snow-opt %s -p space-to-depth | filecheck %s
// RUN: snow-opt %s -p space-to-depth | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p 'space-to-depth,partition-host,quantize' | filecheck %s --check-prefix=PREP
// RUN: not snow-opt %s -p 'space-to-depth,partition-host,quantize,nn-to-tile{mode=INDP}' 2>&1 | filecheck %s --check-prefix=NOINDP

// AlexNet's conv1: 11x11 stride 4 over 3 channels. 16 interleaved kernels need 5824 words, too
// many for INDP, and a COOP trace of 33 words leaves lanes idle: the input's 4x4 pixel blocks
// become 48 channels and the conv a 3x3 stride-1 conv over them (zero taps past 11x11).
// The 3x3/2 conv reads a conv output, not the model input: left alone. (nn-prepare runs
// unfold-rows first, which does better on this conv: one 363-word trace a pixel, see unfold_rows.mlir.)

func.func @main(%x: tensor<1x3x35x35xf32>) -> tensor<1x16x3x3xf32> {
  %w = nn.constant dense<0.01> : tensor<64x3x11x11xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "conv1", strides = array<i64: 4, 4>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x35x35xf32>, tensor<64x3x11x11xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  %w2 = nn.constant dense<0.01> : tensor<16x64x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<16xf32>
  %z = nn.conv2d %y, %w2, %b2 {onnx_node = "conv2", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x64x8x8xf32>, tensor<16x64x3x3xf32>, tensor<16xf32>) -> tensor<1x16x3x3xf32>
  func.return %z : tensor<1x16x3x3xf32>
}

// CHECK:      %[[X:.*]] = nn.space_to_depth %x {onnx_node = "conv1.space_to_depth", block = 4 : i64, pads = array<i64: 2, 2>} : (tensor<1x3x35x35xf32>) -> tensor<1x48x10x10xf32>
// CHECK:      %[[W:.*]] = nn.constant {{.*}} : tensor<64x48x3x3xf32>
// CHECK:      nn.conv2d %[[X]], %[[W]], %{{.*}} {{{.*}}strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>{{.*}}} : {{.*}} -> tensor<1x64x8x8xf32>
// CHECK:      nn.conv2d {{.*}}strides = array<i64: 2, 2>

// PREP:       nn.space_to_depth %x {{{.*}}place = "host"{{.*}}} : (tensor<1x3x35x35x!nn.fixed<8, 8>>) -> tensor<1x48x10x10x!nn.fixed<8, 8>>

// NOINDP: nn-to-tile: layer 'conv1' (nn.conv2d): INDP needs 16 interleaved kernels within the weights buffer (6928 words > 4096)
