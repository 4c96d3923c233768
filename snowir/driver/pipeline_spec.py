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
