"""
How deep the seeded random tests go (the asm-pass property test, the tile-edit fuzzer).

CI runs them at depth 1, sized so that the whole suite stays under 6 minutes on 2 cores; a
deeper run scales every count: `SNOWIR_FUZZ_DEPTH=5 python -m pytest tests/test_tile_edit_fuzz.py`.
The seeds of depth 1 are the first ones of every deeper run, so a failure found in CI replays.
"""

from __future__ import annotations

import os

DEPTH = max(1, int(os.environ.get("SNOWIR_FUZZ_DEPTH", "1")))


def scaled(count: int, step: int = 1) -> int:
    """`count` at this depth, a multiple of `step` (a batch size)."""
    return max(step, count * DEPTH // step * step)
