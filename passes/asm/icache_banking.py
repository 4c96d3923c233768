"""
icache-banking: make a long snowflake_asm program stream through the 2-bank instruction cache.

Snowflake's instruction cache holds 2 banks of 512 instructions and a branch may not cross
banks (C17 §5.1-5.2). The host preloads blocks 0 and 1; this pass lays the program out in
512-instruction blocks and, at the start of every block k >= 1, inserts an `ld icache` of
block k+1 into the bank block k-1 occupied (which has finished; NOPs when there is no block
k+1), its `ld` after the weight loads that follow it in the same straight-line code. Every loop
(a label and the delay slots of the branch back to it) is kept inside one block by padding
with NOPs before it (skipped by a branch to the block's last one when that is shorter than
running them); execution falls through from one block into the next.
Programs of one block are left alone, and so are programs that already load the cache
(banked before). Module-level programs and the programs of `snowflake_asm.image`s are
banked. r30 and r31 are reserved for the inserted loads.

The segment programs of a whole model (`dram = "model"`, link-segments) share one DRAM: their
code is placed one after the other above every image's data, each program at the next
4 KB boundary after the previous one's banked end.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntAttr, ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.asm_analysis import INSTRUCTION_ROLES, body_ops, is_banked, is_machine, replace_body
from snowir.dialects import snowflake_asm as sf
from snowir.hw import CODE_ALIGN, SnowflakeConfig

R_ADDR, R_COUNT = 30, 31
PROLOGUE = 5  # movi / mov / addi (address), movi (count), ld
SKIP_REACH = (1 << (sf.IMM12_BITS - 1)) - 1
"""The farthest forward a branch reaches (its signed 12-bit pc offset): the padding's skip."""


def _code_base(container: ModuleOp | sf.ImageOp) -> int:
    end = max((op.address.data + op.size.data for op in container.body.block.ops if isinstance(op, sf.SegmentOp)),
              default=0)
    return -(-end // CODE_ALIGN) * CODE_ALIGN



def _regions(ops: list[Operation], slots: int) -> list[tuple[int, int]]:
    """[first, last] instruction indices that must share a block (loops, forward skips)."""
    pcs: dict[str, int] = {}
    n = 0
    for op in ops:
        if type(op) is sf.LabelOp:
            pcs[op.label.data] = n
        else:
            n += 1
    spans = []
    pc = 0
    for op in ops:
        if type(op) is sf.LabelOp:
            continue
        if sf.program_role(type(op)) is sf.ProgramRole.BRANCH:
            target = pcs[op.target.data]
            spans.append((min(pc, target), max(pc + slots, target)))
        pc += 1
    spans.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def bank_program(program: sf.ProgramOp, code_base: int, hw: SnowflakeConfig) -> None:
    ops = body_ops(program)
    size = hw.icache_bank_instructions
    n = sum(1 for op in ops if type(op) is not sf.LabelOp)
    if n <= size:
        return  # one block: nothing can cross a bank
    bank_regs = (R_ADDR, R_COUNT)
    for op in ops:
        if sf.program_role(type(op)) in INSTRUCTION_ROLES and (
                op.writes() in bank_regs or any(r in bank_regs for r in op.reads())):
            raise PassFailedException(f"icache-banking: {op.name} uses r30/r31, which the bank loads need")
    regions = {lo: hi - lo + 1 for lo, hi in _regions(ops, hw.branch_delay_slots)}
    taken = {op.label.data for op in ops if type(op) is sf.LabelOp}  # the padding's labels are new names
    out: list[Operation] = []
    placed = 0  # instructions emitted so far (new pcs)
    loads: list[tuple[int, int]] = []  # (index in out of a prologue, block it loads)

    def block_start() -> None:
        nonlocal placed
        if placed >= size and placed % size == 0:
            # a label here names the block's first instruction, after the bank load: a loop
            # starting the block must not run the load again each iteration
            labels = []
            while out and type(out[-1]) is sf.LabelOp:
                labels.insert(0, out.pop())
            loads.append((len(out), placed // size + 1))
            out.extend(_prologue(0, 0, 0, 0))
            placed += PROLOGUE
            out.extend(labels)

    pc = 0
    for op in ops:
        if type(op) is sf.LabelOp:
            out.append(op)
            continue
        block_start()
        span = regions.get(pc, 1)
        if span > size - PROLOGUE:
            raise PassFailedException(f"icache-banking: a loop of {span} instructions does not fit a {size}-instruction bank")
        left = size - placed % size
        if span > left:
            labels = []
            while out and type(out[-1]) is sf.LabelOp:
                labels.insert(0, out.pop())
            label = next(name for k in range(len(taken) + 1)
                         if (name := f"icache_pad{placed // size}" + (f"_{k}" if k else "")) not in taken)
            out.extend(_padding(left, hw.branch_delay_slots, label))
            placed += left
            block_start()
            out.extend(labels)
        out.append(op)
        placed += 1
        pc += 1
    total = placed
    blocks = -(-total // size)
    final: list[Operation] = []
    cursor = 0
    for index, block in loads:
        final.extend(out[cursor:index])
        if block < blocks:
            count = min(size, total - block * size)
            final.extend(_prologue(code_base + 4 * block * size, count, block % hw.icache_banks, hw.load_units - 1))
        else:
            final.extend(sf.MovOp(0, 0) for _ in range(PROLOGUE))
        cursor = index + PROLOGUE
    final.extend(out[cursor:])
    replace_body(program, _after_data_loads(final, size))
    program.properties["code_base"] = IntAttr(code_base)
    if not any(type(op) is sf.LdOp and op.target.data == sf.LoadTarget.ICACHE for op in final):
        program.attributes["banked"] = UnitAttr()  # two blocks, no bank load: laid out all the same


def _padding(n: int, slots: int, label: str) -> list[Operation]:
    """`n` instructions that end a block before a loop that does not fit its rest. Executed, n
    no-ops cost n issue cycles (DenseNet-121's n639 pads 43 of its kernel tiles' loops, 10 to 48
    no-ops each: 141,330 cycles, 140,302 skipping them); longer than the branch, its slots and
    the block's last instruction (slots + 2, what a skip runs), a forward skip to that last
    instruction (in the branch's own bank, C17 §5.1) runs those slots + 2 and falls through into
    the next block as the no-ops did. Every pc stays where the no-ops put it. A block's end out
    of a branch's reach (SKIP_REACH: banks of more than 2,048 instructions) is skipped to from as
    far into the padding as it takes, the no-ops before that run."""
    if n <= slots + 2:
        return [sf.MovOp(0, 0) for _ in range(n)]
    run = max(0, n - 1 - SKIP_REACH)
    return [*(sf.MovOp(0, 0) for _ in range(run)), sf.BeqOp(0, 0, label),
            *(sf.MovOp(0, 0) for _ in range(n - run - 2)), sf.LabelOp(label), sf.MovOp(0, 0)]


def _after_data_loads(ops: list[Operation], size: int) -> list[Operation]:
    """Each bank load moved past the weight LDs that follow it in the same straight-line run (up to
    a label, a branch, a vector op, a TMOV or the next bank load, inside its block), so it is
    requested after them.

    The bus serves requests in the order they come: a bank load requested first delays a
    kernel tile's weights behind a whole block of code, which the CUs then wait for, although
    the block it brings runs 500 instructions later. Where a bank boundary falls inside a group
    of loads depends on the pc, so without this an order schedule-asm chose for the group (its
    scalars between the LDs) moved the boundary before the first LD on ResNet-50's 1x1 128->512
    convs (n54, n64, n74: 912 cycles each, 417 later at n74's end than without schedule-asm).
    Only weight LDs: moved past maps loads too (a strip's prefetch, large), the next block came
    late elsewhere and ResNet-50 ran 10,308 cycles slower in total; past weight LDs alone it runs
    4,460 faster (16,470,464 against 16,474,924 cycles)."""
    ops = list(ops)
    pcs, pc = [], 0
    for op in ops:
        pcs.append(pc)
        pc += type(op) is not sf.LabelOp
    for i in range(len(ops) - 1, -1, -1):
        if not (type(ops[i]) is sf.LdOp and ops[i].target.data == sf.LoadTarget.ICACHE):
            continue
        end = (pcs[i] // size + 1) * size  # it stays in its block (the next one is what it loads)
        last = None
        for j in range(i + 1, len(ops)):
            op = ops[j]
            if pcs[j] >= end:
                break
            role = sf.program_role(type(op))
            if role is not sf.ProgramRole.INSTRUCTION or op.IS_VECTOR or R_ADDR in op.reads() or R_COUNT in op.reads() \
                    or op.writes() in (R_ADDR, R_COUNT):
                break
            if isinstance(op, sf.LdOp):
                if op.target.data == sf.LoadTarget.WEIGHTS:
                    last = j
            elif is_machine(op):
                break
        if last is not None:
            ops.insert(last, ops.pop(i))
    return ops


def _prologue(address: int, count: int, bank: int, unit: int) -> list[Operation]:
    """Load the next block into `bank` on the last load unit (balance-loads spreads data loads
    from unit 0 up, so instruction fetches meet the least data traffic there)."""
    return [sf.MoviOp(R_ADDR, address >> 12), sf.MovOp(R_ADDR, R_ADDR, 12), sf.AddiOp(R_ADDR, R_ADDR, address & 0xFFF),
            sf.MoviOp(R_COUNT, count), sf.LdOp(sf.LoadTarget.ICACHE, 0, R_ADDR, R_COUNT, unit, bank)]


@dataclass(frozen=True)
class IcacheBankingPass(ModulePass):
    name = "icache-banking"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        containers = [op, *(o for o in op.ops if isinstance(o, sf.ImageOp))]
        shared = [c for c in containers if c.attributes.get("dram") == StringAttr("model")]
        cursor = max((_code_base(c) for c in shared), default=0)  # above every segment's data
        for container in containers:
            base = cursor if container in shared else _code_base(container)
            for program in container.body.block.ops:
                if isinstance(program, sf.ProgramOp) and not is_banked(program):
                    bank_program(program, program.code_base.data if program.code_base else base, hw)
                if isinstance(program, sf.ProgramOp) and container in shared:
                    if program.code_base is None:  # one block, left alone: placed all the same
                        program.properties["code_base"] = IntAttr(base)
                    start = program.code_base.data
                    end = start + 4 * sum(1 for o in body_ops(program) if type(o) is not sf.LabelOp)
                    cursor = max(cursor, -(-end // CODE_ALIGN) * CODE_ALIGN)
