// RUN: snow-opt %s -p drop-identity,partition-host | filecheck %s

func.func @main(%x: tensor<1x10xf32>) -> tensor<1x10xf32> {
  %d = nn.identity %x {kind = "dropout"} : (tensor<1x10xf32>) -> tensor<1x10xf32>
  %r = nn.relu %d : (tensor<1x10xf32>) -> tensor<1x10xf32>
  %s = nn.softmax %r {axis = 1 : i64} : (tensor<1x10xf32>) -> tensor<1x10xf32>
  func.return %s : tensor<1x10xf32>
}

// CHECK-NOT:  nn.identity
// CHECK:      %r = nn.relu %x {place = "host"}
// CHECK-NEXT: %s = nn.softmax %r {place = "host", axis = 1 : i64}
