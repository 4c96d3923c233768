// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order' -o %t.mlir
// RUN: filecheck %s < %t.mlir
// RUN: snow-run %t.mlir --check --quiet --report - | filecheck %s --check-prefix=EXACT
// RUN: snow-opt %t.mlir -p 'tile-rows{rows=1}' | filecheck %s --check-prefix=ROWS

// A 3x3 conv over 16 channels x 4200 columns: one input row is 67200 words, more than the
// 65536-word maps buffer, so no row strip holds the kernel's 3 rows. The planner cuts the output
// columns into bands (maps tiles of rows x columns): each band reads its input columns plus the
// kernel's halo (neighbouring bands share kw - sx = 2 input columns), loads each input row
// 4200 x 16 words apart and writes its columns of output rows 4200 x 16 words apart.

func.func @main(%x: tensor<1x16x3x4200xf32>) -> tensor<1x16x3x4200xf32> {
  %w = nn.constant dense<0.02> : tensor<16x16x3x3xf32>
  %b = nn.constant dense<0.1> : tensor<16xf32>
  %y = nn.conv2d %x, %w, %b {onnx_node = "wide", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x3x4200xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x3x4200xf32>
  func.return %y : tensor<1x16x3x4200xf32>
}

// The first band: output columns [0, x1) from input columns [0, x1 + 1) (the left padding is
// the band's own, its right halo column is the next band's first); one LD per input row, rows
// 4200 x 16 x 2 = 134400 bytes apart; the window writes output rows that far apart too.
// CHECK:      tile.layer @wide conv
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, [[Y:[0-9]+]]>, in_rows = array<i64: 0, {{[0-9]+}}>, overlap = 0 : i64, cu = -1 : i64, out_cols = array<i64: 0, [[X1:[0-9]+]]>, in_cols = array<i64: 0, {{[0-9]+}}>} {
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = {{[0-9]+}} : i64, dram_addr = 0 : i64, buf_addr = 0 : i64
// CHECK-NEXT:     tile.load {buffer = #tile<buffer maps>, length = {{[0-9]+}} : i64, dram_addr = 134400 : i64,
// The second band starts where the first ends and reads 2 input columns of the first's.
// CHECK:        tile.maps_tile attributes {out_rows = array<i64: 0, {{[0-9]+}}>, {{.*}}out_cols = array<i64: [[X1]], {{[0-9]+}}>
// CHECK:        out_cols = array<i64: {{[0-9]+}}, 4200>

// EXACT: "golden_bit_exact": true

// tile-rows splits each band's tiles into one-row tiles, keeping the band's columns.
// ROWS:       tile.maps_tile attributes {out_rows = array<i64: 0, 1>, {{.*}}out_cols = array<i64: 0, [[B:[0-9]+]]>} {}
// ROWS-NEXT:  tile.maps_tile attributes {out_rows = array<i64: 1, 2>, {{.*}}out_cols = array<i64: 0, [[B]]>
