// RUN: snow-opt %s | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | snow-opt | filecheck %s
// RUN: snow-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every snowflake_asm op, every field at its limits, in custom and generic form.

snowflake_asm.segment input @image at 0 size 32
snowflake_asm.segment output @result at 32 size 8
snowflake_asm.segment data @weights at 64 size 8 = dense<[256, -256, 128, 1]> : tensor<4xi16>
snowflake_asm.segment scratch @tmp at 128 size 64 {note = "spill"}
snowflake_asm.program @all_instructions frac_bits 11 {
  snowflake_asm.movi r1, -4194304
  snowflake_asm.movi r2, 4194303
  snowflake_asm.mov r3, r1
  snowflake_asm.mov r4, r2 shl 31
  snowflake_asm.add r5, r1, r2
  snowflake_asm.addi r6, r5, -65536
  snowflake_asm.mul r7, r6, r5
  snowflake_asm.muli r8, r7, 65535
  snowflake_asm.label @Tloop
  snowflake_asm.mac coop r9, r10, r11 trace 768
  snowflake_asm.mac coop r9, r10, r11 trace 1023 wb
  snowflake_asm.mac indp r9, r10, r11 trace 1 wb relu
  snowflake_asm.max r12, r13, r14 trace 9
  snowflake_asm.max r12, r13, r14 trace 3 wb
  snowflake_asm.vmov coop bias r15
  snowflake_asm.vmov indp bypass r16
  snowflake_asm.vmov coop mask r17
  snowflake_asm.vmov coop stride r18
  snowflake_asm.ble r1, r2, @Tloop
  snowflake_asm.bgt r3, r4, @Tloop
  snowflake_asm.beq r0, r0, @done
  snowflake_asm.ld maps r19, r20, r21 unit 0 to 3
  snowflake_asm.ld maps r19, r20, r21 unit 1 to all
  snowflake_asm.ld weights r22, r23, r24 unit 2 to 15
  snowflake_asm.ld weights r22, r23, r24 unit 3 to 19
  snowflake_asm.ld weights r22, r23, r24 unit 3 to all
  snowflake_asm.ld icache r25, r26, r27 unit 0 to 1
  snowflake_asm.tmov r28, r29, r30 unit 2 from 3 {comment = "store a row"}
  snowflake_asm.label @done
  snowflake_asm.mov r0, r31
}

// CHECK: builtin.module {
// CHECK-NEXT: snowflake_asm.segment input @image at 0 size 32
// CHECK-NEXT: snowflake_asm.segment output @result at 32 size 8
// CHECK-NEXT: snowflake_asm.segment data @weights at 64 size 8 = dense<[256, -256, 128, 1]> : tensor<4xi16>
// CHECK-NEXT: snowflake_asm.segment scratch @tmp at 128 size 64 {note = "spill"}
// CHECK-NEXT: snowflake_asm.program @all_instructions frac_bits 11 {
// CHECK-NEXT: snowflake_asm.movi r1, -4194304
// CHECK-NEXT: snowflake_asm.movi r2, 4194303
// CHECK-NEXT: snowflake_asm.mov r3, r1
// CHECK-NEXT: snowflake_asm.mov r4, r2 shl 31
// CHECK-NEXT: snowflake_asm.add r5, r1, r2
// CHECK-NEXT: snowflake_asm.addi r6, r5, -65536
// CHECK-NEXT: snowflake_asm.mul r7, r6, r5
// CHECK-NEXT: snowflake_asm.muli r8, r7, 65535
// CHECK-NEXT: snowflake_asm.label @Tloop
// CHECK-NEXT: snowflake_asm.mac coop r9, r10, r11 trace 768
// CHECK-NEXT: snowflake_asm.mac coop r9, r10, r11 trace 1023 wb
// CHECK-NEXT: snowflake_asm.mac indp r9, r10, r11 trace 1 wb relu
// CHECK-NEXT: snowflake_asm.max r12, r13, r14 trace 9
// CHECK-NEXT: snowflake_asm.max r12, r13, r14 trace 3 wb
// CHECK-NEXT: snowflake_asm.vmov coop bias r15
// CHECK-NEXT: snowflake_asm.vmov indp bypass r16
// CHECK-NEXT: snowflake_asm.vmov coop mask r17
// CHECK-NEXT: snowflake_asm.vmov coop stride r18
// CHECK-NEXT: snowflake_asm.ble r1, r2, @Tloop
// CHECK-NEXT: snowflake_asm.bgt r3, r4, @Tloop
// CHECK-NEXT: snowflake_asm.beq r0, r0, @done
// CHECK-NEXT: snowflake_asm.ld maps r19, r20, r21 unit 0 to 3
// CHECK-NEXT: snowflake_asm.ld maps r19, r20, r21 unit 1 to all
// CHECK-NEXT: snowflake_asm.ld weights r22, r23, r24 unit 2 to 15
// CHECK-NEXT: snowflake_asm.ld weights r22, r23, r24 unit 3 to 19
// CHECK-NEXT: snowflake_asm.ld weights r22, r23, r24 unit 3 to all
// CHECK-NEXT: snowflake_asm.ld icache r25, r26, r27 unit 0 to 1
// CHECK-NEXT: snowflake_asm.tmov r28, r29, r30 unit 2 from 3 {comment = "store a row"}
// CHECK-NEXT: snowflake_asm.label @done
// CHECK-NEXT: snowflake_asm.mov r0, r31
// CHECK-NEXT: }
// CHECK-NEXT: }

// GENERIC: "snowflake_asm.addi"() <{rd = !snowflake_asm.reg<r6>, rs1 = !snowflake_asm.reg<r5>, imm = #builtin.int<-65536>}> : () -> ()
// GENERIC: "snowflake_asm.mac"() <{mode = #snowflake_asm<mode indp>
