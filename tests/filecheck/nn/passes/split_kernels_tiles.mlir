// RUN: snow-opt %s -p split-kernels | filecheck %s
// RUN: snow-opt %s -p 'split-kernels{tiles=false}' | filecheck %s --check-prefix=PIXELS
// RUN: snow-opt %s -p nn-prepare,nn-to-tile | filecheck %s --check-prefix=TILE

// A 3x3 conv over 256 channels (2320-word kernels, over a weights slot) runs as two parts of 128
// chained through the bypass. The first part's partial sums are read by the second part only, as
// its bypass: split-kernels stores them channel-tile-major in blocks of a COOP kernel tile's 16
// channels, so the second part's kernel tile t loads its bypass slice as one run of block t
// rather than one LD a pixel. `tiles=false` keeps whole pixels.

func.func @main(%x: tensor<1x256x13x13xf32>) -> tensor<1x32x13x13xf32> {
  %w = nn.constant dense<0.01> : tensor<32x256x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "c", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x256x13x13xf32>, tensor<32x256x3x3xf32>, tensor<32xf32>) -> tensor<1x32x13x13xf32>
  func.return %y : tensor<1x32x13x13xf32>
}

// CHECK:      %[[P0:.*]] = nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} {onnx_node = "c.part0", split, channel_tiles = 16 : i64,
// CHECK:      nn.conv2d %{{.*}}, %{{.*}}, %{{.*}} bypass %[[P0]] {onnx_node = "c.part1", split, strides

// PIXELS-NOT: channel_tiles

// TILE:       tile.layer @c.part0 conv
// TILE:       tile.dram_region @c.part0.output {{.*}}label = "output", channel_tiles = array<i64: 16, 0, 2>}
// TILE:       tile.layer @c.part1 conv {{.*}}bypass_slices = array<i64
// TILE:       tile.dram_region @c.part1.output {{.*}}label = "output"}
// TILE:       tile.dram_region @c.part1.bypass {{.*}}label = "bypass", channel_tiles = array<i64: 16, 0, 2>}
