// RUN: snow-opt %s -p balance-loads | filecheck %s
// RUN: snow-opt %s -p 'balance-loads{units=2}' | filecheck %s --check-prefix=TWO
// RUN: snow-run %s --quiet --report - | filecheck %s --check-prefix=BEFORE
// RUN: snow-opt %s -p balance-loads -o %t.mlir && snow-run %t.mlir --quiet --report - | filecheck %s --check-prefix=AFTER
// RUN: not snow-opt %s -p 'balance-loads{units=9}' 2>&1 | filecheck %s --check-prefix=BADUNITS
// RUN: not snow-opt %s -p 'balance-loads{metric=max}' 2>&1 | filecheck %s --check-prefix=BADMETRIC

// A 32 KB maps strip and four 2 KB kernels, all on load unit 0 as tile-to-asm writes them,
// then the MAC that reads the strip. One unit moves 8 B/cycle of the 16.8 the bus has: the
// pass splits the strip into parts no larger than a unit's fair share of the group (stepping
// the address registers and restoring them after) and spreads everything largest-first.

snowflake_asm.segment input @x at 0 size 65536
snowflake_asm.segment input @k at 65536 size 8192
snowflake_asm.program @p {
  snowflake_asm.movi r16, 0
  snowflake_asm.movi r19, 0
  snowflake_asm.movi r18, 16384
  snowflake_asm.ld maps r16, r19, r18 unit 0 to all
  snowflake_asm.movi r18, 1024
  snowflake_asm.movi r19, 65536
  snowflake_asm.ld weights r16, r19, r18 unit 0 to 0
  snowflake_asm.addi r19, r19, 2048
  snowflake_asm.ld weights r16, r19, r18 unit 0 to 1
  snowflake_asm.addi r19, r19, 2048
  snowflake_asm.ld weights r16, r19, r18 unit 0 to 2
  snowflake_asm.addi r19, r19, 2048
  snowflake_asm.ld weights r16, r19, r18 unit 0 to 3
  snowflake_asm.mac coop r0, r0, r0 trace 16
}

// the strip: 4 parts of 4096 elements (the group's 20480 elements over 4 units = 5120 each), one
// kernel with each: every unit moves 5120 elements, C_L = 0
// CHECK:      snowflake_asm.program @p attributes {loads_balanced, load_imbalance_pct = 0.000000e+00 : f64} {
// CHECK:        snowflake_asm.movi r18, 4096
// CHECK-NEXT:   snowflake_asm.ld maps r16, r19, r18 unit 0 to all
// CHECK-NEXT:   snowflake_asm.addi r16, r16, 4096
// CHECK-NEXT:   snowflake_asm.addi r19, r19, 8192
// CHECK-NEXT:   snowflake_asm.ld maps r16, r19, r18 unit 1 to all
// CHECK:        snowflake_asm.ld maps r16, r19, r18 unit 3 to all
// CHECK-NEXT:   snowflake_asm.addi r16, r16, -12288
// CHECK-NEXT:   snowflake_asm.addi r19, r19, -24576
// CHECK-NEXT:   snowflake_asm.movi r18, 16384
// CHECK:        snowflake_asm.ld weights r16, r19, r18 unit 0 to 0
// CHECK:        snowflake_asm.ld weights r16, r19, r18 unit 1 to 1
// CHECK:        snowflake_asm.ld weights r16, r19, r18 unit 2 to 2
// CHECK:        snowflake_asm.ld weights r16, r19, r18 unit 3 to 3

// TWO-NOT:    unit 2
// TWO-NOT:    unit 3

// BADUNITS:   balance-loads: units must be 1..4, not 9
// BADMETRIC:  balance-loads: metric must be cl, not 'max'

// BEFORE:     "cycles": 5326,
// AFTER:      "cycles": 2622,
