// RUN: snow-opt %s -p schedule-asm | filecheck %s
// RUN: snow-run %s --quiet --report - | filecheck %s --check-prefix=BEFORE
// RUN: snow-opt %s -p schedule-asm -o %t.mlir && snow-run %t.mlir --quiet --report - | filecheck %s --check-prefix=AFTER

// Straight-line bookkeeping as a generator writes it: each address computed right before its
// use, so every ADDI waits 2 cycles for the result before it (a scalar result is readable 3
// cycles after its dispatch). The pass interleaves the independent chains; the vector ops keep
// their order, and the MAC that reads r3 and r13 still comes after both are computed.

snowflake_asm.segment input @x at 0 size 4096
snowflake_asm.segment output @y at 4096 size 4096
snowflake_asm.program @p {
  snowflake_asm.movi r1, 16
  snowflake_asm.addi r2, r1, 16
  snowflake_asm.addi r3, r2, 16
  snowflake_asm.movi r11, 4096
  snowflake_asm.addi r12, r11, 32
  snowflake_asm.addi r13, r12, 32
  snowflake_asm.mac coop r13, r3, r0 trace 16 wb
  snowflake_asm.movi r4, 64
  snowflake_asm.addi r5, r4, 16
  snowflake_asm.mac coop r13, r5, r0 trace 16 wb
}

// CHECK:      snowflake_asm.program @p {
// CHECK-NEXT:   snowflake_asm.movi r1, 16
// CHECK-NEXT:   snowflake_asm.movi r11, 4096
// CHECK-NEXT:   snowflake_asm.movi r4, 64
// CHECK-NEXT:   snowflake_asm.addi r2, r1, 16
// CHECK-NEXT:   snowflake_asm.addi r12, r11, 32
// CHECK-NEXT:   snowflake_asm.addi r5, r4, 16
// CHECK-NEXT:   snowflake_asm.addi r3, r2, 16
// CHECK-NEXT:   snowflake_asm.addi r13, r12, 32
// CHECK-NEXT:   snowflake_asm.mac coop r13, r3, r0 trace 16 wb
// CHECK-NEXT:   snowflake_asm.mac coop r13, r5, r0 trace 16 wb
// CHECK-NEXT: }

// BEFORE:     "cycles": 72,
// AFTER:      "cycles": 60,
