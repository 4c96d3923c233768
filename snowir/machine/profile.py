"""
Per-instruction cycle profiles (`snow-run --profile`): where a program's time goes, instruction by
instruction and by the part of a layer each instruction came from (its location, see
docs/lowering.md "Where each instruction came from").

An instruction's cycles are how far it moves the control pipeline's clock: its issue, and every
stall before it (a full vector queue, a load waiting for its buffer region, an icache bank not yet
loaded). The reference engine steps one instruction at a time, so it records them; the fast
engine runs loops in closed form and does not.
"""

from __future__ import annotations

import contextvars
import fnmatch
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from snowir.machine.encoding import decode
from snowir.machine.image import ProgramImage


@dataclass
class Profile:
    image: ProgramImage
    counts: np.ndarray = field(init=False)
    cycles: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.image.code), np.int64)
        self.cycles = np.zeros(len(self.image.code), np.int64)


_COLLECTING: contextvars.ContextVar[list[Profile] | None] = contextvars.ContextVar("profiles", default=None)


@contextmanager
def collecting() -> Iterator[list[Profile]]:
    """Every machine made meanwhile records a profile (reference engine), into the list."""
    profiles: list[Profile] = []
    token = _COLLECTING.set(profiles)
    try:
        yield profiles
    finally:
        _COLLECTING.reset(token)


def new_profile(image: ProgramImage) -> Profile | None:
    """A profile for a machine about to run `image`, when one is being collected."""
    profiles = _COLLECTING.get()
    if profiles is None:
        return None
    profile = Profile(image)
    profiles.append(profile)
    return profile


_NUMBERED = re.compile(r"\.(strip|group|tile|ktile|ktiles|rows|y)(\d+)(to\d+|_\d+)?(?=[.( ]|$)")


def part_kind(source: str) -> str:
    """A part with its strip, group, tile and row numbers folded: `conv2.strip3.ktile0` and
    `conv2.strip4.ktile0` are both `conv2.strip*.ktile*` (kernel tile 0 is one code path per strip)."""
    return _NUMBERED.sub(lambda m: f".{m.group(1)}*", source)


def profile_table(profiles: list[Profile], pattern: str | None = None, top: int = 15) -> str:
    """The parts that took the most cycles, then the hottest instructions; `pattern` (shell-style,
    e.g. `conv2*`) keeps the parts whose name matches."""
    parts: dict[str, list[int]] = {}
    hot: list[tuple[int, int, int, str, str]] = []
    total = 0
    for p in profiles:
        sources = p.image.sources or ()
        for pc in np.nonzero(p.counts)[0]:
            source = (sources[pc] if pc < len(sources) else None) or f"{p.image.name} (no location)"
            if pattern and not fnmatch.fnmatchcase(source, pattern) and not fnmatch.fnmatchcase(source, pattern + "*"):
                continue
            cycles, count = int(p.cycles[pc]), int(p.counts[pc])
            total += cycles
            entry = parts.setdefault(source, [0, 0])
            entry[0] += cycles
            entry[1] += count
            hot.append((cycles, count, int(pc), source, str(decode(int(p.image.code[pc]), int(pc))).strip()))
    if not total:
        return f"profile: no instruction matches '{pattern}'\n" if pattern else "profile: nothing ran\n"
    lines = [f"cycles by layer part (control pipeline, stalls included; {total:,} cycles"
             + (f" matching '{pattern}'" if pattern else "") + ")"]
    width = max(4, *(len(s) for s in parts))
    lines.append(f"{'part':<{width}} {'cycles':>12} {'share':>6} {'instructions':>13}")
    for source, (cycles, count) in sorted(parts.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{source:<{width}} {cycles:>12,} {100 * cycles / total:>5.1f}% {count:>13,}")
    kinds: dict[str, list[int]] = {}
    for source, (cycles, count) in parts.items():
        entry = kinds.setdefault(part_kind(source), [0, 0, 0])
        entry[0] += cycles
        entry[1] += count
        entry[2] += 1
    if len(kinds) < len(parts):
        lines.append("")
        lines.append("cycles by kind of part (strip, group and tile numbers folded: where a layer's steady state goes)")
        lines.append(f"{'kind':<{width}} {'cycles':>12} {'share':>6} {'instructions':>13} {'parts':>6}")
        for kind, (cycles, count, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"{kind:<{width}} {cycles:>12,} {100 * cycles / total:>5.1f}% {count:>13,} {n:>6,}")
    lines.append("")
    lines.append("hottest instructions")
    lines.append(f"{'pc':>6} {'cycles':>12} {'share':>6} {'count':>10}  instruction  [part]")
    for cycles, count, pc, source, text in sorted(hot, key=lambda h: -h[0])[:top]:
        lines.append(f"{pc:>6} {cycles:>12,} {100 * cycles / total:>5.1f}% {count:>10,}  {text}  [{source}]")
    return "\n".join(lines) + "\n"
