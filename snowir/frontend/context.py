"""
What an ONNX node handler may ask of the importer (onnx_handlers.py), declared below both so the
handlers do not depend on the importer that calls them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx
from xdsl.ir import Operation, SSAValue

from snowir.errors import SnowError


class ImportContext(Protocol):
    consts: dict[str, np.ndarray]
    """Folded constants by tensor name."""
    values: dict[str, SSAValue]
    """The nn values of the tensors imported so far."""
    consumed: set[str]
    """Tensor names some node or graph output reads."""

    def fail(self, node: onnx.NodeProto, why: str) -> SnowError: ...

    def emit(self, op: Operation) -> Operation: ...

    def const_value(self, name: str, keep_dtype: bool = False) -> SSAValue: ...

    def new_const(self, name: str, array: np.ndarray) -> SSAValue: ...

    def value(self, node: onnx.NodeProto, name: str) -> SSAValue: ...

    def const(self, node: onnx.NodeProto, index: int, what: str) -> np.ndarray: ...

    def shape(self, value: SSAValue) -> list[int]: ...

    def set_output(self, node: onnx.NodeProto, op: Operation, index: int = 0) -> None: ...
