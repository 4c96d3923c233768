// RUN: snow-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The verifier rules of nn.conv_transpose2d, nn.depth_to_space and nn.zero_insert.

func.func @f(%x: tensor<1x4x5x5xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<3xf32>) {
  %t = nn.conv_transpose2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x5x5xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x3x10x10xf32>
  func.return
}
// CHECK: nn.conv_transpose2d: result shape 1x3x10x10 does not match the computed 1x3x11x11

// -----
func.func @f(%x: tensor<1x4x5x5xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<6xf32>) {
  %t = nn.conv_transpose2d %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 3 : i64} : (tensor<1x4x5x5xf32>, tensor<4x3x3x3xf32>, tensor<6xf32>) -> tensor<1x9x11x11xf32>
  func.return
}
// CHECK: nn.conv_transpose2d: weight has 4 input channels, input 4; groups 3 must divide them

// -----
func.func @f(%x: tensor<1x4x2x2xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<3xf32>) {
  %t = nn.conv_transpose2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>, output_padding = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x2x2xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x3x0x0xf32>
  func.return
}
// CHECK: nn.conv_transpose2d: pads crop the whole output

// -----
func.func @f(%p: tensor<1x12x5x5xf32>) {
  %d = nn.depth_to_space %p {block = array<i64: 2, 2>, offsets = array<i64: 2, 0>, groups = 1 : i64} : (tensor<1x12x5x5xf32>) -> tensor<1x3x9x10xf32>
  func.return
}
// CHECK: nn.depth_to_space: block must be 2 positive integers and offsets inside it, not [2, 2], [2, 0]

// -----
func.func @f(%p: tensor<1x12x5x5xf32>) {
  %d = nn.depth_to_space %p {block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : (tensor<1x12x5x5xf32>) -> tensor<1x4x10x10xf32>
  func.return
}
// CHECK: nn.depth_to_space: inputs must have 16 channels (4 in 1 groups, 2x2 phases; several inputs: one group), not 12

// -----
func.func @f(%p: tensor<1x12x5x5xf32>) {
  %d = nn.depth_to_space %p {block = array<i64: 2, 2>, offsets = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x12x5x5xf32>) -> tensor<1x3x10x10xf32>
  func.return
}
// CHECK: nn.depth_to_space: a 10x10 result reads past the input's 5x5 pixels

// -----
func.func @f(%x: tensor<1x4x5x5xf32>) {
  %z = nn.zero_insert %x {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x4x5x5xf32>) -> tensor<1x4x10x10xf32>
  func.return
}
// CHECK: nn.zero_insert: result shape 1x4x10x10 does not match the computed 1x4x9x9

// -----
func.func @f(%a: tensor<1x3x4x4xf32>) {
  %d = nn.depth_to_space %a, %a, %a, %a {block = array<i64: 2, 2>, offsets = array<i64: 0, 0>, groups = 1 : i64} : (tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<1x3x10x10xf32>
  func.return
}
// CHECK: nn.depth_to_space: phase 0 is read at 5x5 pixels, its input has 4x4
