// RUN: snow-opt %s -p sequence-gemm | filecheck %s
// RUN: snow-opt %s -p 'sequence-gemm{layout=column}' | filecheck %s --check-prefix=COLUMN
// RUN: snow-opt %s -p 'sequence-gemm{layout=off}' | filecheck %s --check-prefix=OFF
// RUN: not snow-opt %s -p 'sequence-gemm{layout=diagonal}' 2>&1 | filecheck %s --check-prefix=BAD

// A dense over 6 timesteps (not the image batch, which is 1) is one 1x1 conv over 6 pixels
// between transposes that move no byte; the planner's estimate picks the row form here.

func.func @main(%x: tensor<1x6x8xf32>) -> tensor<6x4xf32> {
  %w = nn.constant dense<0.5> : tensor<4x8xf32>
  %b = nn.constant dense<0.1> : tensor<4xf32>
  %r = nn.reshape %x : (tensor<1x6x8xf32>) -> tensor<6x8xf32>
  %d = nn.dense %r, %w, %b {onnx_node = "head"} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<6x4xf32>
  func.return %d : tensor<6x4xf32>
}

// CHECK-NOT:  nn.dense
// CHECK:      nn.reshape %r {onnx_node = "head.flat"} : (tensor<6x8xf32>) -> tensor<1x1x6x8xf32>
// CHECK-NEXT: nn.transpose %{{.*}} {onnx_node = "head.to_pixels", perm = array<i64: 0, 3, 1, 2>} : (tensor<1x1x6x8xf32>) -> tensor<1x8x1x6xf32>
// CHECK:      nn.conv2d %{{.*}}, %{{.*}}, %b {onnx_node = "head", from_dense, sequence_cost = "row {{.*}} ms, column {{.*}} ms, images {{.*}} ms"{{.*}}} : (tensor<1x8x1x6xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<1x4x1x6xf32>
// CHECK-NEXT: nn.transpose %{{.*}} {onnx_node = "head.from_pixels", perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x1x6xf32>) -> tensor<1x1x6x4xf32>
// CHECK-NEXT: nn.reshape %{{.*}} {onnx_node = "head.unflat"} : (tensor<1x1x6x4xf32>) -> tensor<6x4xf32>

// COLUMN: nn.conv2d {{.*}} : (tensor<1x8x6x1xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<1x4x6x1xf32>
// OFF: nn.dense
// BAD: sequence-gemm: layout must be one of auto, row, column, off, not 'diagonal'
