// RUN: snow-opt %s -p 'nn-prepare{pad-rows=false},nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s --check-prefix=PADDED
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=COOP}' | filecheck %s --check-prefix=COOP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=ASM
// RUN: not snow-opt %s -p 'nn-prepare,nn-to-tile{mode=FOO}' 2>&1 | filecheck %s --check-prefix=BADOPT

// A first layer (3 input channels, 7x7 stride 2, pad 3, 64 kernels): the compiler picks INDP,
// 16 kernels interleaved per vMAC and broadcast to every CU, each CU its own output rows.

func.func @main(%x: tensor<1x3x20x20xf32>) -> tensor<1x64x10x10xf32> {
  %w = nn.constant dense<0.01> : tensor<64x3x7x7xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %c = nn.conv2d %x, %w, %b {onnx_node = "conv1", strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x20x20xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>) -> tensor<1x64x10x10xf32>
  func.return %c : tensor<1x64x10x10xf32>
}

// CHECK:      tile.layer @conv1 conv attributes {{{.*}}mode = #tile<mode INDP>{{.*}}loop_order = #tile<loop_order Kloop>
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 64 : i64, repeat = 1 : i64} {
// CHECK-COUNT-4:  tile.load {buffer = #tile<buffer weights>, length = 2368 : i64
// top border rows: one CU; interior rows: a row group over the 4 CUs
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 1>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 2, 6>
// CHECK-COUNT-4:  tile.load {buffer = #tile<buffer maps>

// pad-rows (default in nn-prepare): the host gives the input its 3 + 3 padding rows, so every
// output row reads all 7 kernel rows and the 10 rows are row groups over the CUs from row 0
// PADDED:     nn.pad_rows %x {{.*}}pads = array<i64: 3, 3>} : (tensor<1x3x20x20x!nn.fixed<8, 8>>) -> tensor<1x3x26x20x!nn.fixed<8, 8>>
// PADDED:     tile.layer @conv1 conv attributes {{{.*}}mode = #tile<mode INDP>
// PADDED-SAME: shape = #tile.conv_shape<c = 3, h = 26, w = 20, k = 64, kh = 7, kw = 7, sy = 2, sx = 2, pt = 0, pl = 3, pb = 0, pr = 3
// PADDED:     tile.maps_tile attributes {out_rows = array<i64: 0, 4>
// PADDED:     tile.maps_tile attributes {out_rows = array<i64: 4, 8>
// PADDED:     tile.maps_tile attributes {out_rows = array<i64: 8, 10>

// COOP:       mode = #tile<mode COOP>

// ASM:        snowflake_asm.image @conv1
// ASM:        snowflake_asm.program @code
// ASM:        snowflake_asm.vmov indp stride
// ASM:        snowflake_asm.mac indp

// BADOPT: nn-to-tile: mode must be auto, COOP or INDP, not 'FOO'
