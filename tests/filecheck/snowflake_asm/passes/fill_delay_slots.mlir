// RUN: snow-opt %s -p fill-delay-slots | filecheck %s
// RUN: snow-run %s --quiet --report - | filecheck %s --check-prefix=BEFORE
// RUN: snow-opt %s -p fill-delay-slots -o %t.mlir && snow-run %t.mlir --quiet --report - | filecheck %s --check-prefix=AFTER

// A loop as tile-to-asm writes it: the bookkeeping before the branch, no-ops in the 4 delay
// slots. The pass moves what it can into the slots (the loop counter, which the branch
// compares, stays) as long as an iteration gets faster: the output step fills a slot and
// covers the counter's RAW wait; moving more would gain no cycle (the branch would wait for
// the counter instead) and moving the MAC would dispatch it later. The no-op the step replaced
// goes before the label (it runs once, before the loop), so the code after the loop keeps its
// pc (icache-banking's bank boundaries do not move).

snowflake_asm.segment input @x at 0 size 4096
snowflake_asm.segment output @y at 4096 size 4096
snowflake_asm.program @p {
  snowflake_asm.movi r1, 0
  snowflake_asm.movi r2, 4096
  snowflake_asm.movi r6, 0
  snowflake_asm.movi r7, 30
  snowflake_asm.label @loop
  snowflake_asm.addi r6, r6, 1
  snowflake_asm.mac coop r2, r1, r0 trace 16 wb
  snowflake_asm.addi r1, r1, 16
  snowflake_asm.addi r2, r2, 32
  snowflake_asm.ble r6, r7, @loop
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
}

// CHECK:        snowflake_asm.movi r7, 30
// CHECK-NEXT:   snowflake_asm.mov r0, r0
// CHECK-NEXT:   snowflake_asm.label @loop
// CHECK-NEXT:   snowflake_asm.addi r6, r6, 1
// CHECK-NEXT:   snowflake_asm.mac coop r2, r1, r0 trace 16 wb
// CHECK-NEXT:   snowflake_asm.addi r1, r1, 16
// CHECK-NEXT:   snowflake_asm.ble r6, r7, @loop
// CHECK-NEXT:   snowflake_asm.addi r2, r2, 32
// CHECK-NEXT:   snowflake_asm.mov r0, r0
// CHECK-NEXT:   snowflake_asm.mov r0, r0
// CHECK-NEXT:   snowflake_asm.mov r0, r0
// CHECK-NEXT: }

// 31 iterations: 9 cycles each before (4 no-ops), 8 after, and the no-op before the loop once
// BEFORE:     "cycles": 327,
// AFTER:      "cycles": 297,
