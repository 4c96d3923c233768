"""
Bytes <-> `dense_resource` blobs: big arrays (weights, segment data) live in the module's
`dialect_resources` section as one hex line each, so printed IR stays a few hundred lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import hashlib
import re

import numpy as np
from xdsl.dialect_interfaces.op_asm import OpAsmDialectInterface
from xdsl.dialects.builtin import Builtin, DenseResourceAttr, Float32Type, IntegerType, TensorType

from snowir.errors import SnowError

_ALIGNMENT_PREFIX = (8).to_bytes(4, "little")  # MLIR blob header: alignment


class _Blobs(dict):
    """xDSL's blob table, holding the bytes a pass stored as bytes: the hex text MLIR prints is
    made only when the printer asks for it (VGG-19's 548 MB of weights were hex-encoded and
    decoded again between passes: ~20 s and twice the memory). Parsed blobs arrive as text."""

    def __getitem__(self, key: str) -> str:
        value = dict.__getitem__(self, key)
        return value if isinstance(value, str) else "0x" + (_ALIGNMENT_PREFIX + value).hex()

    def get(self, key: str, default=None):
        return self[key] if key in self else default

    def raw(self, key: str) -> bytes | memoryview | str | None:
        return dict.get(self, key)


ELIDED = "__elided__"
"""What `--elide-resources-if-larger` prints for a large blob (MLIR's spelling); it parses back
as a blob without data."""


class ElidedBlobError(SnowError):
    """A run needs the data of a blob that was elided when the IR was printed."""


def _interface() -> OpAsmDialectInterface:
    iface = Builtin.get_interface(OpAsmDialectInterface)
    assert iface is not None
    if not isinstance(iface._blob_storage, _Blobs):
        iface._blob_storage = _Blobs(iface._blob_storage)
        parse_hex = iface.parse_resource

        def parse_resource(key: str, val: str) -> None:
            if val == ELIDED:  # printed with --elide-resources-if-larger: no data, and no error until used
                iface._blob_storage[key] = ELIDED
                return
            parse_hex(key, val)

        iface.parse_resource = parse_resource  # type: ignore[method-assign]
    return iface


def reset_blobs() -> None:
    """
    Forget all blobs. xDSL keeps them in one process-wide table and, when parsing, renames
    a handle that is already in the table (`w` -> `w_0`) while the `dialect_resources`
    section still fills `w`; parsing a second module with the same handles then loses its
    data. Every parse in snowir starts from an empty table (callers consume blobs at once).
    """
    _interface()._blob_storage.clear()


def put_blob(key: str, data: bytes | np.ndarray) -> str:
    """Store `data` under `key`; returns the key used. A key the process-wide table already holds
    with the same bytes is shared, with other bytes it becomes `key_<digest of the bytes>`: xDSL's
    own renaming (`w` -> `w_0`) made a model's printed IR and `.sfb` bytes depend on what the
    process had compiled before (the same model compiled twice wrote two images). A model compiled
    first in a process keeps its plain names, so its images are the ones it always had. An array is
    kept as a read-only view of its bytes (no copy: an importer's weights and the module's blobs
    are one buffer)."""
    iface = _interface()
    if isinstance(data, np.ndarray):
        data = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8)).toreadonly()
    store = iface._blob_storage
    if key in store and not _same_bytes(key, data):
        key = f"{key}_{hashlib.blake2b(data, digest_size=4).hexdigest()}"
    if key not in store:
        iface.declare_resource(key)
    store[key] = data  # new, or the same bytes again (perhaps as parsed text): kept as bytes
    return key


def _same_bytes(key: str, data: bytes | memoryview) -> bool:
    held = _interface()._blob_storage.raw(key)
    if isinstance(held, str):
        return held == "0x" + (_ALIGNMENT_PREFIX + bytes(data)).hex()
    return held is not None and len(held) == len(data) and bytes(held) == bytes(data)


def get_blob(key: str) -> bytes | memoryview | None:
    store = _interface()._blob_storage
    value = store.raw(key)
    if value is None or isinstance(value, str) and not value:  # unknown, or declared and never filled
        return None
    if value == ELIDED:
        raise ElidedBlobError(f"resource '{key}' was elided when the IR was printed "
                              f"(--elide-resources-if-larger): its data is not in the file; print it without that flag")
    if isinstance(value, str):  # parsed text: decode once, keep the bytes
        value = bytes.fromhex(value[2:])[len(_ALIGNMENT_PREFIX):]
        dict.__setitem__(store, key, value)
    return value


def int16_resource(key: str, values: np.ndarray) -> DenseResourceAttr:
    used = put_blob(identifier(key), np.ascontiguousarray(values, dtype="<i2"))
    return DenseResourceAttr.from_params(used, TensorType(IntegerType(16), [int(values.size)]))


@contextmanager
def elided_blobs(limit: int) -> Iterator[None]:
    """While printing: blobs of more than `limit` bytes read `__elided__` (MLIR's spelling)."""
    store = _interface()._blob_storage
    kept = dict(store)  # the raw values (bytes or text)
    try:
        for key, value in kept.items():
            size = (len(value) - 2) // 2 - len(_ALIGNMENT_PREFIX) if isinstance(value, str) else len(value)
            if value and size > limit:
                store[key] = ELIDED
        yield
    finally:
        store.clear()
        store.update(kept)


def int16_array(value: DenseResourceAttr) -> np.ndarray:
    """The int16 values of a resource `int16_resource` made (or parsed text of one)."""
    blob = get_blob(value.resource_handle.data)
    if blob is None:
        raise KeyError(f"resource '{value.resource_handle.data}' has no data")
    return np.frombuffer(blob, dtype="<i2").astype(np.int16)


def int16_words(value: DenseResourceAttr) -> int | None:
    """How many int16 values a resource holds (None: its data is not loaded, a module read back
    with its blobs elided)."""
    blob = get_blob(value.resource_handle.data)
    return None if blob is None else len(blob) // 2


def identifier(name: str) -> str:
    """`name` as an MLIR identifier (blob keys, SSA name hints)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return ident if ident and not ident[0].isdigit() else "v" + ident


def f32_resource(key: str, array: np.ndarray) -> DenseResourceAttr:
    data = np.asarray(array, dtype="<f4", order="C")  # ascontiguousarray would make a scalar 1-D
    used = put_blob(identifier(key), data)
    return DenseResourceAttr.from_params(used, TensorType(Float32Type(), list(data.shape)))
