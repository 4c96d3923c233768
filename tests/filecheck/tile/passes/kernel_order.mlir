// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=SERP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | sed -e 's/, kernel_order = "serpentine"//' | snow-opt -p 'tile-to-asm' | filecheck %s --check-prefix=UP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=COOP},tile-loop-order' | sed -e 's/tile.layer @expand conv attributes {/tile.layer @expand conv attributes {kernel_order = "serpentine", /' | not snow-opt -p 'tile-to-asm' 2>&1 | filecheck %s --check-prefix=COOP

// A residual 1x1 conv, 64 -> 128 channels on 12 x 56: the CUs split the columns (cu_split = cols),
// two row groups of 6 rows, two kernel tiles of 64 kernels (resident here). The planner records the
// kernel tiles' order, serpentine: group 1 starts with the tile group 0 ended with (where tiles
// are not resident, that tile is still in the weights buffer: one load spared per later group).

func.func @main(%x: tensor<1x64x12x56xf32>, %r: tensor<1x128x12x56xf32>) -> tensor<1x128x12x56xf32> {
  %w = nn.constant dense<0.02> : tensor<128x64x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<128xf32>
  %y = nn.conv2d %x, %w, %b bypass %r {onnx_node = "expand", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x64x12x56xf32>, tensor<128x64x1x1xf32>, tensor<128xf32>, tensor<1x128x12x56xf32>) -> tensor<1x128x12x56xf32>
  func.return %y : tensor<1x128x12x56xf32>
}

// CHECK:      tile.layer @expand conv attributes {{{.*}}cu_split = #tile<cu_split cols>, kernel_order = "serpentine"



// SERP:       snowflake_asm.label @group0.ktile0.
// SERP:       snowflake_asm.label @group0.ktile1.
// SERP:       snowflake_asm.label @group1.ktile1.
// SERP:       snowflake_asm.label @group1.ktile0.

// kernel_order removed: up in every group, followed
// UP:         snowflake_asm.label @group0.ktile1.
// UP:         snowflake_asm.label @group1.ktile0.
// UP:         snowflake_asm.label @group1.ktile1.

// COOP:       layer @expand: kernel_order serpentine: a residual conv (its bypass is read per kernel tile): only a column-split INDP conv or a COOP conv
