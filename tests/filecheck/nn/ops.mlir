// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s

// Every nn op in custom and generic form; weights as dense, dense_resource and external.

func.func @all_ops(%x: tensor<1x3x8x8xf32>, %q: tensor<1x4x8x8x!nn.fixed<8, 8>>, %q2: tensor<4x!nn.fixed<5, 11>>) -> tensor<1x10xf32> {
  %w = nn.constant dense<5.000000e-01> : tensor<4x3x3x3xf32>
  %b = nn.constant dense_resource<bias0> : tensor<4xf32>
  %fw = nn.constant #nn.external<"weights.npz", "fc.w", tensor<10x64xf32>>
  %fb = nn.constant dense<0.000000e+00> : tensor<10xf32>
  %w2 = nn.constant dense<1.000000e-01> : tensor<4x4x3x3xf32>
  %dw = nn.constant dense<1.000000e-01> : tensor<4x1x3x3xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = nn.conv2d %c, %w2, %b bypass %c {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %d = nn.conv2d %r, %dw, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  %mp = nn.max_pool %r {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %ap = nn.avg_pool %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, count_include_pad} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %gp = nn.global_avg_pool %r : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
  %cr = nn.crop %r {offsets = array<i64: 1, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x4xf32>
  %bn = nn.batch_norm %mp, %b, %b, %b, %b {epsilon = 1.000000e-05 : f32} : (tensor<1x4x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  %add = nn.add %bn, %ap {relu} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %mul = nn.mul %add, %gp : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %re = nn.relu %mul : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %cc = nn.concat %re, %d {axis = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x8x4x4xf32>
  %cl = nn.clip %cc {min = 0.000000e+00 : f32, max = 6.000000e+00 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  %hs = nn.hard_sigmoid %cl {alpha = 2.000000e-01 : f32, beta = 5.000000e-01 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  %hw = nn.hard_swish %hs : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  %l = nn.lrn %hw {size = 5 : i64, alpha = 9.999999e-05 : f32, beta = 7.500000e-01 : f32, bias = 1.000000e+00 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  %t = nn.transpose %l {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x4x4xf32>) -> tensor<1x4x4x8xf32>
  %rs = nn.reshape %t : (tensor<1x4x4x8xf32>) -> tensor<1x2x4x16xf32>
  %f = nn.flatten %rs {axis = 2 : i64} : (tensor<1x2x4x16xf32>) -> tensor<2x64xf32>
  %fc = nn.dense %f, %fw, %fb {relu} : (tensor<2x64xf32>, tensor<10x64xf32>, tensor<10xf32>) -> tensor<2x10xf32>
  %sm = nn.softmax %fc {axis = 1 : i64} : (tensor<2x10xf32>) -> tensor<2x10xf32>
  %fx = nn.relu %q : (tensor<1x4x8x8x!nn.fixed<8, 8>>) -> tensor<1x4x8x8x!nn.fixed<8, 8>>
  %fx2 = nn.relu %q2 : (tensor<4x!nn.fixed<5, 11>>) -> tensor<4x!nn.fixed<5, 11>>
  %one = nn.reshape %sm : (tensor<2x10xf32>) -> tensor<1x20xf32>
  %out = nn.reshape %sm : (tensor<2x10xf32>) -> tensor<1x10x2xf32>
  %o = nn.flatten %out {axis = 1 : i64} : (tensor<1x10x2xf32>) -> tensor<1x20xf32>
  %fin = nn.dense %o, %fw2, %fb : (tensor<1x20xf32>, tensor<10x20xf32>, tensor<10xf32>) -> tensor<1x10xf32>
  %fw2 = nn.constant dense<0.000000e+00> : tensor<10x20xf32>
  func.return %fin : tensor<1x10xf32>
}
{-#
  dialect_resources: {
    builtin: {
      bias0: "0x040000000000803F000000400000404000008040"
    }
  }
#-}

// CHECK: builtin.module {
// CHECK-NEXT: func.func @all_ops(%x: tensor<1x3x8x8xf32>, %q: tensor<1x4x8x8x!nn.fixed<8, 8>>, %q2: tensor<4x!nn.fixed<5, 11>>) -> tensor<1x10xf32> {
// CHECK-NEXT: %w = nn.constant dense<5.000000e-01> : tensor<4x3x3x3xf32>
// CHECK-NEXT: %b = nn.constant dense_resource<bias0> : tensor<4xf32>
// CHECK-NEXT: %fw = nn.constant #nn.external<"weights.npz", "fc.w", tensor<10x64xf32>>
// CHECK-NEXT: %fb = nn.constant dense<0.000000e+00> : tensor<10xf32>
// CHECK-NEXT: %w2 = nn.constant dense<1.000000e-01> : tensor<4x4x3x3xf32>
// CHECK-NEXT: %dw = nn.constant dense<1.000000e-01> : tensor<4x1x3x3xf32>
// CHECK-NEXT: %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %r = nn.conv2d %c, %w2, %b bypass %c {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %d = nn.conv2d %r, %dw, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %mp = nn.max_pool %r {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %ap = nn.avg_pool %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, count_include_pad} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %gp = nn.global_avg_pool %r : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT: %cr = nn.crop %r {offsets = array<i64: 1, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x4xf32>
// CHECK-NEXT: %bn = nn.batch_norm %mp, %b, %b, %b, %b {epsilon = 1.000000e-05 : f32} : (tensor<1x4x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %add = nn.add %bn, %ap {relu} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %mul = nn.mul %add, %gp : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %re = nn.relu %mul : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %cc = nn.concat %re, %d {axis = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %cl = nn.clip %cc {min = 0.000000e+00 : f32, max = 6.000000e+00 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %hs = nn.hard_sigmoid %cl {alpha = 2.000000e-01 : f32, beta = 5.000000e-01 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %hw = nn.hard_swish %hs : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %l = nn.lrn %hw {size = 5 : i64, alpha = 9.99999902e-05 : f32, beta = 7.500000e-01 : f32, bias = 1.000000e+00 : f32} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %t = nn.transpose %l {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x4x4xf32>) -> tensor<1x4x4x8xf32>
// CHECK-NEXT: %rs = nn.reshape %t : (tensor<1x4x4x8xf32>) -> tensor<1x2x4x16xf32>
// CHECK-NEXT: %f = nn.flatten %rs {axis = 2 : i64} : (tensor<1x2x4x16xf32>) -> tensor<2x64xf32>
// CHECK-NEXT: %fc = nn.dense %f, %fw, %fb {relu} : (tensor<2x64xf32>, tensor<10x64xf32>, tensor<10xf32>) -> tensor<2x10xf32>
// CHECK-NEXT: %sm = nn.softmax %fc {axis = 1 : i64} : (tensor<2x10xf32>) -> tensor<2x10xf32>
// CHECK-NEXT: %fx = nn.relu %q : (tensor<1x4x8x8x!nn.fixed<8, 8>>) -> tensor<1x4x8x8x!nn.fixed<8, 8>>
// CHECK-NEXT: %fx2 = nn.relu %q2 : (tensor<4x!nn.fixed<5, 11>>) -> tensor<4x!nn.fixed<5, 11>>
// CHECK-NEXT: %one = nn.reshape %sm : (tensor<2x10xf32>) -> tensor<1x20xf32>
// CHECK-NEXT: %out = nn.reshape %sm : (tensor<2x10xf32>) -> tensor<1x10x2xf32>
// CHECK-NEXT: %o = nn.flatten %out {axis = 1 : i64} : (tensor<1x10x2xf32>) -> tensor<1x20xf32>
// CHECK-NEXT: %fin = nn.dense %o, %fw2, %fb : (tensor<1x20xf32>, tensor<10x20xf32>, tensor<10xf32>) -> tensor<1x10xf32>
// CHECK-NEXT: %fw2 = nn.constant dense<0.000000e+00> : tensor<10x20xf32>
// CHECK-NEXT: func.return %fin : tensor<1x10xf32>
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK: {-#
// CHECK-NEXT: dialect_resources: {
// CHECK-NEXT: builtin: {
// CHECK-NEXT: bias0: "0x040000000000803F000000400000404000008040"
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: #-}
