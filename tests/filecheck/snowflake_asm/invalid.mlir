// RUN: snow-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect | filecheck %s

// One case per verifier rule of the snowflake_asm dialect.

snowflake_asm.program @p {
  snowflake_asm.addi r1, r1, 65536
}
// CHECK: snowflake_asm.addi: imm 65536 does not fit a signed 17-bit immediate

// -----
snowflake_asm.program @p {
  snowflake_asm.muli r1, r1, -65537
}
// CHECK: snowflake_asm.muli: imm -65537 does not fit a signed 17-bit immediate

// -----
snowflake_asm.program @p {
  snowflake_asm.movi r1, 4194304
}
// CHECK: snowflake_asm.movi: imm 4194304 does not fit a signed 23-bit immediate

// -----
snowflake_asm.program @p {
  snowflake_asm.mov r1, r2 shl 32
}
// CHECK: snowflake_asm.mov: shift 32 out of range [0, 31]


// -----
snowflake_asm.program @p {
  snowflake_asm.mac coop r1, r2, r3 trace 0
}
// CHECK: snowflake_asm.mac: trace 0 out of range [1, 1023]

// -----
snowflake_asm.program @p {
  snowflake_asm.mac indp r1, r2, r3 trace 1024 wb
}
// CHECK: snowflake_asm.mac: trace 1024 out of range [1, 1023]

// -----
snowflake_asm.program @p {
  snowflake_asm.mac coop r1, r2, r3 trace 16 relu
}
// CHECK: snowflake_asm.mac: relu applies at write-back; it needs wb

// -----
snowflake_asm.program @p {
  snowflake_asm.max r1, r2, r3 trace 0 wb
}
// CHECK: snowflake_asm.max: trace 0 out of range [1, 1023]

// -----
snowflake_asm.program @p {
  snowflake_asm.ld maps r1, r2, r3 unit 8 to 0
}
// CHECK: snowflake_asm.ld: unit 8 out of range [0, 7]

// -----
snowflake_asm.program @p {
  snowflake_asm.ld maps r1, r2, r3 unit 0 to 16
}
// CHECK: snowflake_asm.ld: select 16 is not valid for maps

// -----
snowflake_asm.program @p {
  snowflake_asm.ld weights r1, r2, r3 unit 0 to 68
}
// CHECK: snowflake_asm.ld: select 68 is not valid for weights

// -----
snowflake_asm.program @p {
  snowflake_asm.vmov coop bias r1 word 1
}
// CHECK: snowflake_asm.vmov: word 1 out of range [0, 0]

// -----
snowflake_asm.program @p {
  snowflake_asm.ld icache r1, r2, r3 unit 0 to 2
}
// CHECK: snowflake_asm.ld: select 2 is not valid for icache

// -----
snowflake_asm.program @p {
  snowflake_asm.tmov r1, r2, r3 unit 0 from 16
}
// CHECK: snowflake_asm.tmov: select 16 out of range [0, 15]

// -----
snowflake_asm.program @p {
  snowflake_asm.tmov r1, r2, r3 unit 9 from 0
}
// CHECK: snowflake_asm.tmov: unit 9 out of range [0, 7]

// -----
snowflake_asm.program @p {
  snowflake_asm.label @a
  snowflake_asm.label @a
}
// CHECK: snowflake_asm.program: label @a defined twice

// -----
snowflake_asm.program @p {
  snowflake_asm.ble r1, r2, @nowhere
}
// CHECK: snowflake_asm.ble: branch target @nowhere is not a label of @p

// -----
snowflake_asm.program @p {
  "test.op"() : () -> ()
}
// CHECK: snowflake_asm.program: 'test.op' is not a Snowflake instruction or label

// -----
snowflake_asm.program @p frac_bits 16 {
}
// CHECK: snowflake_asm.program: frac_bits 16 out of range [1, 15]

// -----
snowflake_asm.segment data @w at 1 size 4
// CHECK: snowflake_asm.segment @w: address and size must be 16-bit aligned

// -----
snowflake_asm.segment data @w at 0 size 0
// CHECK: snowflake_asm.segment @w: address must be >= 0 and size > 0

// -----
snowflake_asm.segment data @w at 0 size 4 = dense<[1, 2, 3]> : tensor<3xi16>
// CHECK: snowflake_asm.segment @w: value has 3 16-bit elements, size is 4 bytes
