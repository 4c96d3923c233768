// RUN: snow-opt %s --pass-pipeline='builtin.module(canonicalize)' | filecheck %s --check-prefix=PIPE
// RUN: snow-opt %s --pass-pipeline 'canonicalize,cse' | filecheck %s --check-prefix=PIPE
// RUN: snow-opt %s -p 'builtin.module(canonicalize)' | filecheck %s --check-prefix=PIPE
// RUN: not snow-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not snow-opt %s -p no-such-pass 2>&1 | wc -l | filecheck %s --check-prefix=ONELINE
// RUN: not snow-opt %s --pass-pipeline='builtin.module(canonicalize{bogus=1})' 2>&1 | filecheck %s --check-prefix=BADOPT
// RUN: not snow-opt %inputs/parse_error.mlir 2>&1 | filecheck %s --check-prefix=PARSE
// RUN: not snow-opt %inputs/verify_error.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not snow-opt %inputs/does_not_exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not snow-opt %s -t no-such-target 2>&1 | filecheck %s --check-prefix=TARGET

// The snow-opt contract: MLIR's --pass-pipeline spelling, one-line errors, rc != 0.

snowflake_asm.program @p {
  snowflake_asm.movi r1, 3
}

// PIPE: snowflake_asm.program @p {
// PIPE-NEXT: snowflake_asm.movi r1, 3
// UNKNOWN: snow-opt: {{.*}}cli.mlir: error: unknown pass 'no-such-pass' (snow-opt --list-passes lists them)
// ONELINE: 1
// BADOPT: snow-opt: {{.*}}cli.mlir: error: {{.*}}bogus
// PARSE: snow-opt: {{.*}}parse_error.mlir:2:29: error: expected a register r0..r31, got 'x1'
// VERIFY: snow-opt: {{.*}}verify_error.mlir: error: verification failed: snowflake_asm.mac: trace 2000 out of range [1, 1023]
// MISSING: snow-opt: {{.*}}does_not_exist.mlir: no such file
// TARGET: no-such-target
