// RUN: snow-opt %s -p fuse-relu | filecheck %s

// ReLU folds into the write-back of the producing conv / dense / add, unless the
// producer has another user or already has a ReLU.

func.func @main(%x: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %w = nn.constant dense<0.5> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %r = nn.relu %c : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %a = nn.add %r, %x : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %r2 = nn.relu %a : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %r3 = nn.relu %x : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %r2, %r3, %a : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK:      %c = nn.conv2d %x, %w, %b {{{.*}}relu}
// CHECK-NEXT: %a = nn.add %c, %x : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT: %r2 = nn.relu %a
// CHECK-NEXT: %r3 = nn.relu %x

// ShuffleNet's stride-2 unit: ReLU(Concat(avg pool, branch conv)). The conv takes the ReLU at its
// write-back; the pool's channels get a ReLU of their own (the host's, over 2 of the 4 channels).

func.func @concat(%x: tensor<1x2x8x8xf32>) -> tensor<1x4x4x4xf32> {
  %w = nn.constant dense<0.5> : tensor<2x2x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %p = nn.avg_pool %x {onnx_node = "pool", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x8x8xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %cat = nn.concat %p, %c {axis = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
  %r = nn.relu %cat {onnx_node = "unit_relu"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %r : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @concat
// CHECK:       %c = nn.conv2d %x, %w, %b {{{.*}}relu}
// CHECK-NEXT:  %[[R:.*]] = nn.relu %p {onnx_node = "unit_relu.0"}
// CHECK-NEXT:  %cat = nn.concat %[[R]], %c
// CHECK-NEXT:  func.return %cat

// The same unit after a ReLU unit (ShuffleNet's next stride-2 unit): the pool averages
// non-negative values, so its ReLU goes; a max pool, a reshape of them too. A ReLU of the
// model input stays.

func.func @nonnegative(%x: tensor<1x2x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x32xf32>) {
  %w = nn.constant dense<0.5> : tensor<2x2x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %u = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x2x8x8xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x8x8xf32>
  %p = nn.avg_pool %u {onnx_node = "pool", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.conv2d %u, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x8x8xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %cat = nn.concat %p, %c {axis = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
  %r = nn.relu %cat {onnx_node = "unit_relu"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %m = nn.max_pool %u {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32>
  %f = nn.reshape %m : (tensor<1x2x4x4xf32>) -> tensor<1x32xf32>
  %rf = nn.relu %f : (tensor<1x32xf32>) -> tensor<1x32xf32>
  %px = nn.avg_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32>
  %rx = nn.relu %px : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %r, %rx, %rf : tensor<1x4x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x32xf32>
}

// CHECK-LABEL: func.func @nonnegative
// CHECK:       %c = nn.conv2d %u, %w, %b {{{.*}}relu}
// CHECK-NEXT:  %cat = nn.concat %p, %c
// CHECK-NOT:   nn.relu %f
// CHECK:       %rx = nn.relu %px
// CHECK-NEXT:  func.return %cat, %rx, %f
