// RUN: snow-opt %s -p copy-concat-slices | filecheck %s

// ShuffleNetV2's last unit of a stage: Concat(identity half of the input, branch). The identity
// half is a channel slice, a view of %x's words that no layer writes into the concat's tensor,
// so it is copied by an identity 1x1 conv (one-hot kernels, exact) that the concat places; the
// branch conv writes its own slice as before.

func.func @unit(%x: tensor<1x32x12x12xf32>) -> tensor<1x32x12x12xf32> {
  %w = nn.constant dense<0.1> : tensor<16x16x1x1xf32>
  %b = nn.constant dense<0.0> : tensor<16xf32>
  %a = nn.channel_slice %x {start = 0 : i64, size = 16 : i64} : (tensor<1x32x12x12xf32>) -> tensor<1x16x12x12xf32>
  %h = nn.channel_slice %x {start = 16 : i64, size = 16 : i64} : (tensor<1x32x12x12xf32>) -> tensor<1x16x12x12xf32>
  %br = nn.conv2d %h, %w, %b {onnx_node = "branch", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x12x12xf32>, tensor<16x16x1x1xf32>, tensor<16xf32>) -> tensor<1x16x12x12xf32>
  %cat = nn.concat %a, %br {onnx_node = "cat", axis = 1 : i64} : (tensor<1x16x12x12xf32>, tensor<1x16x12x12xf32>) -> tensor<1x32x12x12xf32>
  func.return %cat : tensor<1x32x12x12xf32>
}

// CHECK-LABEL: func.func @unit
// CHECK:       %[[COPY:.*]] = nn.conv2d %a, %{{.*}}, %{{.*}} {block_diagonal, placement_cost = "device {{.*}} ms vs host {{.*}} ms (the concat and its DRAM round trip)", onnx_node = "cat.copy0"
// CHECK:       %cat = nn.concat %[[COPY]], %br

// A Split's two halves concatenated again cover their tensor: that tensor is placed whole (YOLOv8's
// C2f), nothing is copied.

func.func @c2f(%x: tensor<1x32x12x12xf32>) -> tensor<1x32x12x12xf32> {
  %a = nn.channel_slice %x {start = 0 : i64, size = 16 : i64} : (tensor<1x32x12x12xf32>) -> tensor<1x16x12x12xf32>
  %h = nn.channel_slice %x {start = 16 : i64, size = 16 : i64} : (tensor<1x32x12x12xf32>) -> tensor<1x16x12x12xf32>
  %cat = nn.concat %a, %h {axis = 1 : i64} : (tensor<1x16x12x12xf32>, tensor<1x16x12x12xf32>) -> tensor<1x32x12x12xf32>
  func.return %cat : tensor<1x32x12x12xf32>
}

// CHECK-LABEL: func.func @c2f
// CHECK-NOT:   nn.conv2d
// CHECK:       %cat = nn.concat %a, %h
