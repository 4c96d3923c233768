// RUN: snow-opt %s -p fold-channel-shuffle | filecheck %s

// A channel shuffle (Reshape [N, g, C/g, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape [N, C, H, W],
// here g = 2) is a permutation of channels: y[:, c'] = x[:, perm[c']].
// @producer: its producer conv's kernels and bias take it (C = 4: perm [0, 2, 1, 3]), the
// shuffle's ops vanish and the conv's output is what the shuffle's readers see.
// @consumer: the model input has no kernels; the consuming conv reads the input with its weights'
// channels permuted (C = 6: perm [0, 3, 1, 4, 2, 5], the weights taken at [0, 2, 4, 1, 3, 5]).
// @neither: no conv on either side: the shuffle stays, its transpose saying why.

func.func @producer(%x: tensor<1x1x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %w = nn.constant dense<[[[[1.0]]], [[[2.0]]], [[[3.0]]], [[[4.0]]]]> : tensor<4x1x1x1xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %p = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x1x4x4xf32>, tensor<4x1x1x1xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  %r = nn.reshape %p : (tensor<1x4x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %t = nn.transpose %r {perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x2x2x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %y = nn.reshape %t : (tensor<1x2x2x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @producer
// CHECK-NEXT:  %[[W:.*]] = nn.constant dense_resource<[[WP:.*]]> : tensor<4x1x1x1xf32>
// CHECK-NEXT:  %[[B:.*]] = nn.constant dense_resource<[[BP:.*]]> : tensor<4xf32>
// CHECK-NEXT:  %p = nn.conv2d %x, %[[W]], %[[B]] {{{.*}}relu}
// CHECK-NOT:   nn.transpose
// CHECK-NEXT:  func.return %p

func.func @consumer(%x: tensor<1x6x2x2xf32>) -> tensor<1x1x2x2xf32> {
  %r = nn.reshape %x : (tensor<1x6x2x2xf32>) -> tensor<1x2x3x2x2xf32>
  %t = nn.transpose %r {perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x2x3x2x2xf32>) -> tensor<1x3x2x2x2xf32>
  %y = nn.reshape %t : (tensor<1x3x2x2x2xf32>) -> tensor<1x6x2x2xf32>
  %w = nn.constant dense<[[[[1.0]], [[2.0]], [[3.0]], [[4.0]], [[5.0]], [[6.0]]]]> : tensor<1x6x1x1xf32>
  %b = nn.constant dense<0.0> : tensor<1xf32>
  %c = nn.conv2d %y, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x6x2x2xf32>, tensor<1x6x1x1xf32>, tensor<1xf32>) -> tensor<1x1x2x2xf32>
  func.return %c : tensor<1x1x2x2xf32>
}

// CHECK-LABEL: func.func @consumer
// CHECK-NOT:   nn.transpose
// CHECK:       %[[CW:.*]] = nn.constant dense_resource<[[CWP:.*]]> : tensor<1x6x1x1xf32>
// CHECK-NEXT:  %c = nn.conv2d %x, %[[CW]], %b
// CHECK-NEXT:  func.return %c

func.func @neither(%x: tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
  %r = nn.reshape %x : (tensor<1x4x2x2xf32>) -> tensor<1x2x2x2x2xf32>
  %t = nn.transpose %r {perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x2x2x2x2xf32>) -> tensor<1x2x2x2x2xf32>
  %y = nn.reshape %t : (tensor<1x2x2x2x2xf32>) -> tensor<1x4x2x2xf32>
  %z = nn.relu %y : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  func.return %z : tensor<1x4x2x2xf32>
}

// CHECK-LABEL: func.func @neither
// CHECK:       nn.transpose %r {host_reason = "channel shuffle left for the host: its producer is the model input, not a conv; it is read by nn.relu, not a conv whose input channels can be permuted"
// CHECK-NEXT:  %y = nn.reshape %t

// @concat: ShuffleNetV2's Concat(identity half, branch) -> shuffle -> a relu (no conv to take it): one 1x1
// conv per concat input writes its channels to their shuffled places (y = [a0, b0, a1, b1]), the second
// adding the first through its bypass; the concat and the shuffle vanish.

func.func @concat(%x: tensor<1x4x24x24xf32>) -> tensor<1x4x24x24xf32> {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.0> : tensor<2xf32>
  %a = nn.channel_slice %x {start = 0 : i64, size = 2 : i64} : (tensor<1x4x24x24xf32>) -> tensor<1x2x24x24xf32>
  %h = nn.channel_slice %x {start = 2 : i64, size = 2 : i64} : (tensor<1x4x24x24xf32>) -> tensor<1x2x24x24xf32>
  %br = nn.conv2d %h, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x24x24xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x24x24xf32>
  %cat = nn.concat %a, %br {axis = 1 : i64} : (tensor<1x2x24x24xf32>, tensor<1x2x24x24xf32>) -> tensor<1x4x24x24xf32>
  %r = nn.reshape %cat : (tensor<1x4x24x24xf32>) -> tensor<1x2x2x24x24xf32>
  %t = nn.transpose %r {onnx_node = "shuffle", perm = array<i64: 0, 2, 1, 3, 4>} : (tensor<1x2x2x24x24xf32>) -> tensor<1x2x2x24x24xf32>
  %y = nn.reshape %t : (tensor<1x2x2x24x24xf32>) -> tensor<1x4x24x24xf32>
  %z = nn.relu %y : (tensor<1x4x24x24xf32>) -> tensor<1x4x24x24xf32>
  func.return %z : tensor<1x4x24x24xf32>
}

// CHECK-LABEL: func.func @concat
// CHECK-NOT:   nn.concat
// CHECK:       %[[P0:.*]] = nn.conv2d %a, %{{.*}}, %{{.*}} {onnx_node = "shuffle.part0", placement_cost = "device {{.*}}"
// CHECK:       %y = nn.conv2d %br, %{{.*}}, %{{.*}} bypass %[[P0]] {onnx_node = "shuffle.part1"
// CHECK-NOT:   nn.transpose
// CHECK:       nn.relu %y

// The float32 blobs (after the 4-byte alignment word): kernels and biases 1, 3, 2, 4 (perm [0, 2, 1, 3]);
// the consumer's channels 1, 3, 5, 2, 4, 6.
// CHECK-LABEL: dialect_resources
// CHECK-DAG:   [[WP]]: "0x080000000000803f000040400000004000008040"
// CHECK-DAG:   [[BP]]: "0x080000000000803f000040400000004000008040"
// CHECK-DAG:   [[CWP]]: "0x080000000000803f000040400000a04000000040000080400000c040"
