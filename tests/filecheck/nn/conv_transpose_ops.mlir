// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s -p conv-transpose-to-conv | snow-opt | filecheck %s --check-prefix=LOWERED

// The transposed-conv ops round-trip in custom and generic form: nn.conv_transpose2d with a
// negative end pad (the output grown past the scatter), and the layouts conv-transpose-to-conv
// leaves on the host, nn.depth_to_space (one and several inputs) and nn.zero_insert.

func.func @ops(%x: tensor<1x4x5x5xf32>, %p: tensor<1x12x5x5xf32>, %a: tensor<1x3x5x5xf32>) -> (tensor<1x3x12x10xf32>, tensor<1x3x9x10xf32>, tensor<1x3x10x10xf32>, tensor<1x4x14x16xf32>) {
  %w = nn.constant dense<1.000000e-01> : tensor<4x3x3x3xf32>
  %b = nn.constant dense<0.000000e+00> : tensor<3xf32>
  %t = nn.conv_transpose2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, -1, 0>, output_padding = array<i64: 1, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x5x5xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x3x12x10xf32>
  %d = nn.depth_to_space %p {block = array<i64: 2, 2>, offsets = array<i64: 1, 0>, groups = 1 : i64} : (tensor<1x12x5x5xf32>) -> tensor<1x3x9x10xf32>
  %e = nn.depth_to_space %a, %a, %a, %a {block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : (tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>) -> tensor<1x3x10x10xf32>
  %z = nn.zero_insert %x {strides = array<i64: 2, 3>, pads = array<i64: 2, 2, 3, 1>} : (tensor<1x4x5x5xf32>) -> tensor<1x4x14x16xf32>
  func.return %t, %d, %e, %z : tensor<1x3x12x10xf32>, tensor<1x3x9x10xf32>, tensor<1x3x10x10xf32>, tensor<1x4x14x16xf32>
}

// CHECK:      %t = nn.conv_transpose2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, -1, 0>, output_padding = array<i64: 1, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x5x5xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x3x12x10xf32>
// CHECK-NEXT: %d = nn.depth_to_space %p {block = array<i64: 2, 2>, offsets = array<i64: 1, 0>, groups = 1 : i64} : (tensor<1x12x5x5xf32>) -> tensor<1x3x9x10xf32>
// CHECK-NEXT: %e = nn.depth_to_space %a, %a, %a, %a {block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64}
// CHECK-NEXT: %z = nn.zero_insert %x {strides = array<i64: 2, 3>, pads = array<i64: 2, 2, 3, 1>} : (tensor<1x4x5x5xf32>) -> tensor<1x4x14x16xf32>

// LOWERED-NOT: nn.conv_transpose2d
// LOWERED:     nn.conv2d {{.*}} -> tensor<1x3x{{[0-9]+}}x{{[0-9]+}}xf32>
// LOWERED:     func.return
