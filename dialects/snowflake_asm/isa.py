"""
The Snowflake instruction set, declared once: one `Instruction` record per instruction, the way
LLVM's TableGen records or Exo's `@instr` declare a target. A record holds the opcode, the bit
fields of the 32-bit word, the assembly syntax, the registers read and written, the semantics of
a scalar or branch instruction (one Python expression over the field values), the timing class
and the flags the passes and engines classify by.

Everything else is derived from `ISA`, so a new scalar instruction is one `register()` call:
  * the op classes' OPCODE, SYNTAX, IS_VECTOR / IS_BRANCH, `reads()` / `writes()` and a branch's
    `taken()` (abstract_ops.py), `program_role` (program_ops.py);
  * encode and decode, reserved bits included (snowir/machine/encoding.py);
  * the reference engine's scalar and branch `@impl`s (snowir/machine/reference.py) and the fast
    engine's compiled code (snowir/machine/fast.py: `Instruction.python` renders the expression);
  * constant folding, `known_registers` and the machine / scalar classification
    (snowir/asm_analysis.py);
  * the scalar timing rule (`TimingClass`: Timing.scalar, fast.py's `_Run`,
    asm_analysis.issue_cycles, snowir/plan/issue.py), and a vector instruction's CU cycles
    (`cu_cycles`: the machine's Timing and the asm passes' loop costs);
  * the instruction table of docs/isa.md (`markdown()`, tools/gen_isa_docs.py).
Vector and memory instructions keep their data-path semantics in snowir/machine/state.py (the
`Machine` methods); their records say which method runs them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any

from snowir.dialects.snowflake_asm.attributes import (
    IMM12_BITS,
    IMM17_BITS,
    IMM23_BITS,
    LoadTarget,
    LoadTargetAttr,
    VectorMode,
    VectorModeAttr,
    VmovSelect,
    VmovSelectAttr,
    add_vmov_select_member,
    remove_vmov_select_member,
)

OPCODE_BITS = 4
OPCODE_LSB = 28


class Kind(Enum):
    """Where an instruction executes: the control pipeline (scalar, branch), the vector queue
    (vector: the CUs' MAC / MAX / VMOV) or a load unit (memory)."""

    SCALAR = "scalar"
    BRANCH = "branch"
    VECTOR = "vector"
    MEMORY = "memory"


@dataclass(frozen=True)
class TimingClass:
    """How the control pipeline issues an instruction of this class: it dispatches once every
    register it reads is ready (RAW stall otherwise), the next instruction dispatches
    `issue_cycles` later, and the register it writes is readable `latency` cycles after its
    dispatch (`SnowflakeConfig.<latency_field>`). Vector and memory classes are queued to their
    unit at dispatch; their cost is the unit's (docs/machine.md)."""

    name: str
    unit: str
    issue_cycles: int
    latency_field: str | None
    doc: str

    def latency(self, hw: Any) -> int:
        """Cycles from dispatch until the written register is readable on machine `hw`."""
        return int(getattr(hw, self.latency_field)) if self.latency_field else 0


SCALAR_TIMING = TimingClass("scalar", "control pipeline", 1, "scalar_latency",
                            "one a cycle; result readable `scalar_latency` cycles after dispatch")
BRANCH_TIMING = TimingClass("branch", "control pipeline", 1, None,
                            "one a cycle; the `branch_delay_slots` next instructions always run")
VECTOR_TIMING = TimingClass("vector", "vector queue", 1, None,
                            "queued at dispatch (`vector_queue_depth`); CU cycles in docs/machine.md")
MEMORY_TIMING = TimingClass("memory", "load unit", 1, None,
                            "queued on its load unit at dispatch; DRAM time in docs/machine.md")
TIMING_CLASSES = (SCALAR_TIMING, BRANCH_TIMING, VECTOR_TIMING, MEMORY_TIMING)


@dataclass(frozen=True)
class BitField:
    """One field of the word: the op property `name`, its bits as (lsb, width) segments, low
    bits of the value first. Kinds: `reg` (a register index), `uint`, `sint` (sign-extended),
    `flag` (a unit property, present when the bit is 1), `enum` (`codes` maps the enum members
    to their codes), `label` (a signed pc offset; the op holds the label name) and `select`
    (an LD select as wide as the machine's `select_bits`, all ones = `all`). With `when`
    = (field, values) the field exists only when that field holds one of `values`; otherwise
    its bits are reserved."""

    name: str
    kind: str
    segments: tuple[tuple[int, int], ...]
    codes: tuple[tuple[Any, int], ...] = ()
    enum_attr: type | None = None
    when: tuple[str, tuple[Any, ...]] | None = None
    doc: str = ""

    @cached_property
    def bits(self) -> int:
        return sum(width for _, width in self.segments)

    @cached_property
    def full_mask(self) -> int:
        return self.mask()

    @cached_property
    def code_of(self) -> dict[Any, int]:
        return dict(self.codes)

    @cached_property
    def member_of(self) -> dict[int, Any]:
        return {code: member for member, code in self.codes}

    def mask(self, bits: int | None = None) -> int:
        """The word bits of the field's low `bits` value bits (all of them by default)."""
        left = self.bits if bits is None else bits
        out = 0
        for lsb, width in self.segments:
            used = min(width, left)
            out |= ((1 << used) - 1) << lsb
            left -= used
        return out

    def pack(self, value: int) -> int:
        out = 0
        for lsb, width in self.segments:
            out |= (value & ((1 << width) - 1)) << lsb
            value >>= width
        return out

    def unpack(self, word: int) -> int:
        if len(self.segments) == 1:
            lsb, width = self.segments[0]
            return (word >> lsb) & ((1 << width) - 1)
        out, at = 0, 0
        for lsb, width in self.segments:
            out |= ((word >> lsb) & ((1 << width) - 1)) << at
            at += width
        return out

    def layout(self) -> str:
        """`imm[11:10]`-style bit ranges, high segment first (docs)."""
        parts = [f"[{lsb + width - 1}:{lsb}]" if width > 1 else f"[{lsb}]" for lsb, width in self.segments]
        return "+".join(reversed(parts))


@dataclass(frozen=True)
class Check:
    """A condition on the decoded field values every word of the instruction must meet."""

    holds: Callable[[Mapping[str, Any]], bool]
    message: str


@dataclass(frozen=True)
class Instruction:
    """One instruction of the ISA (module docstring). `semantics`: for scalar instructions the
    value written to `writes`, for branches the condition, as a Python expression over the
    field names (register fields read their register's value); scalar results wrap to 32 bits.
    `machine_call`: the `Machine` method a vector or memory instruction runs (state.py).
    Flags: `steady`, it may be in a self-loop the fast engine times in closed form
    (snowir/machine/steady.py; `steady_if` = (field, values): only with those values;
    `nonlinear`: not when every register it reads changes in the loop; a branch only if its
    condition is `rs1 <= | > | == rs2`), `steady_anchor`: such a loop needs one of these;
    `deferrable`: the fast engine may batch it (snowir/machine/mac_batch.py)."""

    mnemonic: str
    opcode: int
    kind: Kind
    fields: tuple[BitField, ...]
    syntax: tuple[Any, ...]
    reads: tuple[str, ...]
    writes: str | None
    timing: TimingClass
    summary: str
    semantics: str | None = None
    machine_call: str | None = None
    steady: bool = False
    steady_anchor: bool = False
    steady_if: tuple[str, tuple[Any, ...]] | None = None
    nonlinear: bool = False
    deferrable: bool = False
    checks: tuple[Check, ...] = ()
    cu_cycles: Callable[[Mapping[str, Any], Any], int] | None = None
    """A vector instruction's CU cycles from its field values and the machine (`hw`): the
    machine's Timing charges them, and the asm passes weigh a loop's issue against them."""

    @property
    def name(self) -> str:
        return f"snowflake_asm.{self.mnemonic}"

    @cached_property
    def field(self) -> dict[str, BitField]:
        return {f.name: f for f in self.fields}

    @cached_property
    def properties(self) -> tuple[str, ...]:
        """The op properties of the fields, in syntax order (the order the op classes build them)."""
        out: list[str] = []
        for spec in self.syntax:
            if spec == ",":
                continue
            name = spec if isinstance(spec, str) else spec[2] if spec[0] in ("kw", "okw", "select") else spec[1]
            out.append(name)
        assert sorted(out) == sorted(f.name for f in self.fields), f"{self.mnemonic}: syntax and fields differ"
        return tuple(out)

    @cached_property
    def operands(self) -> tuple[str, ...]:
        """The field names `semantics` mentions, in field order."""
        if self.semantics is None:
            return ()
        used = set(re.findall(r"[A-Za-z_]\w*", self.semantics))
        return tuple(f.name for f in self.fields if f.name in used)

    @cached_property
    def operand_kinds(self) -> tuple[tuple[str, bool], ...]:
        """(name, is a register) of each operand: what an evaluator reads, and from where."""
        return tuple((name, self.field[name].kind == "reg") for name in self.operands)

    @cached_property
    def function(self) -> Callable[..., Any]:
        """`semantics` as a Python function of the operand values (keyword or positional, in
        `operands` order): what the reference engine runs and constant folding evaluates."""
        if self.semantics is None:
            raise TypeError(f"{self.mnemonic} has no scalar semantics (it runs {self.machine_call})")
        return eval(f"lambda {', '.join(self.operands)}: {self.semantics}", {})  # noqa: S307 - the table's own text

    def python(self, operand: Callable[[BitField], str]) -> str:
        """`semantics` with each operand replaced by `operand(field)` (fast.py's compiled code)."""
        assert self.semantics is not None
        by_name = self.field
        return re.sub(r"[A-Za-z_]\w*", lambda m: operand(by_name[m[0]]) if m[0] in by_name else m[0],
                      self.semantics)

    @cached_property
    def compare(self) -> str | None:
        """A branch `rs1 OP rs2` with OP one of <=, >, == (the forms steady.py solves in closed
        form); None for any other condition."""
        m = re.fullmatch(r"\s*rs1\s*(<=|>|==)\s*rs2\s*", self.semantics or "")
        return m[1] if m else None

    @property
    def wraps(self) -> bool:
        """The value needs wrapping to 32 bits (anything but a bare immediate)."""
        return not (len(self.operands) == 1 and self.field[self.operands[0]].kind != "reg"
                    and self.semantics.strip() == self.operands[0])  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ field shapes
def mac_cu_cycles(trace: int, indp: bool, lanes: int) -> int:
    """CU cycles of a MAC (docs/machine.md, Timing): INDP feeds one trace element a cycle to
    its 16 kernels; COOP spreads one kernel's trace over the lanes."""
    return trace if indp else -(-trace // lanes)


def _reg(name: str, lsb: int) -> BitField:
    return BitField(name, "reg", ((lsb, 5),))


RD, RS1, RS2 = _reg("rd", 22), _reg("rs1", 17), _reg("rs2", 12)
MODE = BitField("mode", "enum", ((27, 1),), ((VectorMode.COOP, 0), (VectorMode.INDP, 1)), VectorModeAttr,
                doc="1 = INDP")
TRACE = BitField("trace", "uint", ((0, 10),), doc="trace length 1..1023")
UNIT = BitField("unit", "uint", ((0, 2), (9, 1)), doc="load unit")
RRR_SYNTAX = ("rd", ",", "rs1", ",", "rs2")
RRI_SYNTAX = ("rd", ",", "rs1", ",", ("int", "imm"))
BRANCH_SYNTAX = ("rs1", ",", "rs2", ",", ("label", "target"))
MEMORY_READS = ("rd", "rs1", "rs2")


def _trace_nonzero(mnemonic: str) -> Check:
    return Check(lambda f: f["trace"] != 0, f"{mnemonic.upper()} with trace length 0")


def scalar_rrr(mnemonic: str, opcode: int, semantics: str, summary: str, **flags: Any) -> Instruction:
    """A register-form scalar instruction `rd = f(rs1, rs2)` (ADD's shape)."""
    return Instruction(mnemonic, opcode, Kind.SCALAR, (RD, RS1, RS2), RRR_SYNTAX, ("rs1", "rs2"), "rd",
                       SCALAR_TIMING, summary, semantics=semantics, steady=True, **flags)


def scalar_rri(mnemonic: str, opcode: int, semantics: str, summary: str, **flags: Any) -> Instruction:
    """A scalar instruction `rd = f(rs1, imm17)` (ADDI's shape)."""
    imm = BitField("imm", "sint", ((0, IMM17_BITS),))
    return Instruction(mnemonic, opcode, Kind.SCALAR, (RD, RS1, imm), RRI_SYNTAX, ("rs1",), "rd",
                       SCALAR_TIMING, summary, semantics=semantics, steady=True, **flags)


def branch(mnemonic: str, opcode: int, semantics: str, summary: str) -> Instruction:
    """A compare-and-branch `if cond(rs1, rs2): pc += offset` after the delay slots (BLE's shape)."""
    target = BitField("target", "label", ((0, IMM12_BITS),), doc="signed pc offset")
    return Instruction(mnemonic, opcode, Kind.BRANCH, (RS1, RS2, target), BRANCH_SYNTAX, ("rs1", "rs2"), None,
                       BRANCH_TIMING, summary, semantics=semantics, steady=True)


VMOV_SELECT_BITS = 3


def _vmov_codes() -> tuple[tuple[VmovSelect, int], ...]:
    """A select's code is its place in VmovSelect (bias 0, ..., act 5, mbias 6): a new select is one member."""
    return tuple((member, code) for code, member in enumerate(VmovSelect))


def _vmov_select() -> BitField:
    return BitField("select", "enum", ((0, VMOV_SELECT_BITS),), _vmov_codes(), VmovSelectAttr)


_TARGET_CODES = ((LoadTarget.MAPS, 0), (LoadTarget.WEIGHTS, 1), (LoadTarget.ICACHE, 2))

_BASE: tuple[Instruction, ...] = (
    Instruction("mov", 0, Kind.SCALAR, (RD, RS1, BitField("shift", "uint", ((0, 5),))),
                ("rd", ",", "rs1", ("okw", "shl", "shift")), ("rs1",), "rd", SCALAR_TIMING,
                "rd = rs1 << shift", semantics="rs1 << shift", steady=True),
    Instruction("movi", 1, Kind.SCALAR, (BitField("rd", "reg", ((23, 5),)), BitField("imm", "sint", ((0, IMM23_BITS),))),
                ("rd", ",", ("int", "imm")), (), "rd", SCALAR_TIMING,
                "rd = sext(imm23)", semantics="imm", steady=True),
    scalar_rrr("add", 2, "rs1 + rs2", "rd = rs1 + rs2"),
    scalar_rri("addi", 3, "rs1 + imm", "rd = rs1 + sext(imm17)"),
    scalar_rrr("mul", 4, "rs1 * rs2", "rd = low 32 bits of rs1 * rs2", nonlinear=True),
    scalar_rri("muli", 5, "rs1 * imm", "rd = low 32 bits of rs1 * sext(imm17)"),
    Instruction("mac", 6, Kind.VECTOR,
                (MODE, RD, RS1, RS2, TRACE, BitField("relu", "flag", ((10, 1),)), BitField("wb", "flag", ((11, 1),))),
                (("enum", "mode", VectorModeAttr), "rd", ",", "rs1", ",", "rs2", ("kw", "trace", "trace"),
                 ("flag", "wb"), ("flag", "relu")),
                MEMORY_READS, None, VECTOR_TIMING,
                "multiply-accumulate a trace on every vMAC; `wb`: write back to DRAM rd",
                machine_call="mac", steady=True, steady_anchor=True, deferrable=True,
                cu_cycles=lambda f, hw: mac_cu_cycles(f["trace"], f["mode"] is VectorMode.INDP, hw.lanes),
                checks=(_trace_nonzero("mac"), Check(lambda f: f["wb"] or not f["relu"], "MAC with relu but no write-back"))),
    Instruction("max", 7, Kind.VECTOR, (RD, RS1, RS2, TRACE, BitField("wb", "flag", ((11, 1),))),
                ("rd", ",", "rs1", ",", "rs2", ("kw", "trace", "trace"), ("flag", "wb")),
                MEMORY_READS, None, VECTOR_TIMING, "pool unit: max of a trace of 16-lane vectors; `wb`: to DRAM rd",
                machine_call="max", steady=True, steady_anchor=True, checks=(_trace_nonzero("max"),),
                cu_cycles=lambda f, hw: f["trace"]),
    Instruction("vmov", 8, Kind.VECTOR,
                (MODE, RS1, _vmov_select(),
                 BitField("word", "uint", ((3, 3),), when=("select", (VmovSelect.MASK,)), doc="mask only"),
                 BitField("shared", "flag", ((6, 1),), when=("select", (VmovSelect.MBIAS,)), doc="mbias only")),
                (("enum", "mode", VectorModeAttr), ("enum", "select", VmovSelectAttr), "rs1", ("okw", "word", "word"),
                 ("flag", "shared")),
                ("rs1",), None, VECTOR_TIMING,
                "fill a CU operand register (bias, bypass, mask, stride, shift; mbias: the bias from the maps buffer) "
                "or a write-back unit's word",
                machine_call="vmov", steady=True,
                steady_if=("select", (VmovSelect.BIAS, VmovSelect.BYPASS, VmovSelect.MBIAS)),
                cu_cycles=lambda f, hw: hw.vmov_cycles),
    branch("ble", 9, "rs1 <= rs2", "branch if rs1 <= rs2 (signed)"),
    branch("bgt", 10, "rs1 > rs2", "branch if rs1 > rs2 (signed)"),
    branch("beq", 11, "rs1 == rs2", "branch if rs1 == rs2"),
    Instruction("ld", 12, Kind.MEMORY,
                (RD, RS1, RS2, UNIT, BitField("target", "enum", ((2, 2),), _TARGET_CODES, LoadTargetAttr),
                 BitField("select", "select", ((4, 5), (10, 2)))),
                (("enum", "target", LoadTargetAttr), "rd", ",", "rs1", ",", "rs2", ("kw", "unit", "unit"),
                 ("select", "to", "select")),
                MEMORY_READS, None, MEMORY_TIMING, "DRAM rs1 -> buffer rd, rs2 elements (instructions for icache)",
                machine_call="ld"),
    Instruction("tmov", 13, Kind.MEMORY, (RD, RS1, RS2, UNIT, BitField("select", "uint", ((4, 5),), doc="CU")),
                ("rd", ",", "rs1", ",", "rs2", ("kw", "unit", "unit"), ("select", "from", "select")),
                MEMORY_READS, None, MEMORY_TIMING, "maps buffer rs1 of CU select -> DRAM rd, rs2 elements",
                machine_call="tmov"),
)


@dataclass
class _Table:
    """The instructions by mnemonic and by opcode; `generation` counts changes (derived caches
    key on it)."""

    by_mnemonic: dict[str, Instruction] = field(default_factory=dict)
    by_opcode: dict[int, Instruction] = field(default_factory=dict)
    generation: int = 0

    def add(self, entry: Instruction) -> None:
        if not 0 <= entry.opcode < (1 << OPCODE_BITS):
            raise ValueError(f"{entry.mnemonic}: opcode {entry.opcode} does not fit {OPCODE_BITS} bits")
        if entry.opcode in self.by_opcode:
            raise ValueError(f"{entry.mnemonic}: opcode {entry.opcode} is {self.by_opcode[entry.opcode].mnemonic}'s")
        if entry.mnemonic in self.by_mnemonic:
            raise ValueError(f"{entry.mnemonic}: already an instruction")
        _check_layout(entry)
        self.by_mnemonic[entry.mnemonic] = entry
        self.by_opcode[entry.opcode] = entry
        self.generation += 1

    def remove(self, mnemonic: str) -> None:
        entry = self.by_mnemonic.pop(mnemonic)
        del self.by_opcode[entry.opcode]
        self.generation += 1

    def __iter__(self) -> Iterator[Instruction]:
        return iter(sorted(self.by_opcode.values(), key=lambda e: e.opcode))

    def __getitem__(self, mnemonic: str) -> Instruction:
        return self.by_mnemonic[mnemonic]


def _check_layout(entry: Instruction) -> None:
    """No two fields share a bit, none touches the opcode, and the reads / writes / semantics
    name fields of the instruction."""
    taken = ((1 << OPCODE_BITS) - 1) << OPCODE_LSB
    names = {f.name for f in entry.fields}
    entry.properties  # noqa: B018 - asserts the syntax names the fields
    for f in entry.fields:
        if f.mask() & taken:
            raise ValueError(f"{entry.mnemonic}: field {f.name} overlaps another field or the opcode")
        taken |= f.mask()
    for name in (*entry.reads, *([entry.writes] if entry.writes else [])):
        if name not in names or entry.field[name].kind != "reg":
            raise ValueError(f"{entry.mnemonic}: {name} is not a register field")
    if (entry.kind in (Kind.SCALAR, Kind.BRANCH)) != (entry.semantics is not None):
        raise ValueError(f"{entry.mnemonic}: scalar and branch instructions (only) have semantics")
    if entry.semantics is not None:
        entry.function  # noqa: B018 - compiles now: a typo is an error at registration
    if (entry.kind is Kind.VECTOR) != (entry.cu_cycles is not None):
        raise ValueError(f"{entry.mnemonic}: vector instructions (only) have cu_cycles")


ISA = _Table()
for _entry in _BASE:
    ISA.add(_entry)


def register(entry: Instruction) -> None:
    """Add an instruction to the ISA (the dialect's `add_instruction` also makes its op class)."""
    ISA.add(entry)


def unregister(mnemonic: str) -> None:
    ISA.remove(mnemonic)


def add_vmov_select(name: str) -> Instruction:
    """Give VMOV the select `name` at the next free code (a write-back unit's, for a `with` block:
    the dialect's `vmov_select_extended`); the VMOV record with it, which replaces the old one."""
    old = ISA["vmov"]
    if len(VmovSelect) >= 1 << VMOV_SELECT_BITS:
        raise ValueError(f"VMOV's {VMOV_SELECT_BITS}-bit select has no free code")
    add_vmov_select_member(name)
    return _replace_vmov(old)


def remove_vmov_select(name: str) -> Instruction:
    """Undo `add_vmov_select`; the VMOV record without the select."""
    remove_vmov_select_member(name)
    return _replace_vmov(ISA["vmov"])


def _replace_vmov(old: Instruction) -> Instruction:
    new = replace(old, fields=tuple(_vmov_select() if f.name == "select" else f for f in old.fields))
    ISA.remove("vmov")
    ISA.add(new)
    return new


def free_opcodes() -> list[int]:
    return [code for code in range(1 << OPCODE_BITS) if code not in ISA.by_opcode]


# ------------------------------------------------------------------------------ docs
def _syntax_text(entry: Instruction) -> str:
    parts: list[str] = []
    for spec in entry.syntax:
        if spec == ",":
            parts[-1] += ","
        elif isinstance(spec, str):
            parts.append(spec)
        elif spec[0] == "int":
            parts.append(f"<{spec[1]}>")
        elif spec[0] == "kw":
            parts.append(f"{spec[1]} <{spec[2]}>")
        elif spec[0] == "okw":
            parts.append(f"[{spec[1]} <{spec[2]}>]")
        elif spec[0] == "flag":
            parts.append(f"[{spec[1]}]")
        elif spec[0] == "enum":
            parts.append("\\|".join(e.value for e in spec[2].enum_type))
        elif spec[0] == "label":
            parts.append("@label")
        elif spec[0] == "select":
            parts.append(f"{spec[1]} <{spec[2]}>" + ("\\|all" if entry.field[spec[2]].kind == "select" else ""))
    return f"{entry.mnemonic} {' '.join(parts)}".strip()


def _field_text(f: BitField) -> str:
    kind = {"sint": "signed", "uint": "", "reg": "", "flag": "flag", "enum": "", "label": "pc offset",
            "select": "select"}[f.kind]
    codes = " (" + ", ".join(f"{code} {v.value}" for v, code in f.codes) + ")" if f.codes else ""
    when = f" if {f.when[0]} = {'/'.join(getattr(v, 'value', str(v)) for v in f.when[1])}" if f.when else ""
    extra = f" {kind}" if kind else ""
    return f"{f.name}{f.layout()}{extra}{codes}{when}"


DOC_BEGIN = "<!-- isa-table: generated from dialects/snowflake_asm/isa.py by python tools/gen_isa_docs.py -->"
DOC_END = "<!-- end isa-table -->"


def with_table(doc: str) -> str:
    """`doc` (docs/isa.md) with the region between DOC_BEGIN and DOC_END rendered anew."""
    start, end = doc.find(DOC_BEGIN), doc.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"the doc has no region {DOC_BEGIN} ... {DOC_END}")
    return doc[:start] + DOC_BEGIN + "\n" + markdown() + doc[end:]


def markdown() -> str:
    """The instruction table of docs/isa.md, rendered from `ISA` (tools/gen_isa_docs.py)."""
    lines = ["| op | syntax | fields (word bits) | reads | writes | meaning | timing | flags |",
             "|---|---|---|---|---|---|---|---|"]
    for e in ISA:
        flags = [e.kind.value]
        if e.steady:
            flags.append("steady" + (f" if {e.steady_if[0]} = " + "/".join(v.value for v in e.steady_if[1])
                                     if e.steady_if else ""))
        if e.nonlinear:
            flags.append("nonlinear")
        if e.deferrable:
            flags.append("deferrable")
        meaning = f"`{e.semantics}`: {e.summary}" if e.semantics else f"{e.summary} (`Machine.{e.machine_call}`)"
        lines.append(f"| {e.opcode} | `{_syntax_text(e)}` | {', '.join(_field_text(f) for f in e.fields)} | "
                     f"{', '.join(e.reads) or '-'} | {e.writes or '-'} | {meaning} | {e.timing.name} | "
                     f"{', '.join(flags)} |")
    free = free_opcodes()
    lines += ["", f"Free opcodes: {', '.join(map(str, free)) if free else 'none'} (a word with one is an "
              "illegal instruction). Timing classes:", ""]
    for t in TIMING_CLASSES:
        lines.append(f"* **{t.name}** ({t.unit}): {t.doc}.")
    return "\n".join(lines) + "\n"
