// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=INDP},tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=INDP},tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=INDP},tile-loop-order' | sed -e 's/, biases = "maps"//' -e '/tile.kernel_tile attributes/,/^    }$/c\    tile.kernel_tile attributes {first = 0 : i64, count = 64 : i64, repeat = 1 : i64} {}' | not snow-opt -p 'tile-to-asm' 2>&1 | filecheck %s --check-prefix=KERNEL

// A residual 1x1 conv over 256 channels run INDP with the CUs splitting the columns: 16 interleaved
// kernels of 256 taps fill a vMAC's 4096-word weights buffer, so with their 16 biases (4112 words)
// it could not run INDP at all; with the biases in the maps buffer it does. Every CU holds the same
// kernels (weights broadcast), so `vmov indp mbias ... shared` reads one bias block for all CUs.

func.func @main(%x: tensor<1x256x8x8xf32>, %r: tensor<1x64x8x8xf32>) -> tensor<1x64x8x8xf32> {
  %w = nn.constant dense<0.02> : tensor<64x256x1x1xf32>
  %b = nn.constant dense<0.1> : tensor<64xf32>
  %y = nn.conv2d %x, %w, %b bypass %r {onnx_node = "expand", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x256x8x8xf32>, tensor<64x256x1x1xf32>, tensor<64xf32>, tensor<1x64x8x8xf32>) -> tensor<1x64x8x8xf32>
  func.return %y : tensor<1x64x8x8xf32>
}

// CHECK:      tile.layer @expand conv attributes {mode = #tile<mode INDP>
// CHECK-SAME: cu_split = #tile<cu_split cols>
// CHECK:      tile.dram_region @expand.weights {{{.*}}packing = #tile<mode INDP>, packed_kernels = 64 : i64, biases = "maps"}
// CHECK:      tile.load {buffer = #tile<buffer weights>, length = 4096 : i64, dram_addr = 32768 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 16 : i64
// CHECK:      tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 65536 : i64, buf_addr = 65408 : i64, unit = 0 : i64, select = 127 : i64

// ASM:       snowflake_asm.vmov indp stride r16
// ASM:       snowflake_asm.vmov indp mbias r16 shared
// ASM:       snowflake_asm.vmov indp bypass r22

// `biases` removed and the kernel tile re-derived: the image repacks with the bias blocks, which no
// longer fit: refused in one line, saying what would
// KERNEL:    layer @expand: kernel tile: 4112 words a kernel exceed the 4096-word buffer (without their bias blocks, biases = maps: 4096)
