// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s

// Every tile op (the paper's Figure 2 objects) in custom and generic form.

tile.layer @conv2 conv attributes {mode = #tile<mode COOP>, loop_order = #tile<loop_order Kloop>, relu} {
  tile.dram_region @conv2.in {offset = 0 : i64, size = 186624 : i64, label = "maps"}
  tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 12 : i64} {
    tile.load {buffer = #tile<buffer weights>, length = 3200 : i64, dram_addr = 4096 : i64, buf_addr = 0 : i64, unit = 1 : i64, select = 127 : i64}
  }
  tile.maps_tile attributes {out_rows = array<i64: 0, 4>, in_rows = array<i64: 0, 8>, overlap = 4 : i64, cu = -1 : i64} {
    tile.load {buffer = #tile<buffer maps>, length = 1000 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
    tile.window {trace_length = 320 : i64, rows = 5 : i64, repeat_x = 27 : i64, repeat_y = 4 : i64, offset_x = 64 : i64, offset_y = 1984 : i64, start = 0 : i64, out_addr = 0 : i64, bias_vmov}
  }
}
tile.layer @pool1 maxpool attributes {loop_order = #tile<loop_order Mloop>} {
  tile.dram_region @pool1.out {offset = 65536 : i64, size = 1024 : i64, label = "output"}
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 1 : i64, cu = 2 : i64} {
    tile.window {trace_length = 3 : i64, rows = 3 : i64, repeat_x = 13 : i64, repeat_y = 1 : i64, offset_x = 32 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 65536 : i64}
  }
}
tile.layer @res2a conv attributes {mode = #tile<mode INDP>, loop_order = #tile<loop_order Mloop>, mloop_bytes = 1000 : i64, kloop_bytes = 2000 : i64} {
  tile.dram_region @res2a.bypass {offset = 0 : i64, size = 64 : i64, label = "bypass"}
  tile.dram_region @res2a.w {offset = 64 : i64, size = 64 : i64, label = "weights"}
  tile.dram_region @res2a.b {offset = 128 : i64, size = 64 : i64, label = "bias"}
  tile.maps_tile attributes {out_rows = array<i64: 0, 2>, in_rows = array<i64: 0, 2>, overlap = 0 : i64, cu = 0 : i64} {
    tile.window {trace_length = 16 : i64, rows = 1 : i64, repeat_x = 2 : i64, repeat_y = 2 : i64, offset_x = 16 : i64, offset_y = 32 : i64, start = 32768 : i64, out_addr = 0 : i64, bias_vmov, bypass_vmov}
  }
}
tile.layer @fc conv attributes {mode = #tile<mode COOP>} {
  tile.dram_region @fc.w {offset = 0 : i64, size = 8192 : i64, label = "weights"}
}
tile.layer @sum maxpool {
  tile.dram_region @sum.out {offset = 0 : i64, size = 64 : i64, label = "output"}
}
tile.dram_plan {
  tile.tensor @conv2.in {offset = 0 : i64, size = 186624 : i64, live = array<i64: 0, 1>, role = "activation"}
}

// CHECK: builtin.module {
// CHECK-NEXT: tile.layer @conv2 conv attributes {mode = #tile<mode COOP>, loop_order = #tile<loop_order Kloop>, relu} {
// CHECK-NEXT: tile.dram_region @conv2.in {offset = 0 : i64, size = 186624 : i64, label = "maps"}
// CHECK-NEXT: tile.kernel_tile attributes {first = 0 : i64, count = 16 : i64, repeat = 12 : i64} {
// CHECK-NEXT: tile.load {buffer = #tile<buffer weights>, length = 3200 : i64, dram_addr = 4096 : i64, buf_addr = 0 : i64, unit = 1 : i64, select = 127 : i64}
// CHECK-NEXT: }
// CHECK-NEXT: tile.maps_tile attributes {out_rows = array<i64: 0, 4>, in_rows = array<i64: 0, 8>, overlap = 4 : i64, cu = -1 : i64} {
// CHECK-NEXT: tile.load {buffer = #tile<buffer maps>, length = 1000 : i64, dram_addr = 0 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 127 : i64}
// CHECK-NEXT: tile.window {trace_length = 320 : i64, rows = 5 : i64, repeat_x = 27 : i64, repeat_y = 4 : i64, offset_x = 64 : i64, offset_y = 1984 : i64, start = 0 : i64, out_addr = 0 : i64, bias_vmov}
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: tile.layer @pool1 maxpool attributes {loop_order = #tile<loop_order Mloop>} {
// CHECK-NEXT: tile.dram_region @pool1.out {offset = 65536 : i64, size = 1024 : i64, label = "output"}
// CHECK-NEXT: tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 3>, overlap = 1 : i64, cu = 2 : i64} {
// CHECK-NEXT: tile.window {trace_length = 3 : i64, rows = 3 : i64, repeat_x = 13 : i64, repeat_y = 1 : i64, offset_x = 32 : i64, offset_y = 0 : i64, start = 0 : i64, out_addr = 65536 : i64}
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: tile.layer @res2a conv attributes {mode = #tile<mode INDP>, loop_order = #tile<loop_order Mloop>, mloop_bytes = 1000 : i64, kloop_bytes = 2000 : i64} {
// CHECK-NEXT: tile.dram_region @res2a.bypass {offset = 0 : i64, size = 64 : i64, label = "bypass"}
// CHECK-NEXT: tile.dram_region @res2a.w {offset = 64 : i64, size = 64 : i64, label = "weights"}
// CHECK-NEXT: tile.dram_region @res2a.b {offset = 128 : i64, size = 64 : i64, label = "bias"}
// CHECK-NEXT: tile.maps_tile attributes {out_rows = array<i64: 0, 2>, in_rows = array<i64: 0, 2>, overlap = 0 : i64, cu = 0 : i64} {
// CHECK-NEXT: tile.window {trace_length = 16 : i64, rows = 1 : i64, repeat_x = 2 : i64, repeat_y = 2 : i64, offset_x = 16 : i64, offset_y = 32 : i64, start = 32768 : i64, out_addr = 0 : i64, bias_vmov, bypass_vmov}
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: tile.layer @fc conv attributes {mode = #tile<mode COOP>} {
// CHECK-NEXT: tile.dram_region @fc.w {offset = 0 : i64, size = 8192 : i64, label = "weights"}
// CHECK-NEXT: }
// CHECK-NEXT: tile.layer @sum maxpool {
// CHECK-NEXT: tile.dram_region @sum.out {offset = 0 : i64, size = 64 : i64, label = "output"}
// CHECK-NEXT: }
// CHECK-NEXT: tile.dram_plan {
// CHECK-NEXT: tile.tensor @conv2.in {offset = 0 : i64, size = 186624 : i64, live = array<i64: 0, 1>, role = "activation"}
// CHECK-NEXT: }
// CHECK-NEXT: }
