// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile' | filecheck %s --check-prefix=NOORDER
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order{order=Mloop}' | filecheck %s --check-prefix=MLOOP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'snowflake-lower{whole-model=false}' | filecheck %s --check-prefix=ASM
// RUN: not snow-opt %s -p 'nn-to-tile' 2>&1 | filecheck %s --check-prefix=FLOAT
// RUN: not snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order{order=Zloop}' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not snow-opt %s -p 'nn-prepare,nn-to-tile,tile-to-asm' 2>&1 | filecheck %s --check-prefix=NEEDORDER

// A padded 3x3 conv, 20 kernels (two kernel tiles, the second masked), lowered to the tile
// level (decisions as attributes) and on to a Snowflake program.

func.func @main(%x: tensor<1x16x6x6xf32>) -> tensor<1x20x6x6xf32> {
  %w = nn.constant dense<0.01> : tensor<20x16x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<20xf32>
  %c = nn.conv2d %x, %w, %b {onnx_node = "conv", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x6x6xf32>, tensor<20x16x3x3xf32>, tensor<20xf32>) -> tensor<1x20x6x6xf32>
  func.return %c : tensor<1x20x6x6xf32>
}

// CHECK:      nn.conv2d {{.*}}tile = "conv"
// CHECK:      tile.layer @conv conv attributes {mode = #tile<mode COOP>, mloop_bytes = {{[0-9]+}} : i64, kloop_bytes = {{[0-9]+}} : i64, shape = #tile.conv_shape<c = 16, h = 6, w = 6, k = 20, kh = 3, kw = 3, sy = 1, sx = 1, pt = 1, pl = 1, pb = 1, pr = 1, shift = 15, relu = 1, groups = 1, cin_total = 0, c_base = 0>, relu, maps_buffering = #tile<buffering double>, loop_order = #tile<loop_order Kloop>} {
// CHECK-NEXT:   tile.dram_region @conv.maps {offset = 0 : i64, size = 1152 : i64, label = "maps"}
// CHECK-NEXT:   tile.dram_region @conv.weights {offset = 1280 : i64, size = 10240 : i64, label = "weights", value = dense_resource<conv_w> : tensor<5120xi16>, packing = #tile<mode COOP>, packed_kernels = 16 : i64}
// CHECK-NEXT:   tile.dram_region @conv.output {offset = 11520 : i64, size = 1440 : i64, label = "output"}
// CHECK-NEXT:   tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 2 : i64, slot = 2048 : i64} {
// CHECK-COUNT-16: tile.load {buffer = #tile<buffer weights>, length = 160 : i64
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 6>, in_rows = array<i64: 0, 6>, overlap = 0 : i64, cu = -1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 576 : i64
// CHECK-NEXT:     tile.window {trace_length = 48 : i64, rows = 2 : i64, repeat_x = 6 : i64, repeat_y = 1 : i64
// CHECK-NEXT:     tile.window {trace_length = 48 : i64, rows = 3 : i64, repeat_x = 6 : i64, repeat_y = 4 : i64
// CHECK-NEXT:     tile.window {trace_length = 48 : i64, rows = 2 : i64, repeat_x = 6 : i64, repeat_y = 1 : i64

// NOORDER:    tile.layer @conv conv attributes {mode = #tile<mode COOP>, mloop_bytes

// MLOOP:      loop_order = #tile<loop_order Mloop>

// ASM:        nn.conv2d {{.*}}image = "conv"
// ASM:        snowflake_asm.image @conv attributes {layer = "conv", kind = "conv", mode = "COOP", loop_order = "Kloop"{{.*}}} {
// ASM-NEXT:   snowflake_asm.segment input @x at 0 size 1152
// ASM-NEXT:   snowflake_asm.segment data @w at 1280 size 10240 = dense_resource<conv_w> : tensor<5120xi16>
// ASM-NEXT:   snowflake_asm.segment output @y at 11520 size 1440
// ASM-NEXT:   snowflake_asm.program @code {{.*}}{
// ASM:          snowflake_asm.vmov coop shift
// ASM:          snowflake_asm.ld maps
// ASM:          snowflake_asm.ld weights
// kernel rows of a pixel: row 0 from r2/r3, row 1 from r4/r5 (set before row 0's MAC), row 2 from r12/r13
// ASM:          snowflake_asm.label @strip0.ktile0.x{{[0-9]+}}
// ASM:          snowflake_asm.mac coop r1, r2, r3 trace 48
// ASM:          snowflake_asm.mac coop r1, r4, r5 trace 48
// ASM:          snowflake_asm.mac coop r1, r12, r13 trace 48 wb relu
// ASM-NOT:    tile.layer

// FLOAT:      nn-to-tile: quantise the module first (nn-prepare)
// BADOPT:     tile-loop-order: order must be auto, Kloop or Mloop, not 'Zloop'
// NEEDORDER:  tile-to-asm: layer @conv: no loop_order: run tile-loop-order first
