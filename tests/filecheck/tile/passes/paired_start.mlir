// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/small.json},nn-to-tile{hw=%inputs/small.json},tile-loop-order{hw=%inputs/small.json}' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/small.json},nn-to-tile{hw=%inputs/small.json},tile-loop-order{hw=%inputs/small.json},tile-to-asm{hw=%inputs/small.json}' | filecheck %s --check-prefix=PAIRED
// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/small.json},nn-to-tile{hw=%inputs/small.json},tile-loop-order{hw=%inputs/small.json}' | sed -e 's/, paired_start//' | snow-opt -p 'tile-to-asm{hw=%inputs/small.json}' | filecheck %s --check-prefix=UP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | sed -e 's/tile.layer @reduce conv attributes {/tile.layer @reduce conv attributes {paired_start, /' | not snow-opt -p 'tile-to-asm' 2>&1 | filecheck %s --check-prefix=REFUSED

// A resident conv's first two maps strips computed kernel tile by kernel tile (`paired_start`).
// A 1x1 conv, 128 -> 64 channels over 8 x 8, on a machine of 2048-word maps banks and 1024-word
// weights buffers (small.json): four kernel tiles of 16 kernels stay resident (4 x 128 words), the
// maps come in four strips of 2 rows in the banks in turn. Each kernel tile (4 KB) outweighs a
// strip (2 KB), so the CUs would compute strip 0's tiles as they land and then wait for strip 1,
// queued behind the tiles. The planner prices the paired start (plan/paired_start.start_cycles)
// and records it: the cold start loads strip 1 right behind strip 0, ahead of tiles 1..3, and
// each tile computes over strip 0 then strip 1; strip 2 follows as usual.

func.func @main(%x: tensor<1x128x8x8xf32>) -> tensor<1x64x8x8xf32> {
  %w = nn.constant dense<0.02> : tensor<64x128x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "reduce", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x128x8x8xf32>, tensor<64x128x1x1xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  func.return %y : tensor<1x64x8x8xf32>
}

// CHECK:      tile.layer @reduce conv attributes {{{.*}}paired_start
// CHECK:      tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 4 : i64, resident}

// strip 1's maps load right behind strip 0's, then tiles 1..3; the first two strips tile by tile
// PAIRED:      snowflake_asm.ld maps
// PAIRED:      snowflake_asm.ld maps
// PAIRED:      snowflake_asm.label @load_weights.resident.ktiles0
// PAIRED-NOT:  snowflake_asm.ld maps
// PAIRED:      snowflake_asm.label @strips0_1.ktiles0to2.ktiles{{[0-9]+}}
// PAIRED:      snowflake_asm.label @strips0_1.ktile3.
// PAIRED:      snowflake_asm.ld maps
// PAIRED:      snowflake_asm.label @strip2.ktile0.
// PAIRED-NOT:  snowflake_asm.label @strip1.

// paired_start removed: strip by strip, followed
// UP:          snowflake_asm.label @load_weights.resident.ktiles0
// UP:          snowflake_asm.label @strip0.ktile0.
// UP:          snowflake_asm.label @strip1.ktile0.
// UP-NOT:      snowflake_asm.label @strips0_1.

// on the default machine the kernel tiles are not resident: refused in one line
// REFUSED: tile-to-asm: layer @reduce: paired_start True: its kernel tiles not resident: only resident kernel tiles over banked strips take turns (remove it)
