"""
The steps of a composite pass (nn-prepare, snowflake-lower), visible to tools.

A composite pass runs its parts through `run_steps`, which reports each finished part to the
observers installed with `observing`. snow-opt's `--print-ir-after=PASS` and
`--mlir-print-ir-after-all` use this to print the IR after a part of a composite pipeline,
which xDSL's own pipeline callback (between top-level passes only) does not see.

Passes run with Python's cyclic garbage collector paused (`gc_paused`): they build and drop
10^5 IR objects, and every full collection re-scans the whole live IR (ResNet-50: about a
third of its compile time). Reference counting still frees what passes drop; the few cycles
they leave go at the next collection after.
"""

from __future__ import annotations

import gc
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
        with gc_paused():
            for p in passes:
                p.apply(ctx, op)
                for observe in _observers:
                    observe(p, op, _depth[0])
    finally:
        _depth[0] -= 1


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the duration (nests; restores what it found)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)
