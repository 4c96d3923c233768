// RUN: snow-opt %s | filecheck %s
// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s

// A tile body written `{}` is to be derived (at tile-to-asm); braces on separate lines with no op
// between are a body with no ops (what deleting a tile's only load leaves), checked as written.
// Each prints as it was written and round-trips, in custom and generic form.

tile.layer @pool maxpool attributes {} {
  tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 2>, overlap = 0 : i64, cu = -1 : i64} {}
  tile.maps_tile attributes {out_rows = array<i64: 1, 2>, in_rows = array<i64: 2, 4>, overlap = 0 : i64, cu = -1 : i64} {
  }
  tile.maps_tile attributes {out_rows = array<i64: 2, 3>, in_rows = array<i64: 4, 6>, overlap = 0 : i64, cu = -1 : i64} { }
}

// CHECK:      tile.maps_tile attributes {out_rows = array<i64: 0, 1>, in_rows = array<i64: 0, 2>, overlap = 0 : i64, cu = -1 : i64} {}
// CHECK-NEXT: tile.maps_tile attributes {out_rows = array<i64: 1, 2>, in_rows = array<i64: 2, 4>, overlap = 0 : i64, cu = -1 : i64} {
// CHECK-NEXT: }
// CHECK-NEXT: tile.maps_tile attributes {out_rows = array<i64: 2, 3>, in_rows = array<i64: 4, 6>, overlap = 0 : i64, cu = -1 : i64} {}
