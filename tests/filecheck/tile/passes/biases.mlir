// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/narrow.json},nn-to-tile{hw=%inputs/narrow.json},tile-loop-order{hw=%inputs/narrow.json}' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/narrow.json},nn-to-tile{hw=%inputs/narrow.json},tile-loop-order{hw=%inputs/narrow.json},tile-to-asm{hw=%inputs/narrow.json}' | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'nn-prepare{hw=%inputs/narrow.json},nn-to-tile{hw=%inputs/narrow.json},tile-loop-order{hw=%inputs/narrow.json}' | sed -e 's/, biases = "maps"//' | not snow-opt -p 'tile-to-asm{hw=%inputs/narrow.json}' 2>&1 | filecheck %s --check-prefix=EDIT
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s --check-prefix=STOCK

// Where the weight image keeps the biases (`biases` on the weights region, issue 38). A 1x1 conv,
// 248 -> 64 channels over 8 x 8, on a machine of 1024-word weights buffers and 4096-word maps banks
// (narrow.json): its four kernel tiles are 4 x 264 words with a 16-word bias block after each kernel,
// too many to stay resident (double-buffered, re-sent for each of the strips); without the blocks,
// 4 x 248 = 992 words stay resident. The planner prices both and keeps the biases in the maps
// buffer: the image holds the kernels alone, then the bias block (per kernel tile its 16 biases and
// 16 zeros, 128 words), which the kernel tile loads once to the top of the maps buffer (word 8064:
// the two 4096-word banks shortened by 64 words each); the maps tiles sit in the shortened banks.

func.func @main(%x: tensor<1x248x8x8xf32>) -> tensor<1x64x8x8xf32> {
  %w = nn.constant dense<0.02> : tensor<64x248x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "reduce", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x248x8x8xf32>, tensor<64x248x1x1xf32>, tensor<64xf32>) -> tensor<1x64x8x8xf32>
  func.return %y : tensor<1x64x8x8xf32>
}

// CHECK:      tile.dram_region @reduce.weights {offset = 31744 : i64, size = 32004 : i64, label = "weights", value = dense_resource<reduce_w> : tensor<16002xi16>, packing = #tile<mode COOP>, packed_kernels = 16 : i64, biases = "maps"}
// CHECK:      tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 4 : i64, resident} {
// CHECK-NEXT:   tile.load {buffer = #tile<buffer weights>, length = 248 : i64, dram_addr = 31744 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 0 : i64
// CHECK:        tile.load {buffer = #tile<buffer weights>, length = 248 : i64, dram_addr = 39184 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 15 : i64
// CHECK-NEXT:   tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 63488 : i64, buf_addr = 8064 : i64, unit = 0 : i64, select = 127 : i64
// CHECK-NEXT: }
// CHECK:      tile.maps_tile attributes {out_rows = array<i64: 2, 4>
// CHECK-NEXT:   tile.load {buffer = #tile<buffer maps>, length = 3968 : i64, dram_addr = 7936 : i64, buf_addr = 4032 : i64

// The bias block loads once, to every CU, before the first maps; each kernel tile's biases are
// read at 8064 + 2 x its first channel (r21, the tile's output byte offset) by `vmov coop mbias`.
// ASM:       snowflake_asm.movi r16, 8064
// ASM-NEXT:  snowflake_asm.movi r19, 63488
// ASM-NEXT:  snowflake_asm.movi r18, 128
// ASM-NEXT:  snowflake_asm.ld maps r16, r19, r18 unit 0 to all
// ASM:       snowflake_asm.addi r16, r21, 8064
// ASM-NEXT:  snowflake_asm.vmov coop mbias r16
// ASM-NOT:   snowflake_asm.vmov coop bias

// `biases` removed (kernel) with the image and tiles kept: refused in one line, naming what to edit
// EDIT:      layer @reduce: tile.dram_region @reduce.weights: biases kernel: the image keeps them the other way (write the kernel tile's body empty `{}` to repack it, and the maps tiles' to place them for the buffer it leaves)

// On the default machine (4096-word weights buffers) the stock layout holds the kernels as well:
// the layer keeps it, unpriced, and its image is the one it always was.
// STOCK:     tile.dram_region @reduce.weights {offset = 31744 : i64, size = 33792 : i64, label = "weights", value = dense_resource<reduce_w> : tensor<16896xi16>, packing = #tile<mode COOP>, packed_kernels = 16 : i64}
// STOCK-NOT: biases
