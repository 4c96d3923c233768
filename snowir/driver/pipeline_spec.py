"""
Pipeline text as users write it: MLIR's anchored `builtin.module(a,b{k=v})` spelling and bare
option values, turned into what xDSL's pipeline parser reads (snow-opt, snow-run --pipeline,
the Python API).
"""

from __future__ import annotations

import re

_OPTION = re.compile(r"""([A-Za-z_][\w-]*)=([^\s"'{}=,]+)""")


def _quote_option(m: re.Match) -> str:
    """MLIR-style bare option values (`format=Q8.8`, `hw=configs/zc706.json`) as the quoted
    strings xDSL's pipeline parser reads; numbers and booleans stay as they are."""
    key, value = m.group(1), m.group(2)
    if re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false", value):
        return m.group(0)
    return f'{key}="{value}"'


def unwrap_pipeline(spec: str) -> str:
    """`builtin.module(a,b{k=v})` -> `a,b{k=v}` (MLIR's anchored pipeline spelling), with bare
    option values quoted for xDSL."""
    spec = spec.strip()
    for anchor in ("builtin.module(", "module("):
        if spec.startswith(anchor) and spec.endswith(")"):
            spec = spec[len(anchor):-1].strip()
            break
    return re.sub(r"\{[^{}]*\}", lambda block: _OPTION.sub(_quote_option, block.group(0)), spec)


def explain_pipeline(spec: str, available: dict) -> str | None:
    """Why a pipeline does not build, in one line naming the pass (and option), with a
    "did you mean" for a misspelt pass name; None when it builds."""
    import dataclasses
    import difflib

    from xdsl.utils.arg_spec import parse_pipeline

    try:
        specs = list(parse_pipeline(spec))
    except BaseException:  # noqa: BLE001 - xDSL's own parse error says where
        return None
    for p in specs:
        if p.name not in available:
            close = difflib.get_close_matches(p.name, list(available), n=1)
            return f"unknown pass '{p.name}'" + (f": did you mean '{close[0]}'?" if close else
                                                 " (snow-opt --list-passes lists them)")
        cls = available[p.name]()
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls) if f.name != "name"}
        try:
            cls.from_pass_spec(p)
            for key, value in _spec_options(p).items():
                # xDSL takes `true` for an integer option (a bool is an int): `max-words=true` ran as 1
                if isinstance(value, bool) and _type_name(fields[key].type).startswith(("an integer", "a number")):
                    return f"pass '{p.name}': option {key}={str(value).lower()}: expected {_type_name(fields[key].type)}"
        except (ValueError, TypeError) as e:
            bad = [k for k in _spec_options(p) if k not in fields]
            if bad:
                return (f"pass '{p.name}' has no option '{bad[0]}' (its options: "
                        f"{', '.join(fields) or 'none'})")
            reason = str(e).splitlines()[0]
            for key, value in _spec_options(p).items():
                field = fields[key]
                # a bare number reaches here unwrapped (`_spec_options`), a string or list as a sequence
                given = tuple(value) if isinstance(value, (tuple, list)) else (value,)
                if repr(given) in reason or str(value) in reason:
                    return f"pass '{p.name}': option {key}={value}: expected {_type_name(field.type)}"
            return f"pass '{p.name}': {reason}"
    return None


def _spec_options(spec) -> dict:
    options = getattr(spec, "parameters", None) or getattr(spec, "args", None) or {}
    return {k: (v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v) for k, v in dict(options).items()}


def _type_name(t) -> str:
    name = t if isinstance(t, str) else getattr(t, "__name__", str(t))
    optional = name.endswith(" | None")  # an option whose absence means something of its own
    name = name.removesuffix(" | None")
    name = {"int": "an integer", "bool": "true or false", "str": "a string", "float": "a number"}.get(name, name)
    return f"{name} (or absent)" if optional else name
