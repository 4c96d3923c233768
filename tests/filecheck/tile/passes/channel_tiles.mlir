// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | sed '/@dw.maps/s/16, 0, 3/16, 1, 3/' | not snow-opt -p tile-to-asm 2>&1 | filecheck %s --check-prefix=EDIT
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | sed '/tile.layer @dw /s/loop_order Mloop/loop_order Kloop/' | not snow-opt -p tile-to-asm 2>&1 | filecheck %s --check-prefix=KLOOP

// An expanding 1x1 (16 -> 48) before a 48-channel 3x3 depthwise conv: depthwise-to-grouped has the
// 1x1 write its output channel-tile-major (`channel_tiles = 16` on the nn conv), and nn-to-tile
// records the layout once on the output region, `channel_tiles = [16, 0, 3]`: the one layer's
// three 16-kernel tiles write blocks 0, 1, 2 of an (8, 8, 16)-run each, pixels 16 words apart (the
// window's offset_x) and tiles a block (2048 bytes) apart. The depthwise conv is one grouped conv
// of 3 groups of 16 channels (its kernels diagonal, `depthwise_over_blocks`) whose maps region is
// the same tensor from block 0 (`channel_tiles = [16, 0, 3]`: group g reads block g), Mloop: its maps
// tile is one block's rows (1024 words, kernel tile 0's block shown; kernel tile t loads block t,
// 2048 bytes on), a kernel row one 48-word trace. Its blocks moved where the graph does not place
// them, or its loop order made Kloop, is refused in one line.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x48x8x8xf32> {
  %w1 = nn.constant dense<0.25> : tensor<48x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x3x3xf32>
  %w2 = nn.constant dense<0.25> : tensor<48x48x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {onnx_node = "expand", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x8x8xf32>
  %dw = nn.conv2d %expand, %wd, %b {onnx_node = "dw", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x8x8xf32>, tensor<48x1x3x3xf32>, tensor<48xf32>) -> tensor<1x48x8x8xf32>
  %project = nn.conv2d %dw, %w2, %b {onnx_node = "project", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x8x8xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x8x8xf32>
  func.return %project : tensor<1x48x8x8xf32>
}

// CHECK:      %expand = nn.conv2d %x, %w1, %b {onnx_node = "expand", channel_tiles = 16 : i64,
// CHECK:      %dw = nn.conv2d %expand, %{{.*}}, %b {onnx_node = "dw", block_diagonal, depthwise_over_blocks,
// CHECK-SAME:   groups = 3 : i64
// CHECK:      tile.tensor @expand.output {offset = [[T:[0-9]+]] : i64, size = 6144 : i64
// CHECK:      tile.layer @expand conv attributes {mode = #tile<mode COOP>
// CHECK:        tile.dram_region @expand.output {offset = [[T]] : i64, size = 6144 : i64, label = "output", channel_tiles = array<i64: 16, 0, 3>, tensor = "expand.output"}
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 3 : i64
// CHECK:        tile.window {trace_length = 16 : i64, rows = 1 : i64, repeat_x = 8 : i64, repeat_y = 8 : i64, offset_x = 16 : i64, offset_y = 128 : i64, start = 0 : i64, out_addr = [[T]] : i64
// CHECK:      tile.layer @dw conv attributes {{.*}}shape = #tile.conv_shape<c = 16, h = 8, w = 8, k = 48, kh = 3, kw = 3, {{.*}} groups = 3,
// CHECK-SAME:   loop_order = #tile<loop_order Mloop>
// CHECK-NEXT:   tile.dram_region @dw.maps {offset = [[T]] : i64, size = 6144 : i64, label = "maps", channel_tiles = array<i64: 16, 0, 3>, tensor = "expand.output"}
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 3 : i64
// CHECK-NOT:    gather
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 8>, in_rows = array<i64: 0, 8>
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 1024 : i64, dram_addr = [[T]] : i64
// CHECK-NEXT:     tile.window {trace_length = 48 : i64, rows = 2 : i64, repeat_x = 8 : i64, repeat_y = 1 : i64, offset_x = 16 : i64, offset_y = 128 : i64
// CHECK-NOT:  tile.layer @dw.1

// EDIT: tile-to-asm: layer @dw: tile.dram_region @dw.maps: channel_tiles [16, 1, 3] where the graph places the input it reads at [16, 0, 3]
// KLOOP: tile-to-asm: layer @dw: tile.dram_region @dw.maps: channel_tiles [16, 0, 3]: loop_order Kloop: a grouped conv over channel-tile-major blocks runs Mloop
