// RUN: snow-opt %s -p split-kernels | filecheck %s
// RUN: snow-opt %s -p split-kernels | snow-opt --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p 'split-kernels{max-words=1200}' | filecheck %s --check-prefix=THREE
// RUN: snow-opt %s -p 'split-kernels{by-cost=false}' | filecheck %s --check-prefix=TWO

// A 3x3 conv over 512 channels (4624 weight words with the bias block) does not fit a
// vMAC's 4096-word weights buffer: it becomes convs over channel slices chained through the
// bypass operand; bias and residual on the first part, ReLU on the last. Two parts of 256 are the
// fewest (their 2320-word kernels stagger in the buffer); by cost, three parts of 176 / 176 / 160,
// whose kernels fit a weights slot and double-buffer.

func.func @main(%x: tensor<1x512x4x4xf32>, %r: tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32> {
  %w = nn.constant dense<0.01> : tensor<32x512x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %y = nn.conv2d %x, %w, %b bypass %r {onnx_node = "c", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x512x4x4xf32>, tensor<32x512x3x3xf32>, tensor<32xf32>, tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
  func.return %y : tensor<1x32x4x4xf32>
}

// CHECK:      %[[S0:.*]] = nn.channel_slice %x {start = 0 : i64, size = 176 : i64} : (tensor<1x512x4x4xf32>) -> tensor<1x176x4x4xf32>
// CHECK:      %[[P0:.*]] = nn.conv2d %[[S0]], %{{.*}}, %{{.*}} bypass %r {onnx_node = "c.part0", {{.*}}} : (tensor<1x176x4x4xf32>, tensor<32x176x3x3xf32>, tensor<32xf32>, tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
// CHECK:      %[[S1:.*]] = nn.channel_slice %x {start = 176 : i64, size = 176 : i64}
// CHECK:      %[[P1:.*]] = nn.conv2d %[[S1]], %{{.*}}, %{{.*}} bypass %[[P0]] {onnx_node = "c.part1", {{.*}}}
// CHECK:      %[[S2:.*]] = nn.channel_slice %x {start = 352 : i64, size = 160 : i64}
// CHECK:      %[[P2:.*]] = nn.conv2d %[[S2]], %{{.*}}, %{{.*}} bypass %[[P1]] {onnx_node = "c.part2", {{.*}}relu}
// CHECK:      func.return %[[P2]]

// TWO:        %[[S0:.*]] = nn.channel_slice %x {start = 0 : i64, size = 256 : i64} : (tensor<1x512x4x4xf32>) -> tensor<1x256x4x4xf32>
// TWO:        %[[P0:.*]] = nn.conv2d %[[S0]], %{{.*}}, %{{.*}} bypass %r {onnx_node = "c.part0", {{.*}}} : (tensor<1x256x4x4xf32>, tensor<32x256x3x3xf32>, tensor<32xf32>, tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
// TWO:        %[[S1:.*]] = nn.channel_slice %x {start = 256 : i64, size = 256 : i64}
// TWO:        %[[P1:.*]] = nn.conv2d %[[S1]], %{{.*}}, %{{.*}} bypass %[[P0]] {onnx_node = "c.part1", {{.*}}relu}
// TWO:        func.return %[[P1]]

// THREE-COUNT-3: nn.channel_slice
