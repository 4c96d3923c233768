// RUN: not snow-opt %s -p partition-host 2>&1 | filecheck %s

// A place written in the IR is honoured or refused: an element-wise product of two run-time
// tensors has no device mapping.

func.func @main(%x: tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32> {
  %a = nn.mul %x, %x {onnx_node = "sq", place = "snowflake"} : (tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>) -> tensor<1x16x4x4xf32>
  func.return %a : tensor<1x16x4x4xf32>
}

// CHECK: partition-host: nn.mul sq is placed on snowflake in the IR, but cannot run there: no device mapping
