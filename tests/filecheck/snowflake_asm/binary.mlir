// RUN: snow-opt %s -t snowflake-bin -o %t.sfb
// RUN: snow-opt %t.sfb | filecheck %s
// RUN: snow-opt %t.sfb -t snowflake-bin -o %t2.sfb
// RUN: cmp %t.sfb %t2.sfb
// RUN: snow-opt %t.sfb | snow-opt -t snowflake-bin -o %t3.sfb
// RUN: cmp %t.sfb %t3.sfb

// The assembler (-t snowflake-bin) and the .sfb frontend round-trip byte for byte;
// branch targets come back as labels L<pc>.

snowflake_asm.segment data @w at 0 size 8 = dense<[256, -256, 1, 0]> : tensor<4xi16>
snowflake_asm.segment output @y at 64 size 32
snowflake_asm.program @loop {
  snowflake_asm.movi r1, 3
  snowflake_asm.label @top
  snowflake_asm.addi r1, r1, -1
  snowflake_asm.mac indp r2, r0, r0 trace 4 wb relu
  snowflake_asm.bgt r1, r0, @top
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
  snowflake_asm.mov r0, r0
}

// CHECK:      snowflake_asm.segment data @w at 0 size 8 = dense_resource<w> : tensor<4xi16>
// CHECK-NEXT: snowflake_asm.segment output @y at 64 size 32
// CHECK-NEXT: snowflake_asm.program @loop {
// CHECK-NEXT:   snowflake_asm.movi r1, 3
// CHECK-NEXT:   snowflake_asm.label @L1
// CHECK-NEXT:   snowflake_asm.addi r1, r1, -1
// CHECK-NEXT:   snowflake_asm.mac indp r2, r0, r0 trace 4 wb relu
// CHECK-NEXT:   snowflake_asm.bgt r1, r0, @L1
// CHECK:      w: "0x080000000001
