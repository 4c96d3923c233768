"""
Function units at the MAC write-back, declared once (issue 37): a `WritebackUnit` holds all a
unit is, the way an ISA record holds an instruction (dialects/snowflake_asm/isa.py), and every
consumer reads the registry instead of naming a unit:

  * its config switch, a `SnowflakeConfig` field (snowir/hw.py stays the one home of hardware
    parameters): 0, the machine has no such unit;
  * its name, which is at once its VMOV select (`vmov coop <name> rs1`, declared in the ISA
    table), the `nn.conv2d` attribute holding a layer's choice as text (`act = "silu"`), and its
    field of `#tile.conv_shape` / `ConvShape.units` holding the layer's 32-bit word;
  * how the text becomes the word for an output format, the machine semantics on the rounded
    write-back values (both engines through machine/state.py, and the golden model), the float
    function (the float model), its cycles at write-back (machine/core.py), its DSE price
    (driver/dse.py), and the nn pass that sets the text, which nn-prepare runs when the switch
    is on (passes/pipelines.py).

Units apply in registration order, after bias, bypass and the write-back shift, before the
16-bit saturation and ReLU. snowir's own units register from the modules in `BUILTIN`, loaded on
first use (their passes import them, so this module may not import them back).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from snowir.errors import SnowError

BUILTIN = ("snowir.activation",)
"""Modules that register a unit when imported: the activation unit."""


@dataclass(frozen=True)
class UnitPass:
    """The nn pass giving layers a unit's function: its registry name and its class, loaded on
    use (`load`). nn-prepare builds it as `cls(hw=<the hardware JSON path>)`."""

    name: str
    load: Callable[[], type]


def lazy_class(module: str, name: str) -> Callable[[], type]:
    """A loader of class `name` of `module`, importing it on first call (xDSL's pass registry's
    way: a unit's module sits below its pass, which imports it)."""
    return lambda: getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class WritebackUnit:
    """One function unit at the MAC write-back (module docstring)."""

    name: str
    """VMOV select, nn.conv2d attribute and #tile.conv_shape field: one name, so none can drift."""
    switch: str
    """The SnowflakeConfig field giving the machine the unit (0: absent, the stock write-back)."""
    title: str
    """What messages call it ("the write-back <title> unit") and its DSE term (`<title>_unit`)."""
    word: Callable[[str, int], int]
    """(a layer's text, the output's fraction bits) -> the unit's 32-bit word (nonzero); a
    SnowError naming the unit when the text does not parse or a parameter does not fit."""
    apply: Callable[[int, np.ndarray], np.ndarray]
    """(word, rounded write-back sums as int64) -> values (int64, before saturation and ReLU);
    word 0 is the identity."""
    in_float: Callable[[str, np.ndarray], np.ndarray]
    """A layer's function in float (the float model of a conv that carries it)."""
    cycles: Callable[[int, bool], int]
    """(MAC lanes, INDP) -> cycles a write-back spends in the unit before the result pipeline."""
    area_per_vmac: float
    """The unit's area per vMAC in MAC-equivalents at the reference clock (driver/dse.py's proxy)."""
    describe: Callable[[int], str]
    """A word as text (`silu, Q.8`), for disassembly, traces and messages."""
    nn_pass: UnitPass | None = None
    absorbs: tuple[str, ...] = ()
    """The ops its nn pass may fold into a conv (an nn.host's ONNX op type, or an nn op's name):
    partition-host's `host_reason` for one left on the host names the unit."""

    def machine_has(self, hw: Any) -> bool:
        return bool(getattr(hw, self.switch))

    def absent(self) -> str:
        """Why a machine without the unit refuses it: the message's tail."""
        return f"without the write-back {self.title} unit (SnowflakeConfig.{self.switch} = 0)"


_UNITS: dict[str, WritebackUnit] = {}
_loaded = False


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)


def register(unit: WritebackUnit) -> WritebackUnit:
    """Add `unit` after the units registered before it (it applies after them)."""
    if unit.name in _UNITS:
        raise ValueError(f"write-back unit '{unit.name}' is already registered")
    _UNITS[unit.name] = unit
    return unit


def unregister(name: str) -> None:
    del _UNITS[name]


@contextmanager
def registered(unit: WritebackUnit) -> Iterator[WritebackUnit]:
    """The registry with `unit` for the length of a `with` block (a tutorial, a test)."""
    _load_builtin()
    register(unit)
    try:
        yield unit
    finally:
        unregister(unit.name)


def units() -> tuple[WritebackUnit, ...]:
    """Every registered unit, in the order they apply."""
    _load_builtin()
    return tuple(_UNITS.values())


def unit(name: str) -> WritebackUnit | None:
    _load_builtin()
    return _UNITS.get(name)


def absorbing(kind: str) -> WritebackUnit | None:
    """The unit whose nn pass may fold an op of `kind` (ONNX op type or nn op name) into a conv."""
    return next((u for u in units() if kind in u.absorbs), None)


def layer_choices(attributes: Mapping[str, Any]) -> list[tuple[WritebackUnit, str]]:
    """The units a layer (an nn.conv2d's attributes) uses and its text for each."""
    out = []
    for u in units():
        text = attributes.get(u.name)
        if text is not None:
            out.append((u, getattr(text, "data", text)))
    return out


def layer_words(attributes: Mapping[str, Any], frac: int) -> tuple[tuple[str, int], ...]:
    """A layer's (unit name, word) pairs for an output with `frac` fraction bits (ConvShape.units)."""
    return tuple((u.name, u.word(text, frac)) for u, text in layer_choices(attributes))


def refusal(words: Mapping[str, int], hw: Any) -> str | None:
    """Why machine `hw` cannot run a layer with these unit words (one line), or None."""
    for name, word in words.items():
        u = unit(name)
        if u is None:
            return f"a conv with write-back unit word '{name}', which no registered unit has"
        if word and not u.machine_has(hw):
            return f"a conv with a write-back {u.title} on a machine without the unit (SnowflakeConfig.{u.switch} = 0)"
    return None


def check_text(u: WritebackUnit, text: str) -> None:
    """Raise a SnowError if `text` is not a function of unit `u` (its word at Q.8 is the test)."""
    try:
        u.word(text, 8)
    except (ValueError, OverflowError) as e:  # a NaN or huge parameter
        raise SnowError(f"write-back {u.title} '{text}': {e}") from None
