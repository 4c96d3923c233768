// RUN: snow-opt %s -p add-to-bypass | filecheck %s
// RUN: snow-opt %s -p 'add-to-bypass{enable=false}' | filecheck %s --check-prefix=OFF

// An add of two host results (the Mul of a SiLU) runs as a 1x1 identity conv with bypass where
// the device, with the host's DRAM round trip, is estimated faster; a tiny one stays, saying why.
// A placed add is left alone.

func.func @main(%x: tensor<1x32x32x32xf32>, %y: tensor<1x32x32x32xf32>, %s: tensor<1x16x2x2xf32>, %t: tensor<1x16x2x2xf32>) -> (tensor<1x32x32x32xf32>, tensor<1x16x2x2xf32>, tensor<1x32x32x32xf32>) {
  %a = nn.mul %x, %x : (tensor<1x32x32x32xf32>, tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  %b = nn.mul %y, %y : (tensor<1x32x32x32xf32>, tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  %sum = nn.add %a, %b {onnx_node = "sum"} : (tensor<1x32x32x32xf32>, tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  %tiny = nn.add %s, %t {onnx_node = "tiny"} : (tensor<1x16x2x2xf32>, tensor<1x16x2x2xf32>) -> tensor<1x16x2x2xf32>
  %kept = nn.add %a, %b {onnx_node = "kept", place = "host"} : (tensor<1x32x32x32xf32>, tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
  func.return %sum, %tiny, %kept : tensor<1x32x32x32xf32>, tensor<1x16x2x2xf32>, tensor<1x32x32x32xf32>
}

// CHECK:      nn.conv2d %a, %{{.*}}, %{{.*}} bypass %b {onnx_node = "sum", block_diagonal, from_add, placement_cost = "device {{.*}} ms + DRAM round trip {{.*}} ms vs host {{.*}} ms"{{.*}}} : (tensor<1x32x32x32xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>, tensor<1x32x32x32xf32>) -> tensor<1x32x32x32xf32>
// CHECK:      nn.add %s, %t {onnx_node = "tiny", placement_cost = "device {{.*}} vs host {{.*}}"}
// CHECK:      nn.add %a, %b {onnx_node = "kept", place = "host"}
// OFF-NOT: nn.conv2d
