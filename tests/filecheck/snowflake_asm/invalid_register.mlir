// RUN: not snow-opt %s 2>&1 | filecheck %s

// A register that does not exist is refused where the text names it (line and column), not by
// the attribute verifier, which knows no location (invalid.mlir has the verifier's rules).

snowflake_asm.program @p {
  snowflake_asm.add r32, r1, r2
}
// CHECK: snow-opt: {{.*}}invalid_register.mlir:[[# @LINE - 2]]:21: error: register r32 does not exist (r0..r31)
