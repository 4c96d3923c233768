// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' -o %t.mlir
// RUN: filecheck %s < %t.mlir
// RUN: snow-opt %t.mlir -p 'tile-to-asm' | filecheck %s --check-prefix=ASM
// RUN: snow-run %t.mlir --check --quiet --report - | filecheck %s --check-prefix=EXACT

// A 1x1 conv over 1024 channels of 10x10: an input row is 10240 words, so the 65536-word maps
// buffer holds 6 rows and a bank 3. Kloop re-sends the 128 kernels' 262 KB per maps tile, so
// the planner takes two whole-buffer tiles of 5 rows over four banked ones; and since a 1x1
// conv of stride 1 reads input row j for output row j only, the second tile's row j can load
// over the first's once the last kernel tile's MACs are past it (`rolling`), instead of all
// of it after the last kernel tile has drained.

func.func @main(%x: tensor<1x1024x10x10xf32>) -> tensor<1x128x10x10xf32> {
  %w = nn.constant dense<0.001> : tensor<128x1024x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<128xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "pointwise", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x1024x10x10xf32>, tensor<128x1024x1x1xf32>, tensor<128xf32>) -> tensor<1x128x10x10xf32>
  func.return %y : tensor<1x128x10x10xf32>
}

// CHECK:      tile.layer @pointwise conv attributes {{.*}}maps_buffering = #tile<buffering rolling>{{.*}}loop_order = #tile<loop_order Kloop>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 5>, in_rows = array<i64: 0, 5>
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 5, 10>, in_rows = array<i64: 5, 10>

// The first tile's last kernel tile: a Y loop over rows 1..4 whose body, after the row's MACs
// (10 pixels of two trace chunks: 20 vector ops, more than the queue's 16), loads the next
// tile's row one back in four LDs of 2560 words (balance-loads gives each a unit); the row the
// last MACs read loads after them, behind a flush; the next tile does not load again.
// ASM:        snowflake_asm.movi r26, 2560
// ASM:        snowflake_asm.label @strip0.ktile7.y
// ASM:        snowflake_asm.mac coop r1, r2, r3 trace 16 wb relu
// ASM:        snowflake_asm.ble
// ASM:        snowflake_asm.ld maps r22, r23, r26 unit 0 to all
// ASM-NEXT:   snowflake_asm.addi r22, r22, 2560
// ASM-NEXT:   snowflake_asm.addi r23, r23, 5120
// ASM-NEXT:   snowflake_asm.ld maps r22, r23, r26 unit 0 to all
// ASM:        snowflake_asm.ble r8, r9, @strip0.ktile7.y
// ASM-COUNT-16: snowflake_asm.vmov coop mask
// ASM:        snowflake_asm.ld maps
// ASM-NOT:    snowflake_asm.ld maps
// ASM:        snowflake_asm.label @strip1.ktiles0to6
// ASM-NOT:    snowflake_asm.ld maps
// ASM:        snowflake_asm.label @strip1.ktile7

// EXACT: "golden_bit_exact": true
