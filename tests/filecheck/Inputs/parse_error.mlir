snowflake_asm.program @p {
  snowflake_asm.add r1, r2, x1
}
