// RUN: snow-opt %s -p resize-to-conv-transpose | filecheck %s
// RUN: snow-opt %s -p nn-prepare | filecheck %s --check-prefix=PREP

// A YOLO neck's Resize nearest x2 (scales [1, 1, 2, 2], asymmetric / floor): a depthwise
// ConvTranspose with an all-ones 2x2 kernel, stride 2; nn-prepare makes it four identity phase
// convs writing the interleave in place. A linear Resize stays on the host with its reason.

func.func @main(%x: tensor<1x16x4x4xf32>) -> (tensor<1x16x8x8xf32>, tensor<1x16x8x8xf32>) {
  %s = nn.constant dense<[1.0, 1.0, 2.0, 2.0]> : tensor<4xf32>
  %u = nn.host "Resize"(%x, %s) {onnx_node = "up", attrs = {mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"}, opset = 13 : i64, slots = array<i64: 0, 2>, n_slots = 3 : i64} : (tensor<1x16x4x4xf32>, tensor<4xf32>) -> tensor<1x16x8x8xf32>
  %l = nn.host "Resize"(%x, %s) {attrs = {mode = "linear"}, opset = 13 : i64, slots = array<i64: 0, 2>, n_slots = 3 : i64} : (tensor<1x16x4x4xf32>, tensor<4xf32>) -> tensor<1x16x8x8xf32>
  func.return %u, %l : tensor<1x16x8x8xf32>, tensor<1x16x8x8xf32>
}

// CHECK:      %[[W:.*]] = nn.constant dense_resource<w_upsample{{.*}}> : tensor<16x1x2x2xf32>
// CHECK:      nn.conv_transpose2d %x, %[[W]], %{{.*}} {onnx_node = "up", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>{{.*}}groups = 16 : i64} : {{.*}} -> tensor<1x16x8x8xf32>
// CHECK:      nn.host "Resize"{{.*}}host_reason = "Resize mode linear: interpolation weights that vary by pixel (not a copy), on the host"

// PREP-COUNT-4: nn.conv2d %x, {{.*}}place = "snowflake"{{.*}} -> tensor<1x16x4x4x!nn.fixed<8, 8>>
// PREP:       nn.depth_to_space {{.*}}place = "snowflake"{{.*}} -> tensor<1x16x8x8x!nn.fixed<8, 8>>
// PREP:       nn.host "Resize"{{.*}}place = "host"
