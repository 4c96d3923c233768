// RUN: snow-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per verifier rule of the nn dialect.

func.func @f(%x: tensor<4x!nn.fixed<8, 9>>) {

  func.return
}
// CHECK: nn.fixed<8, 9>: Snowflake data is 16-bit Qm.n with m + n = 16, m >= -8 (m < 1: small weights only)

// -----
"nn.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
// CHECK: nn.constant: value type and result type differ

// -----
func.func @f(%x: tensor<4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: input must have rank 4, got 3

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: weight must have rank 4, got 3

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: strides must be 2 positive integers

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: pads must be 4 non-negative integers (top, left, bottom, right)

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 0, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: dilations must be 2 positive integers

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 3 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: groups 3 must divide input channels 4 and output channels 8

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: weight has 2 channels per group, input has 4 channels in 1 groups

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<4xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: bias must have shape 8

// -----
func.func @f(%x: tensor<1x4x2x2xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x2x2xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: kernel larger than padded input

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
  func.return
}
// CHECK: nn.conv2d: result shape 1x8x8x8 does not match the computed 1x8x6x6

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>, %r: tensor<1x8x5x5xf32>) {
  %y = nn.conv2d %x, %w, %b bypass %r {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>, tensor<1x8x5x5xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: bypass must have the result's shape

// -----
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf64>, %b: tensor<8xf32>) {
  %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf64>, tensor<8xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: nn.conv2d: element types differ: weight f64, input f32

// -----
func.func @f(%x: tensor<4x8x8xf32>) {
  %y = nn.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<4x8x8xf32>) -> tensor<4x4x4xf32>
  func.return
}
// CHECK: nn.max_pool: input must have rank 4, got 3

// -----
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %y = nn.max_pool %x {kernel = array<i64: 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}
// CHECK: nn.max_pool: kernel must be 2 positive integers

// -----
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %y = nn.avg_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 2, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}
// CHECK: nn.avg_pool: padding must be smaller than the kernel

// -----
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %y = nn.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x3x3xf32>
  func.return
}
// CHECK: nn.max_pool: result shape 1x4x3x3 does not match the computed 1x4x4x4

// -----
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %y = nn.global_avg_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4xf32>
  func.return
}
// CHECK: nn.global_avg_pool: result shape 1x4 does not match the computed 1x4x1x1

// -----
func.func @f(%x: tensor<1x64xf32>, %w: tensor<10x32xf32>, %b: tensor<10xf32>) {
  %y = nn.dense %x, %w, %b : (tensor<1x64xf32>, tensor<10x32xf32>, tensor<10xf32>) -> tensor<1x10xf32>
  func.return
}
// CHECK: nn.dense: input has 64 features, weight expects 32

// -----
func.func @f(%x: tensor<1x64xf32>, %w: tensor<10x64xf32>, %b: tensor<9xf32>) {
  %y = nn.dense %x, %w, %b : (tensor<1x64xf32>, tensor<10x64xf32>, tensor<9xf32>) -> tensor<1x10xf32>
  func.return
}
// CHECK: nn.dense: bias must have shape 10

// -----
func.func @f(%x: tensor<1x4xf32>, %y: tensor<1x5xf32>) {
  %z = nn.add %x, %y : (tensor<1x4xf32>, tensor<1x5xf32>) -> tensor<1x5xf32>
  func.return
}
// CHECK: nn.add: shapes (1, 4) and (1, 5) do not broadcast

// -----
func.func @f(%x: tensor<1x4xf32>, %y: tensor<4xf32>) {
  %z = nn.mul %x, %y : (tensor<1x4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: nn.mul: result shape 4 does not match the computed 1x4

// -----
func.func @f(%x: tensor<1x4xf32>) {
  %y = nn.relu %x : (tensor<1x4xf32>) -> tensor<1x5xf32>
  func.return
}
// CHECK: nn.relu: result shape 1x5 does not match the computed 1x4

// -----
func.func @f(%x: tensor<1x4x2x2xf32>, %s: tensor<3xf32>) {
  %y = nn.batch_norm %x, %s, %s, %s, %s {epsilon = 1.0e-05 : f32} : (tensor<1x4x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x4x2x2xf32>
  func.return
}
// CHECK: nn.batch_norm: scale must have shape 4

// -----
"nn.concat"() <{axis = 0 : i64}> : () -> tensor<1xf32>
// CHECK: nn.concat: needs at least one input

// -----
func.func @f(%x: tensor<1x4xf32>) {
  %y = nn.concat %x, %x {axis = 2 : i64} : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x8xf32>
  func.return
}
// CHECK: nn.concat: axis 2 out of range for rank 2

// -----
func.func @f(%x: tensor<1x4xf32>, %z: tensor<2x4xf32>) {
  %y = nn.concat %x, %z {axis = 1 : i64} : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<1x8xf32>
  func.return
}
// CHECK: nn.concat: inputs must agree on every dimension but the axis

// -----
func.func @f(%x: tensor<1x4x2xf32>) {
  %y = nn.flatten %x {axis = 4 : i64} : (tensor<1x4x2xf32>) -> tensor<1x8xf32>
  func.return
}
// CHECK: nn.flatten: axis 4 out of range for rank 3

// -----
func.func @f(%x: tensor<1x4x2xf32>) {
  %y = nn.flatten %x {axis = 1 : i64} : (tensor<1x4x2xf32>) -> tensor<4x2xf32>
  func.return
}
// CHECK: nn.flatten: result shape 4x2 does not match the computed 1x8

// -----
func.func @f(%x: tensor<1x4x2xf32>) {
  %y = nn.reshape %x : (tensor<1x4x2xf32>) -> tensor<9xf32>
  func.return
}
// CHECK: nn.reshape: cannot reshape 8 elements into 9

// -----
func.func @f(%x: tensor<1x4xf32>) {
  %y = nn.softmax %x {axis = 2 : i64} : (tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return
}
// CHECK: nn.softmax: axis 2 out of range

// -----
func.func @f(%x: tensor<1x4x2x2xf32>) {
  %y = nn.lrn %x {size = 0 : i64, alpha = 1.0e-04 : f32, beta = 7.5e-01 : f32, bias = 1.0 : f32} : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  func.return
}
// CHECK: nn.lrn: size must be positive

// -----
func.func @f(%x: tensor<1x4x2xf32>) {
  %y = nn.transpose %x {perm = array<i64: 0, 2, 2>} : (tensor<1x4x2xf32>) -> tensor<1x2x4xf32>
  func.return
}
// CHECK: nn.transpose: perm [0, 2, 2] is not a permutation of 3 dimensions

// -----
func.func @f(%x: tensor<4xf32>) {
  %y = nn.clip %x {min = 6.0 : f32, max = 0.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: nn.clip: min must not exceed max
// -----
func.func @f(%x: tensor<1x8x2x2xf32>) {
  %y = nn.channel_slice %x {start = 4 : i64, size = 8 : i64} : (tensor<1x8x2x2xf32>) -> tensor<1x8x2x2xf32>
  func.return
}
// CHECK: nn.channel_slice: channels [4, 12) are not inside the input's 8
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.space_to_depth %x {block = 1 : i64, pads = array<i64: 0, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  func.return
}
// CHECK: nn.space_to_depth: block must be at least 2, not 1
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.space_to_depth %x {block = 2 : i64, pads = array<i64: 1, -1>} : (tensor<1x3x8x8xf32>) -> tensor<1x12x4x4xf32>
  func.return
}
// CHECK: nn.space_to_depth: pads must be (top, left), non-negative and inside the input, not [1, -1]
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.space_to_depth %x {block = 2 : i64, pads = array<i64: 0, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x6x4x4xf32>
  func.return
}
// CHECK: nn.space_to_depth: result must be 1x12xHxW for 3 channels in 2x2 blocks, not 1x6x4x4
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.unfold_rows %x {kernel = 1 : i64, stride = 1 : i64, pads = array<i64: 0, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  func.return
}
// CHECK: nn.unfold_rows: kernel must be at least 2 rows and stride at least 1, not 1 and 1
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.unfold_rows %x {kernel = 3 : i64, stride = 2 : i64, pads = array<i64: 3, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x9x4x8xf32>
  func.return
}
// CHECK: nn.unfold_rows: pads must be (top, bottom), non-negative and less than the kernel, not [3, 0]
// -----
func.func @f(%x: tensor<1x3x8x8xf32>) {
  %y = nn.unfold_rows %x {kernel = 3 : i64, stride = 2 : i64, pads = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x9x3x8xf32>
  func.return
}
// CHECK: nn.unfold_rows: result shape 1x9x3x8 does not match the computed 1x9x4x8

// -----
func.func @f(%x: tensor<4xf32>) {
  %c = nn.host "Clip"(%x) {attrs = {}, opset = 13 : i64, slots = array<i64: 3>, n_slots = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: nn.host "Clip": slots [3] do not place 1 operands among 3 inputs

// -----
func.func @f(%c: tensor<i1>, %x: tensor<4xf32>) {
  %y = nn.host "If"(%c, %x, %x) {attrs = {}, opset = 13 : i64, captures = ["x", "x"]} : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: nn.host "If": captures ['x', 'x'] are not distinct names of its last operands

// -----
func.func @f(%c: tensor<i1>, %x: tensor<4xf32>) {
  %y = nn.host "If"(%c, %x) {attrs = {then_branch = #nn.onnx_graph<"not base64!">}, opset = 13 : i64, captures = ["x"]} : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: nn.onnx_graph: not base64 (a serialised ONNX GraphProto)

// -----
func.func @f(%g: tensor<6x1x32xf32>, %r: tensor<2x16x4xf32>) {
  %y = nn.host "LSTMCell"(%g, %r) {attrs = {direction = "bidirectional"}, opset = 1 : i64, domain = "snowir"} : (tensor<6x1x32xf32>, tensor<2x16x4xf32>) -> tensor<6x2x1x4xf32>
  func.return
}
// CHECK: nn.host "LSTMCell" (domain snowir): no such kind (snowir's: LSTMRecurrence, GRURecurrence, RNNRecurrence)

// -----
func.func @f(%g: tensor<6x1x32xf32>, %r: tensor<2x16x4xf32>) {
  %y = nn.host "LSTMRecurrence"(%g, %r) {attrs = {direction = "forward"}, opset = 1 : i64, domain = "snowir"} : (tensor<6x1x32xf32>, tensor<2x16x4xf32>) -> tensor<6x2x1x4xf32>
  func.return
}
// CHECK: nn.host "LSTMRecurrence" (domain snowir): R [2, 16, 4] must be [1, 4H, H] (forward) and gates [6, 1, 32] [T, B, 1·4H]

// -----
func.func @f(%g: tensor<6x1x32xf32>, %r: tensor<2x16x4xf32>) {
  %y, %yh = nn.host "LSTMRecurrence"(%g, %r) {attrs = {direction = "bidirectional"}, opset = 1 : i64, domain = "snowir"} : (tensor<6x1x32xf32>, tensor<2x16x4xf32>) -> (tensor<6x2x1x4xf32>, tensor<1x1x4xf32>)
  func.return
}
// CHECK: nn.host "LSTMRecurrence" (domain snowir): result 1 must be [2, 1, 4], not [1, 1, 4]

// -----
func.func @f(%g: tensor<6x1x32xf32>, %r: tensor<2x16x4xf32>, %s: tensor<2xf32>) {
  %y = nn.host "LSTMRecurrence"(%g, %r, %s) {attrs = {direction = "bidirectional"}, opset = 1 : i64, domain = "snowir", slots = array<i64: 0, 1, 4>, n_slots = 6 : i64} : (tensor<6x1x32xf32>, tensor<2x16x4xf32>, tensor<2xf32>) -> tensor<6x2x1x4xf32>
  func.return
}
// CHECK: nn.host "LSTMRecurrence" (domain snowir): R is 8-bit with R_scale (slot 4), else float, not f32 with R_scale

// -----
func.func @f(%g: tensor<6x1x12xf32>, %r: tensor<1x12x4xf32>, %rb: tensor<1x12xf32>) {
  %y = nn.host "GRURecurrence"(%g, %r, %rb) {attrs = {direction = "forward", linear_before_reset = 1 : i64}, opset = 1 : i64, domain = "snowir", slots = array<i64: 0, 1, 3>, n_slots = 4 : i64} : (tensor<6x1x12xf32>, tensor<1x12x4xf32>, tensor<1x12xf32>) -> tensor<6x1x1x4xf32>
  func.return
}
// CHECK: nn.host "GRURecurrence" (domain snowir): Rb_h must be [1, 4], not [1, 12]

// -----
// a write-back unit's attribute (snowir/writeback.py) is checked by its unit
func.func @f(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>, %b: tensor<2xf32>) {
  %c = nn.conv2d %x, %w, %b {act = "gelu", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return
}
// CHECK: act: activation 'gelu': not one of the write-back unit's functions

// -----
func.func @f(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x1x1xf32>, %b: tensor<2xf32>) {
  %c = nn.conv2d %x, %w, %b {act = 3 : i64, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return
}
// CHECK: act: the write-back activation unit's function, a string

// -----
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %c = nn.crop %x {offsets = array<i64: 4, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x8xf32>
  func.return
}
// CHECK: nn.crop: a 5x8 window at [4, 0] (y0, x0) of every channel is not inside the input's 8x8 pixels (1x4 kept)
