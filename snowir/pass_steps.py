"""
The steps of a composite pass (nn-prepare, snowflake-lower), visible to tools.

A composite pass runs its parts through `run_steps`, which reports each finished part to the
observers installed with `observing`. snow-opt's `--print-ir-after=PASS` and
`--mlir-print-ir-after-all` use this to print the IR after a part of a composite pipeline,
which xDSL's own pipeline callback (between top-level passes only) does not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

Observer = Callable[[ModulePass, ModuleOp, int], None]
"""Called with the finished part, the module, and its nesting depth (1: inside one composite)."""

_observers: list[Observer] = []
_depth = [0]


def run_steps(ctx: Context, op: ModuleOp, passes: Sequence[ModulePass]) -> None:
    _depth[0] += 1
    try:
        for p in passes:
            p.apply(ctx, op)
            for observe in _observers:
                observe(p, op, _depth[0])
    finally:
        _depth[0] -= 1


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)
