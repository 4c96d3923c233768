"""
The `snowflake_asm` instructions that move or compute vectors: the vector pipeline's MAC, MAX
and VMOV, and the load units' LD (DRAM to a buffer) and TMOV (a maps buffer to DRAM).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, UnitAttr
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, opt_prop_def, prop_def
from xdsl.utils.exceptions import VerifyException

from snowir.dialects.snowflake_asm.abstract_ops import MemoryOperation, SnowflakeInstruction
from snowir.dialects.snowflake_asm.attributes import (
    SELECT_ALL,
    TRACE_MAX,
    LoadTarget,
    LoadTargetAttr,
    RegisterType,
    VectorMode,
    VectorModeAttr,
    VmovSelect,
    VmovSelectAttr,
    const,
    reg,
)
from snowir.hw import DEFAULT, ISA_CUS, ISA_MASK_WORDS, ISA_VMACS_PER_CU


# ---------------------------------------------------------------- vector compute
@irdl_op_definition
class MacOp(SnowflakeInstruction):
    """
    Multiply-accumulate a trace of `trace` map elements starting at maps-buffer
    address rs1 with weights at weights-buffer address rs2, on every vMAC of every CU.
    With `wb` the accumulators are written back (bias, bypass, rounding, saturation,
    optional `relu`) to DRAM byte address rd and cleared.
    """

    name = "snowflake_asm.mac"
    mode = prop_def(VectorModeAttr)
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    trace = prop_def(IntAttr)
    wb = opt_prop_def(UnitAttr)
    relu = opt_prop_def(UnitAttr)

    def __init__(self, mode: VectorMode, rd: int, rs1: int, rs2: int, trace: int,
                 *, wb: bool = False, relu: bool = False):
        props: dict[str, Attribute] = {
            "mode": VectorModeAttr(mode), "rd": reg(rd), "rs1": reg(rs1),
            "rs2": reg(rs2), "trace": const(trace),
        }
        if wb:
            props["wb"] = UnitAttr()
        if relu:
            props["relu"] = UnitAttr()
        self._build(props)

    def verify_(self) -> None:
        self._check_range("trace", 1, TRACE_MAX)
        if self.relu is not None and self.wb is None:
            raise VerifyException(f"{self.name}: relu applies at write-back; it needs wb")


@irdl_op_definition
class MaxOp(SnowflakeInstruction):
    """
    Pool unit: compare a trace of `trace` 16-lane vectors, the i-th at maps-buffer
    address rs1 + i*rs2, with the retained vector; with `wb` write it to DRAM
    address rd and reset it.
    """

    name = "snowflake_asm.max"
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    trace = prop_def(IntAttr)
    wb = opt_prop_def(UnitAttr)

    def __init__(self, rd: int, rs1: int, rs2: int, trace: int, *, wb: bool = False):
        props: dict[str, Attribute] = {
            "rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2), "trace": const(trace),
        }
        if wb:
            props["wb"] = UnitAttr()
        self._build(props)

    def verify_(self) -> None:
        self._check_range("trace", 1, TRACE_MAX)


@irdl_op_definition
class VmovOp(SnowflakeInstruction):
    """
    Fill a CU operand register: `bias` (16 lanes per vMAC from its weights buffer at
    rs1), `bypass` (residual values from each CU's maps buffer at rs1), `mask`
    (write-back enable bits of vMACs 32w..32w+31 = rs1, `word w`, absent = 0), `stride`
    (DRAM bytes between the write-back blocks of consecutive CUs = rs1), `shift`
    (write-back shift = the weights' fraction bits, rs1), `mbias` (the bias operand from each
    CU's maps buffer at rs1, read as `bypass` reads; `shared`: every CU at rs1 itself), or a
    write-back unit's word = rs1 (the select named by the unit, snowir/writeback.py; a machine
    without the unit faults).
    """

    name = "snowflake_asm.vmov"
    mode = prop_def(VectorModeAttr)
    select = prop_def(VmovSelectAttr)
    rs1 = prop_def(RegisterType)
    word = prop_def(IntAttr)
    shared = opt_prop_def(UnitAttr)

    def __init__(self, mode: VectorMode, select: VmovSelect, rs1: int, word: int = 0, *, shared: bool = False):
        self._build({
            "mode": VectorModeAttr(mode), "select": VmovSelectAttr(select), "rs1": reg(rs1), "word": const(word),
            "shared": UnitAttr() if shared else None,
        })

    def verify_(self) -> None:
        self._check_range("word", 0, ISA_MASK_WORDS - 1 if self.select.data == VmovSelect.MASK else 0)
        if self.shared is not None and self.select.data != VmovSelect.MBIAS:
            raise VerifyException(f"{self.name}: shared applies to mbias (every CU reads the same bias block), "
                                  f"not {self.select.data.value}")


# ---------------------------------------------------------------- memory access
@irdl_op_definition
class LdOp(MemoryOperation):
    """
    Load `rs2` elements (instructions for icache) from DRAM byte address rs1 into
    buffer address rd of the selected buffer(s), on load unit `unit`.
    select: maps 0..C-1 = one CU, all = every CU; weights 0..C*V-1 = one vMAC (cu*V+v),
    C*V + v = vMAC v of every CU, all = every vMAC (C CUs of V vMACs: 16..19 on the 4 x 4
    machine); icache 0..1 = bank.
    """

    name = "snowflake_asm.ld"
    target = prop_def(LoadTargetAttr)

    def __init__(self, target: LoadTarget, rd: int, rs1: int, rs2: int, unit: int,
                 select: int):
        self._build({
            "target": LoadTargetAttr(target), "rd": reg(rd), "rs1": reg(rs1),
            "rs2": reg(rs2), "unit": const(unit), "select": const(select),
        })

    def verify_(self) -> None:
        super().verify_()
        select = self._int("select")
        target = self.target.data
        if target == LoadTarget.MAPS:
            ok = select < ISA_CUS or select == SELECT_ALL
        elif target == LoadTarget.WEIGHTS:
            ok = select < ISA_CUS * ISA_VMACS_PER_CU + ISA_VMACS_PER_CU or select == SELECT_ALL
        else:
            ok = select < DEFAULT.icache_banks
        if not ok:
            raise VerifyException(f"{self.name}: select {select} is not valid for {target.value}")


@irdl_op_definition
class TmovOp(MemoryOperation):
    """Store `rs2` elements of CU `select`'s maps buffer at address rs1 to DRAM address rd."""

    name = "snowflake_asm.tmov"

    def __init__(self, rd: int, rs1: int, rs2: int, unit: int, select: int):
        self._build({
            "rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2),
            "unit": const(unit), "select": const(select),
        })

    def verify_(self) -> None:
        super().verify_()
        self._check_range("select", 0, ISA_CUS - 1)
