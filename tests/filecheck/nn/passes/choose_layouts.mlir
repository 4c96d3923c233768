// RUN: snow-opt %s -p split-kernels,choose-layouts | filecheck %s
// RUN: snow-opt %s -p split-kernels | filecheck %s --check-prefix=PIXELS
// RUN: snow-opt %s -p 'split-kernels,choose-layouts{tiles=false}' | filecheck %s --check-prefix=PIXELS
// RUN: snow-opt %s -p nn-prepare,nn-to-tile | filecheck %s --check-prefix=TILE

// Bypass chains and their layouts. A 3x3 conv over 768 channels runs as four channel parts of 192
// chained through the bypass (split-kernels; their partial sums whole pixels). A 1x1 projection
// shortcut's result is read only by the block's last conv, as its bypass. choose-layouts solves
// each chain by the planners' estimates: every part but the last stores its partial sums
// channel-tile-major in blocks of a COOP kernel tile's 16 channels (parts 1 and 2 read their
// bypass as blocks too, so their write-backs step a block a tile), and so does the projection, so
// each reader's kernel tile t loads its bypass slice of a strip as one run of block t rather than
// one LD a pixel. `tiles=false` keeps whole pixels.

func.func @parts(%x: tensor<1x768x13x13xf32>) -> tensor<1x64x13x13xf32> {
  %w = nn.constant dense<0.01> : tensor<64x768x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "c", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x768x13x13xf32>, tensor<64x768x3x3xf32>, tensor<64xf32>) -> tensor<1x64x13x13xf32>
  func.return %y : tensor<1x64x13x13xf32>
}

func.func @shortcut(%x: tensor<1x256x28x28xf32>, %h: tensor<1x128x14x14xf32>) -> tensor<1x512x14x14xf32> {
  %wp = nn.constant dense<0.01> : tensor<512x256x1x1xf32>
  %bp = nn.constant dense<0.1> : tensor<512xf32>
  %w = nn.constant dense<0.01> : tensor<512x128x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<512xf32>
  %p = nn.conv2d %x, %wp, %bp {onnx_node = "proj", strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x256x28x28xf32>, tensor<512x256x1x1xf32>, tensor<512xf32>) -> tensor<1x512x14x14xf32>
  %y = nn.conv2d %h, %w, %b bypass %p {onnx_node = "c3", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x128x14x14xf32>, tensor<512x128x1x1xf32>, tensor<512xf32>, tensor<1x512x14x14xf32>) -> tensor<1x512x14x14xf32>
  func.return %y : tensor<1x512x14x14xf32>
}

// CHECK:      %[[P0:.*]] = nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "c.part0", split, channel_tiles = 16 : i64,
// CHECK:      %[[P1:.*]] = nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} bypass %[[P0]] {onnx_node = "c.part1", split, channel_tiles = 16 : i64,
// CHECK:      %[[P2:.*]] = nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} bypass %[[P1]] {onnx_node = "c.part2", split, channel_tiles = 16 : i64,
// CHECK:      nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} bypass %[[P2]] {onnx_node = "c.part3", split, strides
// CHECK:      %[[PR:.*]] = nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "proj", channel_tiles = 16 : i64,
// CHECK:      nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} bypass %[[PR]] {onnx_node = "c3", strides

// PIXELS-NOT: channel_tiles

// TILE:       tile.layer @c.part0 conv
// TILE:       tile.dram_region @c.part0.output {{.*}}label = "output", channel_tiles = array<i64: 16, 0, 4>}
// TILE:       tile.layer @c.part1 conv {{.*}}bypass_slices = array<i64
// TILE:       tile.dram_region @c.part1.output {{.*}}label = "output", channel_tiles = array<i64: 16, 0, 4>}
// TILE:       tile.dram_region @c.part1.bypass {{.*}}label = "bypass", channel_tiles = array<i64: 16, 0, 4>}
// TILE:       tile.layer @c.part3 conv {{.*}}bypass_slices = array<i64
// TILE:       tile.dram_region @c.part3.output {{.*}}label = "output"}
// TILE:       tile.dram_region @c.part3.bypass {{.*}}label = "bypass", channel_tiles = array<i64: 16, 0, 4>}
// TILE:       tile.layer @proj conv
// TILE:       tile.dram_region @proj.output {{.*}}label = "output", channel_tiles = array<i64: 16, 0, 32>}
// TILE:       tile.dram_region @c3.bypass {{.*}}label = "bypass", channel_tiles = array<i64: 16, 0, 32>}
