// RUN: snow-opt %s -p se-gate | filecheck %s
// RUN: snow-opt %s -p 'se-gate{enable=false}' | filecheck %s --check-prefix=OFF

// An SE block's gate multiply, Mul(x, sigmoid(...)) by a [1, C, 1, 1] gate the host computes,
// becomes a 1x1 depthwise conv whose kernels are the gate (reshaped to [C, 1, 1, 1], run-time
// kernels the host writes into the weights region), in 16-lane groups. A gate a device conv
// writes (with the activation unit, its sigmoid in the write-back) goes the same way, its kernels'
// reshape placed on the host (the segment ends after the gate, the host writes its C words); a
// placed Mul is left alone.

func.func @main(%x: tensor<1x32x16x16xf32>, %g: tensor<1x32x1x1xf32>, %w: tensor<32x32x1x1xf32>, %b: tensor<32xf32>) -> (tensor<1x32x16x16xf32>, tensor<1x32x16x16xf32>, tensor<1x32x16x16xf32>) {
  %gate = nn.host "Sigmoid"(%g) {attrs = {}, opset = 13 : i64} : (tensor<1x32x1x1xf32>) -> tensor<1x32x1x1xf32>
  %scaled = nn.mul %x, %gate {onnx_node = "scale"} : (tensor<1x32x16x16xf32>, tensor<1x32x1x1xf32>) -> tensor<1x32x16x16xf32>
  %c = nn.conv2d %g, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x1x1xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x1x1xf32>
  %direct = nn.mul %x, %c {onnx_node = "direct"} : (tensor<1x32x16x16xf32>, tensor<1x32x1x1xf32>) -> tensor<1x32x16x16xf32>
  %kept = nn.mul %x, %gate {onnx_node = "kept", place = "host"} : (tensor<1x32x16x16xf32>, tensor<1x32x1x1xf32>) -> tensor<1x32x16x16xf32>
  func.return %scaled, %direct, %kept : tensor<1x32x16x16xf32>, tensor<1x32x16x16xf32>, tensor<1x32x16x16xf32>
}

// CHECK:      %[[K:.*]] = nn.reshape %gate {onnx_node = "scale.kernels"} : (tensor<1x32x1x1xf32>) -> tensor<32x1x1x1xf32>
// CHECK:      nn.conv2d %x, %[[K]], %{{.*}} {onnx_node = "scale", lane_groups, runtime_kernels, placement_cost = "device {{.*}} ms + gate written {{.*}} ms vs host {{.*}} ms + DRAM round trip {{.*}} ms"{{.*}}groups = 32 : i64} : (tensor<1x32x16x16xf32>, tensor<32x1x1x1xf32>, tensor<32xf32>) -> tensor<1x32x16x16xf32>
// CHECK:      %[[D:.*]] = nn.reshape %c {onnx_node = "direct.kernels", place = "host", host_reason = "the host writes a gate a device layer computed as the gate conv's kernels (C words), between segments"}
// CHECK:      %direct = nn.conv2d %x, %[[D]], %{{.*}} {onnx_node = "direct", lane_groups, runtime_kernels
// CHECK:      nn.mul %x, %gate {onnx_node = "kept", place = "host"}
// OFF-NOT: nn.conv2d %x

// A gate conv's result that add-to-bypass added to another tensor (an identity conv over it with
// the other as its bypass, `from_add`) takes that tensor as its own bypass: the identity conv goes.

func.func @residual(%x: tensor<1x32x16x16xf32>, %g: tensor<1x32x1x1xf32>, %r: tensor<1x32x16x16xf32>, %i: tensor<32x32x1x1xf32>, %z: tensor<32xf32>) -> tensor<1x32x16x16xf32> {
  %gate = nn.host "Sigmoid"(%g) {attrs = {}, opset = 13 : i64} : (tensor<1x32x1x1xf32>) -> tensor<1x32x1x1xf32>
  %scaled = nn.mul %x, %gate {onnx_node = "scale"} : (tensor<1x32x16x16xf32>, tensor<1x32x1x1xf32>) -> tensor<1x32x16x16xf32>
  %sum = nn.conv2d %scaled, %i, %z bypass %r {onnx_node = "add", block_diagonal, from_add, placement_cost = "device 0.01 ms vs host 0.1 ms", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x16x16xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>, tensor<1x32x16x16xf32>) -> tensor<1x32x16x16xf32>
  func.return %sum : tensor<1x32x16x16xf32>
}

// CHECK-LABEL: func.func @residual
// CHECK:       %[[K:.*]] = nn.reshape %gate {onnx_node = "scale.kernels"}
// CHECK-NOT:   from_add
// CHECK:       %sum = nn.conv2d %x, %[[K]], %{{.*}} bypass %r {onnx_node = "scale", lane_groups, runtime_kernels, placement_cost = "device {{.*}}; the add (device 0.01 ms vs host 0.1 ms) as its bypass"{{.*}}groups = 32 : i64}
// CHECK-NOT:   from_add
