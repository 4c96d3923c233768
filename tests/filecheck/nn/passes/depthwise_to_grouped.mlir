// RUN: snow-opt %s -p depthwise-to-grouped | filecheck %s

// A depthwise conv over 32 channels read from the model input, its output read by the host,
// becomes one 32x32 conv with a diagonal kernel block (marked block_diagonal, so reports count
// depthwise MACs): the planner estimates its kernel-row traces (96 words, MAC-bound) faster than
// 2 groups of 16 with a trace a tap (issue-bound), with its costs in the IR, the host's DRAM round
// trip included; so does 24 channels (one 24x24 diagonal conv rather than padded lane groups).
// Between two device convs, the 1x1 producer writes the input channel-tile-major (`channel_tiles =
// 16`: two 16-channel blocks, one conv), and one grouped conv of 2 groups of 16 reads them, group g
// block g whole (`depthwise_over_blocks`; its kernel rows 48-word traces, 3 MAC cycles a row, the
// pixel loop's 8 issue slots under its 9 MAC cycles), one layer where the slices were two. A channel
// multiplier of 2 is left as it is.

func.func @main(%x: tensor<1x32x8x8xf32>, %y: tensor<1x24x8x8xf32>) -> (tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>, tensor<1x32x8x8xf32>) {
  %w = nn.constant dense<0.5> : tensor<32x1x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %w1 = nn.constant dense<0.5> : tensor<32x32x1x1xf32>
  %w24 = nn.constant dense<0.5> : tensor<24x1x3x3xf32>
  %b24 = nn.constant dense<0.1> : tensor<24xf32>
  %w64 = nn.constant dense<0.5> : tensor<64x1x3x3xf32>
  %b64 = nn.constant dense<0.1> : tensor<64xf32>
  %dw = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %dw24 = nn.conv2d %y, %w24, %b24 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 24 : i64} : (tensor<1x24x8x8xf32>, tensor<24x1x3x3xf32>, tensor<24xf32>) -> tensor<1x24x8x8xf32>
  %mult = nn.conv2d %x, %w64, %b64 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64} : (tensor<1x32x8x8xf32>, tensor<64x1x3x3xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x8x8xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %inner = nn.conv2d %expand, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x8x8xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  %project = nn.conv2d %inner, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x8x8xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
  func.return %dw, %dw24, %mult, %project : tensor<1x32x8x8xf32>, tensor<1x24x8x8xf32>, tensor<1x64x8x8xf32>, tensor<1x32x8x8xf32>
}

// CHECK:      %[[W0:.*]] = nn.constant dense_resource<{{.*}}> : tensor<32x32x3x3xf32>
// CHECK-NEXT: %dw = nn.conv2d %x, %[[W0]], %b {block_diagonal, placement_cost = "device {{[0-9.]+}} ms + DRAM round trip 0.0082 ms vs host [[H:[0-9.]+]] ms", {{.*}}groups = 1 : i64, relu}
// CHECK:      %[[W24:.*]] = nn.constant dense_resource<{{.*}}> : tensor<24x24x3x3xf32>
// CHECK-NEXT: %dw24 = nn.conv2d %y, %[[W24]], %b24 {block_diagonal, placement_cost = "device {{.*}} ms + DRAM round trip {{.*}} ms vs host {{.*}} ms", {{.*}}groups = 1 : i64}
// CHECK-NEXT: %mult = nn.conv2d %x, %w64, %b64 {{{.*}}groups = 32 : i64}
// CHECK-NOT:  placement_cost
// CHECK:      %expand = nn.conv2d %x, %w1, %b {channel_tiles = 16 : i64, {{.*}}} : (tensor<1x32x8x8xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x8xf32>
// CHECK-NEXT: %[[WB:.*]] = nn.constant dense_resource<{{.*}}> : tensor<32x16x3x3xf32>
// CHECK-NEXT: %inner = nn.conv2d %expand, %[[WB]], %b {block_diagonal, depthwise_over_blocks, placement_cost = "device {{.*}} ms + DRAM round trip 0.0000 ms vs host [[H]] ms", {{.*}}groups = 2 : i64, relu}
// CHECK-NOT:  nn.channel_slice %expand

// A grouped conv with several channels a group whose groups are not whole 16-kernel tiles
// (4 groups of 12 kernels over 6 channels each, ShuffleNet's 1x1 convs) becomes an ungrouped conv
// over all 24 channels, zero outside each kernel's group (`dense_groups = 4`), where it pays; one
// whose groups are whole tiles (2 groups of 16) stays grouped. It runs before the depthwise rule,
// so the depthwise conv between two such convs sees no round trip.

func.func @grouped(%x: tensor<1x24x16x16xf32>) -> (tensor<1x24x16x16xf32>, tensor<1x32x16x16xf32>) {
  %w1 = nn.constant dense<0.5> : tensor<48x6x1x1xf32>
  %b1 = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x3x3xf32>
  %w2 = nn.constant dense<0.5> : tensor<24x12x1x1xf32>
  %b2 = nn.constant dense<0.1> : tensor<24xf32>
  %w3 = nn.constant dense<0.5> : tensor<32x12x1x1xf32>
  %b3 = nn.constant dense<0.1> : tensor<32xf32>
  %g1 = nn.conv2d %x, %w1, %b1 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 4 : i64, relu} : (tensor<1x24x16x16xf32>, tensor<48x6x1x1xf32>, tensor<48xf32>) -> tensor<1x48x16x16xf32>
  %dw = nn.conv2d %g1, %wd, %b1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 48 : i64} : (tensor<1x48x16x16xf32>, tensor<48x1x3x3xf32>, tensor<48xf32>) -> tensor<1x48x16x16xf32>
  %g2 = nn.conv2d %dw, %w2, %b2 bypass %x {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 4 : i64, relu} : (tensor<1x48x16x16xf32>, tensor<24x12x1x1xf32>, tensor<24xf32>, tensor<1x24x16x16xf32>) -> tensor<1x24x16x16xf32>
  %tiles = nn.conv2d %x, %w3, %b3 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x24x16x16xf32>, tensor<32x12x1x1xf32>, tensor<32xf32>) -> tensor<1x32x16x16xf32>
  func.return %g2, %tiles : tensor<1x24x16x16xf32>, tensor<1x32x16x16xf32>
}

// CHECK-LABEL: func.func @grouped
// CHECK:       %[[W1:.*]] = nn.constant dense_resource<{{.*}}> : tensor<48x24x1x1xf32>
// CHECK-NEXT:  %g1 = nn.conv2d %x, %[[W1]], %b1 {dense_groups = 4 : i64, placement_cost = "device {{.*}}", {{.*}}groups = 1 : i64, relu}
// The 48-channel depthwise conv runs as 3 convs over 16-channel slices of %g1 (each gathers its
// slice: a pipelined trace per kernel row), concatenated by placement.
// CHECK:       %[[S0:.*]] = nn.channel_slice %g1 {start = 0 : i64, size = 16 : i64} : (tensor<1x48x16x16xf32>) -> tensor<1x16x16x16xf32>
// CHECK-NEXT:  %[[W0:.*]] = nn.constant dense_resource<{{.*}}> : tensor<16x16x3x3xf32>
// CHECK-NEXT:  %[[B0:.*]] = nn.constant dense_resource<{{.*}}> : tensor<16xf32>
// CHECK-NEXT:  %[[C0:.*]] = nn.conv2d %[[S0]], %[[W0]], %[[B0]] {block_diagonal, depthwise_slice = "0 of 3", placement_cost = "device {{.*}} ms + DRAM round trip 0.0000 ms vs host {{.*}} ms", {{.*}}groups = 1 : i64}
// CHECK:       nn.channel_slice %g1 {start = 32 : i64, size = 16 : i64}
// CHECK:       %[[C2:.*]] = nn.conv2d {{.*}}depthwise_slice = "2 of 3"
// CHECK-NEXT:  %dw = nn.concat %[[C0]], {{.*}}, %[[C2]] {axis = 1 : i64} : {{.*}} -> tensor<1x48x16x16xf32>
// CHECK:       %[[W2:.*]] = nn.constant dense_resource<{{.*}}> : tensor<24x48x1x1xf32>
// CHECK-NEXT:  %g2 = nn.conv2d %dw, %[[W2]], %b2 bypass %x {dense_groups = 4 : i64, {{.*}}groups = 1 : i64, relu}
// CHECK-NEXT:  %tiles = nn.conv2d %x, %w3, %b3 {strides = {{.*}}groups = 2 : i64}

// Channel-tile-major input: a 48-channel depthwise conv whose input only an ungrouped COOP 1x1
// conv writes and only it reads has that producer write the input channel-tile-major
// (`channel_tiles = 16`: three 16-channel blocks, an (H, W, 16) run each, written by the one conv
// through its kernel tiles' output step), one grouped conv over them reading a block a group whole
// (no gather), when the estimate of the producer and that conv beats the producer and the best
// (H, W, C) form by 3%, and beats the 16-channel slices over the same blocks (each a layer).

func.func @tiled(%x: tensor<1x16x14x14xf32>) -> tensor<1x48x14x14xf32> {
  %w1 = nn.constant dense<0.25> : tensor<48x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x3x3xf32>
  %w2 = nn.constant dense<0.25> : tensor<48x48x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x14x14xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %dw = nn.conv2d %expand, %wd, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x14x14xf32>, tensor<48x1x3x3xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %project = nn.conv2d %dw, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x14x14xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  func.return %project : tensor<1x48x14x14xf32>
}

// CHECK-LABEL: func.func @tiled
// CHECK:       %expand = nn.conv2d %x, %w1, %b {channel_tiles = 16 : i64, {{.*}}relu} : (tensor<1x16x14x14xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
// CHECK-NOT:   channel_block
// CHECK-NEXT:  %[[WT:.*]] = nn.constant dense_resource<{{.*}}> : tensor<48x16x3x3xf32>
// CHECK-NEXT:  %dw = nn.conv2d %expand, %[[WT]], %b {block_diagonal, depthwise_over_blocks, {{.*}}groups = 3 : i64, relu}
// CHECK-NOT:   depthwise_slice
// CHECK-NEXT:  %project = nn.conv2d %dw,

// Where the channels are not whole 16-channel blocks (24: one conv cannot write a last half block
// and leave the rest of it alone), or the producer is an INDP stem whose 16-kernel blocks run INDP
// too (3 input channels: the one conv's channel-tile-major write-back would run it COOP), the
// producer becomes one conv per block (`channel_block`), each slice reading its block's tensor.

func.func @narrow(%x: tensor<1x24x28x28xf32>) -> tensor<1x24x28x28xf32> {
  %w1 = nn.constant dense<0.25> : tensor<24x24x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<24xf32>
  %wd = nn.constant dense<0.5> : tensor<24x1x3x3xf32>
  %w2 = nn.constant dense<0.25> : tensor<24x24x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x24x28x28xf32>, tensor<24x24x1x1xf32>, tensor<24xf32>) -> tensor<1x24x28x28xf32>
  %dw = nn.conv2d %expand, %wd, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 24 : i64, relu} : (tensor<1x24x28x28xf32>, tensor<24x1x3x3xf32>, tensor<24xf32>) -> tensor<1x24x28x28xf32>
  %project = nn.conv2d %dw, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x24x28x28xf32>, tensor<24x24x1x1xf32>, tensor<24xf32>) -> tensor<1x24x28x28xf32>
  func.return %project : tensor<1x24x28x28xf32>
}

// CHECK-LABEL: func.func @narrow
// CHECK-NOT:   channel_tiles
// CHECK:       %[[B0:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {channel_block = "0 of 2", {{.*}}relu} : (tensor<1x24x28x28xf32>, tensor<16x24x1x1xf32>, tensor<16xf32>) -> tensor<1x16x28x28xf32>
// CHECK:       %[[B1:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {channel_block = "1 of 2", {{.*}}relu} : (tensor<1x24x28x28xf32>, tensor<8x24x1x1xf32>, tensor<8xf32>) -> tensor<1x8x28x28xf32>
// CHECK:       nn.conv2d %[[B0]], %{{.*}}, %{{.*}} {block_diagonal, depthwise_slice = "0 of 2"
// CHECK:       nn.conv2d %[[B1]], %{{.*}}, %{{.*}} {block_diagonal, depthwise_slice = "1 of 2"

func.func @stem(%x: tensor<1x3x96x96xf32>) -> tensor<1x32x48x48xf32> {
  %w1 = nn.constant dense<0.25> : tensor<32x3x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<32xf32>
  %wd = nn.constant dense<0.5> : tensor<32x1x3x3xf32>
  %w2 = nn.constant dense<0.25> : tensor<32x32x1x1xf32>
  %stem = nn.conv2d %x, %w1, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x3x96x96xf32>, tensor<32x3x3x3xf32>, tensor<32xf32>) -> tensor<1x32x48x48xf32>
  %dw = nn.conv2d %stem, %wd, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 32 : i64, relu} : (tensor<1x32x48x48xf32>, tensor<32x1x3x3xf32>, tensor<32xf32>) -> tensor<1x32x48x48xf32>
  %project = nn.conv2d %dw, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x32x48x48xf32>, tensor<32x32x1x1xf32>, tensor<32xf32>) -> tensor<1x32x48x48xf32>
  func.return %project : tensor<1x32x48x48xf32>
}

// CHECK-LABEL: func.func @stem
// CHECK-NOT:   channel_tiles
// CHECK:       %[[B0:.*]] = nn.conv2d %x, %{{.*}}, %{{.*}} {channel_block = "0 of 2", {{.*}}relu} : (tensor<1x3x96x96xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x16x48x48xf32>
// CHECK:       nn.conv2d %[[B0]], %{{.*}}, %{{.*}} {block_diagonal, depthwise_slice = "0 of 2"

// Where the producer's result is read elsewhere too (a residual input), it stays one conv
// writing channel-innermost and the slices gather their channels.

func.func @shared(%x: tensor<1x16x14x14xf32>) -> tensor<1x48x14x14xf32> {
  %w1 = nn.constant dense<0.25> : tensor<48x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x3x3xf32>
  %w2 = nn.constant dense<0.25> : tensor<48x48x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x14x14xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %dw = nn.conv2d %expand, %wd, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x14x14xf32>, tensor<48x1x3x3xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %project = nn.conv2d %dw, %w2, %b bypass %expand {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x14x14xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>, tensor<1x48x14x14xf32>) -> tensor<1x48x14x14xf32>
  func.return %project : tensor<1x48x14x14xf32>
}

// CHECK-LABEL: func.func @shared
// CHECK:       %expand = nn.conv2d %x, %w1, %b
// CHECK-NOT:   channel_tiles
// CHECK-NOT:   channel_block
// CHECK:       nn.channel_slice %expand {start = 0 : i64, size = 16 : i64}

// Where every reader of the producer's result is a depthwise conv (PP-PicoDet's 5x5/2 and 5x5/1
// after one 1x1), they are decided together, as the tensor has one layout: the producer writes the
// blocks once and each reader takes its form over them (here both one grouped layer), when that
// beats the producer and each reader's best (H, W, C) form by 3%. A reader of the whole tensor as
// it lies (a 1x1 conv) keeps it channel-innermost.

func.func @two_readers(%x: tensor<1x16x14x14xf32>) -> (tensor<1x48x7x7xf32>, tensor<1x48x14x14xf32>) {
  %w1 = nn.constant dense<0.25> : tensor<48x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x5x5xf32>
  %w2 = nn.constant dense<0.25> : tensor<48x48x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x14x14xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %down = nn.conv2d %expand, %wd, %b {strides = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x14x14xf32>, tensor<48x1x5x5xf32>, tensor<48xf32>) -> tensor<1x48x7x7xf32>
  %same = nn.conv2d %expand, %wd, %b {strides = array<i64: 1, 1>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x14x14xf32>, tensor<48x1x5x5xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %p1 = nn.conv2d %down, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x7x7xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x7x7xf32>
  %p2 = nn.conv2d %same, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x14x14xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  func.return %p1, %p2 : tensor<1x48x7x7xf32>, tensor<1x48x14x14xf32>
}

// CHECK-LABEL: func.func @two_readers
// CHECK:       %expand = nn.conv2d %x, %w1, %b {channel_tiles = 16 : i64, {{.*}}relu}
// CHECK-NEXT:  %[[WA:.*]] = nn.constant dense_resource<{{.*}}> : tensor<48x16x5x5xf32>
// CHECK-NEXT:  %down = nn.conv2d %expand, %[[WA]], %b {block_diagonal, depthwise_over_blocks, {{.*}}groups = 3 : i64, relu}
// CHECK-NEXT:  %[[WB:.*]] = nn.constant dense_resource<{{.*}}> : tensor<48x16x5x5xf32>
// CHECK-NEXT:  %same = nn.conv2d %expand, %[[WB]], %b {block_diagonal, depthwise_over_blocks, {{.*}}groups = 3 : i64, relu}

func.func @mixed_readers(%x: tensor<1x16x14x14xf32>) -> (tensor<1x48x7x7xf32>, tensor<1x48x14x14xf32>) {
  %w1 = nn.constant dense<0.25> : tensor<48x16x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<48xf32>
  %wd = nn.constant dense<0.5> : tensor<48x1x5x5xf32>
  %w2 = nn.constant dense<0.25> : tensor<48x48x1x1xf32>
  %expand = nn.conv2d %x, %w1, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x14x14xf32>, tensor<48x16x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  %down = nn.conv2d %expand, %wd, %b {strides = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 1, 1>, groups = 48 : i64, relu} : (tensor<1x48x14x14xf32>, tensor<48x1x5x5xf32>, tensor<48xf32>) -> tensor<1x48x7x7xf32>
  %p1 = nn.conv2d %down, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x7x7xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x7x7xf32>
  %p2 = nn.conv2d %expand, %w2, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x48x14x14xf32>, tensor<48x48x1x1xf32>, tensor<48xf32>) -> tensor<1x48x14x14xf32>
  func.return %p1, %p2 : tensor<1x48x7x7xf32>, tensor<1x48x14x14xf32>
}

// CHECK-LABEL: func.func @mixed_readers
// CHECK:       %expand = nn.conv2d %x, %w1, %b
// CHECK-NOT:   channel_tiles
// CHECK:       %down = nn.conv2d %expand, %{{.*}}, %b {block_diagonal, placement_cost
// CHECK-NOT:   channel_tiles
