"""
The one-line warning a run gives when fixed point saturates: the report carries, per layer and
per model input, how many values saturation changed (`saturated`, `saturated_share`); a share
above `WARN_SHARE` anywhere means the format is too narrow for that tensor, which silently
wrecks a model (a detector's feature pyramid reaching ~1,700 in Q8.8 gives an all-zero
probability map), so snow-run names the worst layers and the way out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

WARN_SHARE = 0.001
"""Saturated share of a layer's results (0.1%) above which a run warns."""
NAMED = 3
"""Layers the warning names, worst first."""


def saturating(report: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(name, share, count) of every layer or input whose saturated share exceeds WARN_SHARE,
    worst first; inputs are named `input 'x'`."""
    rows = [(f"input '{i['name']}'", i["saturated_share"], i["saturated"]) for i in report.get("inputs") or ()]
    rows += [(r["name"], r.get("saturated_share", 0.0), r.get("saturated", 0)) for r in report["layers"]]
    return sorted((r for r in rows if r[1] > WARN_SHARE), key=lambda r: (-r[1], r[0]))


def _constant(outputs: Sequence[np.ndarray] | None) -> str | None:
    """`output k is constant (v)` for the first output that is one value throughout, else None."""
    for k, out in enumerate(outputs or ()):
        out = np.asarray(out)
        if out.dtype == np.bool_ or not np.issubdtype(out.dtype, np.number):
            continue  # a mask (Dropout's): one value throughout says nothing of saturation
        if out.size > 1 and np.ptp(out) == 0:
            return f"output {k} is constant ({float(out.reshape(-1)[0]):g} everywhere)"
    return None


def saturation_warning(report: dict[str, Any], outputs: Sequence[np.ndarray] | None = None,
                       api: bool = False) -> str | None:
    """One line naming the worst saturating layers, their share and what to try, or None when no
    layer saturates more than WARN_SHARE of its results; it also says when the output is constant
    (against a reference that is not, when the report has a check). `api`: the way out in the
    Python API's words (format=, calibration=) rather than the command line's."""
    worst = saturating(report)
    check = report.get("check") or {}
    constant = _constant(outputs)
    if check.get("constant_output"):
        constant = f"{constant or 'the output is nearly constant'} while {check['reference']}'s is not"
    elif check:
        constant = None  # the reference is constant too: nothing to say
    if not worst:
        return f"warning: {constant}" if constant and check.get("constant_output") else None
    provenance = report.get("provenance") or {}
    fmt = provenance.get("format") or "Q8.8"
    named = ", ".join(f"{name} {_pct(share)} ({count:,})" for name, share, count in worst[:NAMED])
    count = f"{len(worst)} over {100 * WARN_SHARE:g}%"
    if fmt == "auto":
        fix = f"calibrate with inputs like the real ones ({'calibration=' if api else '--calibration X.npy'})"
    else:
        fix = "try format='auto', calibration=<inputs like the real ones>" if api else \
            "try --format auto --calibration X.npy"
    tail = f"; {constant}" if constant else ""
    return f"warning: {fmt} saturates, values clipped: {named} ({count}){tail}; {fix}"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%" if share >= 0.001 else f"{100 * share:.2f}%"
