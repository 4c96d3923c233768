"""Developer utility: turn snow-opt output on stdin into CHECK/CHECK-NEXT lines (like MLIR's generate-test-checks.py)."""

import sys


def main() -> None:
    prefix = sys.argv[1] if len(sys.argv) > 1 else "CHECK"
    first, after_blank = True, False
    for raw in sys.stdin:
        line = raw.strip()
        if not line:
            after_blank = True
            continue
        kind = prefix if first or after_blank else f"{prefix}-NEXT"
        print(f"// {kind}: {line}")
        first, after_blank = False, False


if __name__ == "__main__":
    main()
