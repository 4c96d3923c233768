"""
The asm passes' guard: a pass keeps its rewrite of a program only when the program runs no
slower on the machine model.

balance-loads, schedule-asm and fill-delay-slots decide with static models (load sizes, the
in-order issue model); the machine also has queues those models do not see (the vector queue,
one load unit serving its requests in order, a bus that serves earlier requests first, an
icache bank load queued behind data loads). Where the static choice loses there, the program
as the pass found it is put back. The measure is the fast engine's cycles of the program run
alone (banked as icache-banking would bank it, when it is longer than a bank) on the default
inputs snow-run gives; a program that cannot run alone (it faults, runs past the guard's
budget, or cannot be banked) keeps the rewrite, which the static model chose. Measurements are
kept by program content, so a program the previous pass left is not run again.

In a whole-model lowering the passes run on each layer's program before link-segments joins
them, so the guard measures a layer alone: exact for a per-layer lowering, and for a linked
program up to what the layers before it leave on the bus and in the CUs (that the passes keep
every unchanged instruction at its pc makes the bank layout the same either way).

It costs compile time: two fast-engine runs of every program a pass changes (the Table 1 conv5
model: about 1 s more per pass on this machine).

fill-delay-slots also measures with it where the guard is off (snowflake-lower): its variants of a
program with a traces-bound loop (`measured_times`: the cycles and the cycle the last instruction
issued, where a linked program's next layer starts).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException

from snowir.asm_analysis import body_ops, replace_body
from snowir.dialects import snowflake_asm as sf
from snowir.hw import CODE_ALIGN, SnowflakeConfig
from snowir.machine.image import ImageError, assemble
from snowir.machine.run import run_image
from snowir.machine.state import MachineFault
from snowir.passes.asm.icache_banking import bank_program

BUDGET = 50_000_000
"""Dynamic instructions a guard run may take (a program that runs longer keeps the rewrite)."""


def program_cycles(program: sf.ProgramOp, hw: SnowflakeConfig, container: object = None) -> int | None:
    """Cycles of `program` run alone on the machine model (fast engine) with the segments of
    `container` (default: the image or module holding it); None when it cannot run alone."""
    times = program_times(program, hw, container)
    return None if times is None else times[0]


def program_times(program: sf.ProgramOp, hw: SnowflakeConfig, container: object = None) -> tuple[int, int] | None:
    """program_cycles, and the cycle the program's last instruction issued: where the next
    layer's marker would be reached in a whole-model program (its window starts there)."""
    container = program.parent_op() if container is None else container
    segments = [op.clone() for op in container.body.block.ops if isinstance(op, sf.SegmentOp)] \
        if isinstance(container, ModuleOp | sf.ImageOp) else []
    copy = program.clone()
    module = ModuleOp([*segments, copy])
    try:
        if sum(1 for op in body_ops(copy) if type(op) is not sf.LabelOp) > hw.icache_bank_instructions:
            end = max((seg.address.data + seg.size.data for seg in segments), default=0)
            base = -(-end // CODE_ALIGN) * CODE_ALIGN if copy.code_base is None else copy.code_base.data
            bank_program(copy, base, hw)
        result = run_image(assemble(module, hw), hw, "fast", max_instructions=BUDGET)
        return result.cycles, result.machine.timing.t
    except (MachineFault, PassFailedException, ImageError):
        return None
    finally:
        _collect(hw)


_UNCOLLECTED = [0]  # bytes of machine DRAM run since the last collection
_COLLECT_AFTER = 2 << 30  # a memory bound for the runs' garbage, not a hardware size


def _collect(hw: SnowflakeConfig) -> None:
    """A run's machine (its DRAM, hw.dram_bytes) is cyclic garbage, freed only when the collector
    next visits the oldest generation, which a pass allocating few objects rarely makes it do:
    fill-delay-slots{measure} on DenseNet-121 grew to 24 GB and was killed. A full collection
    every few runs bounds that without paying for one per run."""
    _UNCOLLECTED[0] += hw.dram_bytes
    if _UNCOLLECTED[0] >= _COLLECT_AFTER:
        _UNCOLLECTED[0] = 0
        gc.collect()


def guarded(program: sf.ProgramOp, hw: SnowflakeConfig, on: bool, rewrite: Callable[[], object]) -> bool:
    """Run `rewrite` (which changes `program` in place); put the program back as it was when it
    then takes more cycles on the machine model (`on`: else the rewrite is kept unmeasured).
    Returns whether the rewrite was kept."""
    if not on:
        rewrite()
        return True
    before = [(op, op.properties.get("unit")) for op in body_ops(program)]
    original = program.clone()
    rewrite()
    after = body_ops(program)
    if len(after) == len(before) and all(a is b and a.properties.get("unit") == u for a, (b, u) in zip(after, before)):
        return True  # nothing changed
    old = _measured(original, hw, program.parent_op())
    new = _measured(program, hw)
    if old is None or new is None or new <= old:
        return True
    replace_body(program, body_ops(original))
    return False


_MEASURED: dict[tuple, tuple[int, int] | None] = {}
"""program_times by program content and machine: the next pass's `before` is this pass's `after`."""


def _measured(program: sf.ProgramOp, hw: SnowflakeConfig, container: object = None) -> int | None:
    times = measured_times(program, hw, container)
    return None if times is None else times[0]


def measured_times(program: sf.ProgramOp, hw: SnowflakeConfig, container: object = None) -> tuple[int, int] | None:
    """program_times, kept by program content (a program measured once is not run again)."""
    container = program.parent_op() if container is None else container
    segments = tuple((op.sym_name.data, op.address.data, op.size.data) for op in container.body.block.ops
                     if isinstance(op, sf.SegmentOp)) if isinstance(container, ModuleOp | sf.ImageOp) else ()
    key = (hw, segments, tuple((type(op), tuple(op.properties.items())) for op in body_ops(program)))
    if key not in _MEASURED:
        if len(_MEASURED) > 256:
            _MEASURED.clear()
        _MEASURED[key] = program_times(program, hw, container)
    return _MEASURED[key]
