// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/cus16.json split-kernel-parts=false},nn-to-tile{hw=%inputs/cus16.json},tile-loop-order{hw=%inputs/cus16.json}' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s --check-prefix=STOCK
// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/cus16.json split-kernel-parts=false},nn-to-tile{hw=%inputs/cus16.json},tile-loop-order{hw=%inputs/cus16.json}' -o %t.mlir
// RUN: sed -e 's/, coop_rows//' %t.mlir > %t.removed.mlir
// RUN: not snow-opt %t.removed.mlir -p 'tile-to-asm{hw=%inputs/cus16.json}' 2>&1 | filecheck %s --check-prefix=STALE

// A strided 1x1 projection (ResNet-50's layer3.0 downsample, n86: 512 -> 1024, 28^2 -> 14^2) on
// 16 CUs at 4.2 GB/s (cus16.json). Its gathered 14 x 14 x 512 pixels do not fit one broadcast
// maps strip, so a broadcast plan re-sends its 1 MB of kernels for a second strip. As COOP row
// groups over the gathered pixels (`coop_rows` with `gather`) each CU gathers its own compact row
// (14 pixels, select c), the 14 rows sit in 14 CUs' buffers at once, and each 4-kernel tile loads
// once, broadcast to vMAC v of every CU. Priced (plan/conv.with_coop_rows): on the stock 4-CU
// machine the broadcast plan stays. split-kernel-parts=false keeps the conv whole: on 16 CUs
// split-kernels otherwise runs it as two resident kernel parts (tests/test_kernel_parts.py).

func.func @main(%x: tensor<1x512x28x28xf32>) -> tensor<1x1024x14x14xf32> {
  %w = nn.constant dense<0.001> : tensor<1024x512x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<1024xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "proj", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x512x28x28xf32>, tensor<1024x512x1x1xf32>, tensor<1024xf32>) -> tensor<1x1024x14x14xf32>
  func.return %y : tensor<1x1024x14x14xf32>
}

// CHECK:      tile.layer @proj conv attributes {{{.*}}gather = #tile.gather<sy = 2, sx = 2, w = 28, cin = 512, c0 = 0>{{.*}}coop_rows
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 4 : i64, repeat = 256 : i64, slot = 2048 : i64} {
// one row group: CU c's compact row c (DRAM row 2c, its even pixels) at maps word 0
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 14>, in_rows = array<i64: 0, 14>, overlap = 0 : i64, cu = -1 : i64, cu_rows = 1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 7168 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 0 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 7168 : i64, dram_addr = 57344 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 1 : i64

// STOCK:      tile.layer @proj conv attributes {{{.*}}gather = #tile.gather<sy = 2, sx = 2, w = 28, cin = 512, c0 = 0>
// STOCK-NOT:  coop_rows
// STOCK:        tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 64 : i64

// STALE: error: tile-to-asm: layer @proj: maps tile 0: cu_rows belongs to row groups
