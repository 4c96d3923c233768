"""
Fast paths for ops that are nothing but properties (the snowflake_asm instructions: no operands,
results, successors or regions), built and verified 10^5 times per model.

xDSL's `Operation.__init__` and generic IRDL verifier handle every kind of op: ~10 us each per
instruction, seconds per network. Here construction copies the one empty state every such op
shares, and verification proves the common case cheaply and hands anything else to xDSL, so
what is accepted, and every error, stays xDSL's (tests/test_dialects.py compares the two).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Attribute, Operation, SSAValues
from xdsl.irdl import BaseAttr, IRDLOperation, OptPropertyDef

Layout = tuple[tuple[str, type[Attribute], bool], ...]
"""(name, attribute class, required) per property of an op class."""

_BLANK: dict[type[Operation], dict[str, object]] = {}
_LAYOUTS: dict[type[Operation], Layout] = {}


def initialise(op: IRDLOperation, properties: dict[str, Attribute], attributes: dict[str, Attribute]) -> None:
    """What `Operation.__init__(op, properties=..., attributes=...)` does, at a fifth of the cost:
    the state of an op without operands, results, successors or regions is the same empty tuples
    and unknown location for every op, so it is taken once a class from a real
    `Operation.__init__` and copied. A class with property defaults (IRDL's `__post_init__` fills
    them) or with state that cannot be shared is built the ordinary way."""
    blank = _BLANK.get(type(op))
    if blank is None:
        blank = _BLANK[type(op)] = _blank_state(type(op))
    if blank:
        state = op.__dict__
        state.update(blank)
        state["properties"] = properties
        state["attributes"] = attributes
    else:
        Operation.__init__(op, properties=properties, attributes=attributes)


def _blank_state(cls: type[IRDLOperation]) -> dict[str, object]:
    """The instance state `Operation.__init__` gives an op of `cls` with no properties, when all
    of it can be shared between ops (empty tuples, attributes); else {}."""
    if any(prop.default_value is not None for prop in cls.get_irdl_definition().properties.values()):
        return {}
    probe = cls.__new__(cls)
    Operation.__init__(probe)
    state = dict(probe.__dict__)
    for mutable in ("properties", "attributes"):
        state.pop(mutable)
    if not all(isinstance(value, Attribute) or (type(value) in (tuple, SSAValues) and not value)
               for value in state.values()):
        return {}
    return state


def verified_fast(op: IRDLOperation, own_verify: Callable[[IRDLOperation], None]) -> bool:
    """True when `op` is proved valid: no operands, results, regions or successors, not last in
    its block (xDSL's terminator rule), exactly the properties its class declares, each of exactly
    the declared class, and `own_verify` (the class's field checks) passes. False: run xDSL's
    generic `Operation.verify`, which gives the verdict and the error."""
    cls = type(op)
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _property_layout(cls)
    if (not layout or op._operands or op.results or op.regions or op._successors  # pyright: ignore[reportPrivateUsage]
            or op.next_op is None or not _has_layout(op.properties, layout)):
        return False
    try:
        own_verify(op)
    except Exception:  # noqa: BLE001 - the generic verifier raises it again, as xDSL words it
        return False
    return True


def _property_layout(cls: type[IRDLOperation]) -> Layout:
    """`cls`'s properties; () when its definition has anything else to verify (operands,
    attributes, options, traits, a constraint other than one attribute class)."""
    op_def = cls.get_irdl_definition()
    if (op_def.operands or op_def.results or op_def.regions or op_def.successors or op_def.attributes
            or op_def.options or list(op_def.traits)):
        return ()
    layout: list[tuple[str, type[Attribute], bool]] = []
    for name, prop in op_def.properties.items():
        if not isinstance(prop.constr, BaseAttr):
            return ()
        layout.append((name, prop.constr.attr, not isinstance(prop, OptPropertyDef)))
    return tuple(layout)


def _has_layout(props: dict[str, Attribute], layout: Layout) -> bool:
    found = 0
    for name, attr_cls, required in layout:
        attr = props.get(name)
        if attr is None:
            if required:
                return False
        elif type(attr) is not attr_cls:
            return False
        else:
            found += 1
    return found == len(props)
