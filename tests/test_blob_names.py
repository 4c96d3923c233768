"""
A model's printed IR and `.sfb` bytes depend on the model alone, not on what the process compiled
before it: xDSL's blob table is process-wide and renamed a taken key (`conv1_w` -> `conv1_w_0`),
so the second compile of the same model in one process wrote different bytes (an image hash
test then passed or failed with the test order). Blob keys now carry a digest of their bytes.
"""

from __future__ import annotations

from snowir.data import __path__ as data_path
from snowir.driver.model_api import compile as compile_model
from snowir.model_image import model_image
from snowir.resources import get_blob, put_blob

DIGITS = f"{list(data_path)[0]}/digits_cnn.onnx"


def test_compiling_a_model_twice_in_one_process_writes_the_same_image() -> None:
    first = model_image(compile_model(DIGITS).module).to_bytes()
    second = model_image(compile_model(DIGITS).module).to_bytes()
    assert first == second


def test_equal_names_with_different_bytes_keep_both() -> None:
    a, b = put_blob("w", b"\x01\x02"), put_blob("w", b"\x03\x04")
    assert a != b and bytes(get_blob(a)) == b"\x01\x02" and bytes(get_blob(b)) == b"\x03\x04"
    assert put_blob("w", b"\x01\x02") == a
