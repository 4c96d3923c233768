// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' | filecheck %s
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=INDP},tile-loop-order' | filecheck %s --check-prefix=FORCED
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile{mode=COOP},tile-loop-order' | filecheck %s --check-prefix=COOP
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | filecheck %s --check-prefix=ASM
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm' | grep -B1 'vmov indp stride' | filecheck %s --check-prefix=STRIDE
// RUN: sed -e 's/x16x/x6x/g' %s | not snow-opt -p 'nn-prepare,nn-to-tile{mode=INDP}' 2>&1 | filecheck %s --check-prefix=SIX

// A residual 1x1 conv (the end of a bottleneck, 32 -> 64 channels, the block's add fused into
// its write-back): INDP with the CUs splitting the 16 output columns, 4 each, so each CU reads
// its bypass where its write-back goes (vmov stride = 4 columns x 64 channels x 2 bytes).

func.func @main(%x: tensor<1x64x8x16xf32>) -> tensor<1x64x8x16xf32> {
  %w0 = nn.constant dense<0.02> : tensor<32x64x1x1xf32>
  %b0 = nn.constant dense<0.1> : tensor<32xf32>
  %r = nn.conv2d %x, %w0, %b0 {onnx_node = "reduce", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x64x8x16xf32>, tensor<32x64x1x1xf32>, tensor<32xf32>) -> tensor<1x32x8x16xf32>
  %w1 = nn.constant dense<0.03> : tensor<64x32x1x1xf32>
  %b1 = nn.constant dense<-0.1> : tensor<64xf32>
  %y = nn.conv2d %r, %w1, %b1 bypass %x {onnx_node = "expand", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x32x8x16xf32>, tensor<64x32x1x1xf32>, tensor<64xf32>, tensor<1x64x8x16xf32>) -> tensor<1x64x8x16xf32>
  func.return %y : tensor<1x64x8x16xf32>
}

// CHECK:      tile.layer @reduce conv attributes {{{.*}}mode = #tile<mode COOP>
// CHECK:      tile.layer @expand conv attributes {mode = #tile<mode INDP>, {{.*}}maps_buffering = #tile<buffering double>, cu_split = #tile<cu_split cols>, loop_order = #tile<loop_order Kloop>}
// CHECK:        tile.dram_region @expand.bypass
// CHECK:        tile.kernel_tile attributes {first = 0 : i64, count = 64 : i64, repeat = 1 : i64
// one row group of 8 rows: per row, each CU's LD of its 4 input pixels (4 x 32 words), select c
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, 8>, in_rows = array<i64: 0, 8>, overlap = 0 : i64, cu = -1 : i64} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 0 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 256 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 1 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 512 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 2 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = 128 : i64, dram_addr = 768 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 3 : i64
// CHECK:          tile.window {trace_length = 32 : i64, rows = 1 : i64, repeat_x = 4 : i64, repeat_y = 8 : i64, offset_x = 32 : i64, offset_y = 128 : i64, {{.*}}bypass_vmov}

// mode=INDP on every layer: the plain 1x1 splits its rows, the residual one its columns
// FORCED:     tile.layer @reduce conv attributes {mode = #tile<mode INDP>, {{.*}}maps_buffering = #tile<buffering double>, loop_order
// FORCED:     tile.layer @expand conv attributes {mode = #tile<mode INDP>, {{.*}}cu_split = #tile<cu_split cols>

// COOP:       tile.layer @expand conv attributes {mode = #tile<mode COOP>, {{.*}}maps_buffering = #tile<buffering {{[a-z]+}}>{{.*}}loop_order

// ASM:        snowflake_asm.image @expand
// ASM:        snowflake_asm.vmov indp stride
// ASM:        snowflake_asm.vmov indp bypass r22
// ASM-NEXT:   snowflake_asm.mac indp r1, r2, r3 trace 32 wb relu

// STRIDE:      snowflake_asm.movi r16, 512{{$}}
// STRIDE-NEXT: snowflake_asm.vmov indp stride r16

// SIX: nn-to-tile: layer 'expand' (nn.conv2d): INDP with a residual bypass needs output columns a multiple of the 4 CUs (not 6)
