"""
A max pool's maps tiles and a fused pool's row ring (which conv rows load and which pool rows run
per row group of the conv): the data the pool planners decide and the pool generators follow,
beside snowir/plan/shapes.py's conv data and the pool's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from snowir.plan.shapes import ConvPlan, PoolShape, Strip


GUARD = 64  # CU c reads 16c words past a pixel: room above a strip for the last CU's reads


@dataclass(frozen=True)
class PoolTile:
    """A max pool's maps tile: output rows [y0, y1) from input rows [r0, r1), loaded whole into
    bank `bank` (-1: the whole buffer), or run over a ring of `ring` input-row slots."""

    strip: Strip
    ring: int = 0


@dataclass(frozen=True)
class PoolRing:
    """Row slots (maps-buffer element addresses, all CUs) and, per row group of the conv, the
    conv rows [a, b) loaded at its start and the pool rows [p, q) computed halfway through it;
    `tail`: the same after the last group."""

    slots: tuple[int, ...]
    steps: tuple[tuple[int, int, int, int], ...]
    tail: tuple[int, int, int, int]


def _first_row(p: PoolShape, j: int) -> int:
    return max(0, j * p.sy - p.pt)


def _end_row(p: PoolShape, j: int) -> int:
    return min(p.h, j * p.sy - p.pt + p.kh)


def ring_schedule(plan: ConvPlan, p: PoolShape) -> tuple[tuple[tuple[int, int, int, int], ...], tuple[int, int, int, int], int]:
    """Per row group of the conv, the conv rows [a, b) loaded at its start and the pool rows
    [p, q) computed halfway through it; the same after the last group; and the slots the ring
    needs at once. Follows from the row groups and the pool's shape alone."""
    done, loaded, pooled, steps, span = 0, 0, 0, [], 1
    for strip in plan.strips:
        q = pooled
        while q < p.oh and _end_row(p, q) <= done:
            q += 1
        steps.append((loaded, done, pooled, q))
        span = max(span, done - _first_row(p, pooled) if pooled < p.oh else 0)
        loaded, pooled, done = done, q, strip.y1
    tail = (loaded, p.h, pooled, p.oh)
    span = max(span, p.h - _first_row(p, pooled) if pooled < p.oh else 0)
    return tuple(steps), tail, span


def ring_of(plan: ConvPlan) -> PoolRing:
    """The plan's ring: its recorded slots (`pool_slots`) and the schedule its groups imply."""
    assert plan.pool is not None
    steps, tail, _ = ring_schedule(plan, plan.pool)
    return PoolRing(plan.pool_slots, steps, tail)
