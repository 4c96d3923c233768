// RUN: snow-opt %s -p quantize | filecheck %s
// RUN: snow-opt %s -p 'quantize{format="Q5.11"}' | filecheck %s --check-prefix=Q511
// RUN: not snow-opt %s -p 'quantize{format="Q9.9"}' 2>&1 | filecheck %s --check-prefix=BAD

// Every tensor becomes !nn.fixed<m, n>; conv weights get the widest fraction that holds
// their largest value (0.5 -> Q1.15, 3.0 -> Q3.13), recorded as w_frac.

func.func @main(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = nn.constant dense<[[[[0.5]], [[-0.25]]], [[[3.0]], [[0.125]]]]> : tensor<2x2x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<2xf32>
  %c = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return %c : tensor<1x2x4x4xf32>
}

// CHECK:      func.func @main(%x: tensor<1x2x4x4x!nn.fixed<8, 8>>) -> tensor<1x2x4x4x!nn.fixed<8, 8>>
// CHECK:      nn.constant dense_resource<{{.*}}> : tensor<2x2x1x1x!nn.fixed<3, 13>>
// CHECK:      nn.constant dense_resource<{{.*}}> : tensor<2x!nn.fixed<8, 8>>
// CHECK:      nn.conv2d %x, %{{.*}}, %{{.*}} {w_frac = 13 : i64, {{.*}}} : (tensor<1x2x4x4x!nn.fixed<8, 8>>, tensor<2x2x1x1x!nn.fixed<3, 13>>, tensor<2x!nn.fixed<8, 8>>) -> tensor<1x2x4x4x!nn.fixed<8, 8>>
// Q511:       tensor<1x2x4x4x!nn.fixed<5, 11>>
// BAD:        quantize: format 'Q9.9' is not a 16-bit Qm.n
