// A 16-element dot product on Snowflake: load maps and weights, one COOP MAC with
// write-back, result to DRAM. `snow-opt examples/dot16.mlir` parses and verifies it.
snowflake_asm.segment input @x at 0 size 32
snowflake_asm.segment data @w at 32 size 32 = dense<[256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256]> : tensor<16xi16>
snowflake_asm.segment output @y at 64 size 32
snowflake_asm.program @dot16 {
  snowflake_asm.movi r1, 0
  snowflake_asm.movi r2, 32
  snowflake_asm.movi r3, 16
  snowflake_asm.movi r4, 64
  snowflake_asm.ld maps r0, r1, r3 unit 0 to all
  snowflake_asm.ld weights r0, r2, r3 unit 1 to all
  snowflake_asm.mac coop r4, r0, r0 trace 16 wb
}
