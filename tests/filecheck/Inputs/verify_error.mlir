snowflake_asm.program @p {
  snowflake_asm.mac coop r1, r2, r3 trace 2000 wb
}
