"""
The ONNX backend test suite against snowir.backend, filtered to what a CNN uses: the node tests
of the operators below (with the control flow exporters write: If, Loop, Scan), every
pytorch-converted and pytorch-operator test, and the light models (the `real` tests: AlexNet,
ResNet-50, VGG-19, ... with the wheel's weights).

  * FloatBackend at onnx's own tolerances (rtol 1e-3, atol 1e-7).
  * SnowflakeBackend (Q8.8, machine engine; light models left to bench/light_machine.py) at the
    Q8.8 tolerance stated in docs/frontend.md: max |error| <= 5% of max(1, max |reference|).

Each backend test is one pytest test. The known failures are listed with their reason and
marked strict xfail: one that starts passing turns the suite red until the list is updated.

Collection reads the tests' names from onnx_backend_selection.txt: generating the wheel's 1884
node tests (their reference outputs computed by onnx's Python reference ops) costs about 7
CPU-seconds, which every pytest-xdist worker paid to collect. The cases are built when a test
first needs them, and the module's tests share one xdist group, so one worker builds them once;
test_suite_selection_is_the_cnn_one checks the list against the filter (and says how to rewrite
it when the wheel changes).
"""

from __future__ import annotations

import functools
import os
import sys
import unittest
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.xdist_group("onnx-backend")

# ONNX_HOME (where the light models' data sets are unpacked): conftest.py, in the session's temporary folder

NODE_OPS = ["conv", "maxpool", "averagepool", "globalaveragepool", "globalmaxpool", "batchnorm", "relu", "leakyrelu",
            "prelu", "sigmoid", "hardsigmoid", "hardswish", "clip", "softmax", "lrn", "gemm", "matmul", "add", "mul",
            "sub", "div", "sum", "concat", "flatten", "reshape", "transpose", "squeeze", "unsqueeze", "dropout",
            "identity", "pad", "if", "loop11", "scan", "scan9"]
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
Q88_TOLERANCE = 0.05

_GARBAGE = "the test's data set holds uninitialised doubles (1e+198, 1e-309): not representable in fp32"
_NOT_TENSOR = "a sequence / optional input: snowir models take tensors"
FLOAT_XFAIL = {
    "test_operator_add_broadcast_cpu": _GARBAGE,
    "test_operator_add_size1_right_broadcast_cpu": _GARBAGE,
    "test_operator_add_size1_singleton_broadcast_cpu": _GARBAGE,
    "test_operator_addconstant_cpu": _GARBAGE,
    "test_identity_opt_cpu": _NOT_TENSOR,
    "test_identity_sequence_cpu": _NOT_TENSOR,
    "test_if_opt_cpu": _NOT_TENSOR,
    "test_if_seq_cpu": _NOT_TENSOR,
}
_LARGE = "inputs up to 10000 saturate Q8.8 (|x| < 128)"
SNOWFLAKE_XFAIL = {
    **FLOAT_XFAIL,
    "test_softmax_large_number_cpu": _LARGE,
    "test_softmax_large_number_expanded_cpu": _LARGE,
    "test_softmax_large_number_expanded_ver18_cpu": _LARGE,
}


def _suite(backend, light: bool, compare=None) -> dict[str, unittest.TestCase]:
    import onnx.backend.test as bt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite = bt.BackendTest(backend, __name__)
    if compare is not None:
        suite.assert_similar_outputs = staticmethod(compare)
    suite.include(r"^test_(%s)(_.*)?_cpu$" % "|".join(NODE_OPS))
    suite.include(r"^test_operator_.*_cpu$")
    suite.include(r"^test_[A-Z].*_cpu$")
    if light:
        suite.include(r"^test_(%s)_cpu$" % "|".join(LIGHT))
    cases = {}
    for cls in suite.test_cases.values():
        for name in dir(cls):
            if name.startswith("test_") and any(p.search(name) for p in suite._include_patterns):
                cases[name] = cls(name)
    return cases


def _q88_similar(ref_outputs, outputs, rtol, atol, model_dir=None) -> None:  # noqa: ARG001
    assert len(ref_outputs) == len(outputs)
    for ref, out in zip(ref_outputs, outputs):
        assert ref.dtype == out.dtype, f"output dtype {out.dtype}, expected {ref.dtype}"
        assert ref.shape == out.shape, f"output shape {out.shape}, expected {ref.shape}"
        if ref.dtype.kind == "f" and ref.size:
            nan = np.isnan(ref)
            np.testing.assert_array_equal(np.isnan(out), nan)  # sqrt of a negative stays NaN
            ref, out = ref[~nan], out[~nan]
            scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
            err = float(np.abs(ref.astype(np.float64) - out).max(initial=0.0))
            assert err <= Q88_TOLERANCE * scale, f"max |error| {err:.4g} > {Q88_TOLERANCE} x {scale:.4g}"
        else:
            np.testing.assert_array_equal(out, ref)


def _run(case: unittest.TestCase) -> None:
    result = unittest.TestResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case.run(result)
    problems = result.failures + result.errors
    if problems:
        pytest.fail(failure_message(problems[0][1]), pytrace=False)
    assert not result.skipped, f"skipped: {result.skipped[0][1]}"


def failure_message(traceback: str, limit: int = 2000) -> str:
    """What a failed backend test says: the exception and its whole message (numpy's
    `assert_allclose` spreads it over lines: tolerance, mismatched elements, max errors), not
    only the traceback's last line, which was one row of the arrays."""
    lines = traceback.rstrip().splitlines()
    frame = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1)
    start = next((i for i in range(frame + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), 0)
    message = "\n".join(line for line in lines[start:] if line.strip())
    return message if len(message) <= limit else message[:limit] + " ..."



def _params(names: list[str], xfail: dict[str, str]):
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=xfail[name])) if name in xfail
            else name for name in sorted(names)]


@functools.cache
def cases(kind: str) -> dict[str, unittest.TestCase]:
    """The selected backend tests of `kind` ("float" or "snowflake"), built on first use."""
    from snowir.backend import FloatBackend, SnowflakeBackend

    if kind == "float":
        return _suite(FloatBackend, light=True)
    return _suite(SnowflakeBackend, light=False, compare=_q88_similar)


SELECTION = Path(__file__).with_name("onnx_backend_selection.txt")
"""The names `cases` selects, `<kind> <name>` a line: what collection parametrizes over."""


def _listed() -> dict[str, list[str]]:
    listed: dict[str, list[str]] = {"float": [], "snowflake": []}
    for line in SELECTION.read_text().splitlines():
        if line and not line.startswith("#"):
            kind, name = line.split()
            listed[kind].append(name)
    return listed


def _selection_text() -> str:
    head = [line for line in SELECTION.read_text().splitlines() if line.startswith("#")]
    return "\n".join([*head, *(f"{kind} {name}" for kind in ("float", "snowflake") for name in sorted(cases(kind)))]) + "\n"


LISTED = _listed()


def test_suite_selection_is_the_cnn_one():
    # the filter: 356 node / pytorch tests (8 of If, Loop, Scan) + 9 light models; onnxruntime's
    # backend passes 301 of the 357 others and 7 of the 8 control-flow ones
    float_cases, snowflake_cases = cases("float"), cases("snowflake")
    assert len(float_cases) == 365
    assert {f"test_{m}_cpu" for m in LIGHT} <= set(float_cases)
    assert len(snowflake_cases) == 356
    assert set(FLOAT_XFAIL) <= set(float_cases) and set(SNOWFLAKE_XFAIL) <= set(snowflake_cases)
    # what collection runs is what the filter selects
    assert LISTED == {"float": sorted(float_cases), "snowflake": sorted(snowflake_cases)}, \
        f"{SELECTION.name} is not the filter's selection: python tests/test_onnx_backend.py --write-selection"


@pytest.mark.parametrize("name", _params(LISTED["float"], FLOAT_XFAIL))
def test_float_backend(name: str):
    _run(cases("float")[name])


@pytest.mark.parametrize("name", _params(LISTED["snowflake"], SNOWFLAKE_XFAIL))
def test_snowflake_backend(name: str):
    _run(cases("snowflake")[name])


def test_every_onnx_node_model_imports_or_is_refused_in_one_line():
    """All 1884 node-test models of the onnx wheel: imported, or refused with a SnowError of one
    line naming the model and the reason: never an internal exception."""
    from onnx.backend.test.case.node import collect_testcases

    from snowir.errors import SnowError
    from snowir.frontend.onnx_import import import_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    imported, refused = 0, 0
    for case in cases:
        try:
            import_model(case.model, case.name)
            imported += 1
        except SnowError as e:
            assert "\n" not in str(e) and str(e).startswith(case.name + ": "), str(e)
            refused += 1
    assert imported + refused == len(cases) and imported >= 1500, (imported, refused)


def test_a_failing_backend_test_shows_its_assertion_message():
    """numpy's assert_allclose message is several lines; the report keeps all of them."""
    class Case(unittest.TestCase):
        def test_it(self) -> None:
            np.testing.assert_allclose(np.array([1.0, 2.0]), np.array([1.0, 3.0]), rtol=1e-3)

    with pytest.raises(pytest.fail.Exception) as failed:
        _run(Case("test_it"))
    message = str(failed.value)
    assert "Not equal to tolerance rtol=0.001" in message and "Mismatched elements: 1 / 2" in message, message
    assert "Max absolute difference" in message, message


def _logits_model(channels: int = 1000, cin: int = 512, scale: float = 4e3):
    """SqueezeNet's end in small: a 1x1 conv whose output channels all have the same weights and
    values ~1e10, global average pool, softmax. onnxruntime gives 1000 equal probabilities."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.repeat(np.abs(np.random.default_rng(1).standard_normal((1, cin, 1, 1))).astype(np.float32) * scale,
                  channels, 0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Softmax", ["f"], ["y"])]
    graph = helper.make_graph(nodes, "logits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 13, 13])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_float_backend_computes_equal_channels_alike():
    """Equal weights give equal channels, whatever the CPU's BLAS does with channel blocks: the
    softmax of ~1e10 logits turns a 1e-7 relative difference into 1/760 against 1/1000."""
    from snowir.backend import FloatBackend

    x = np.abs(np.random.default_rng(0).standard_normal((1, 512, 13, 13))).astype(np.float32) * 1e4
    (y,) = FloatBackend.prepare(_logits_model()).run([x])
    np.testing.assert_array_equal(y, np.full((1, 1000), 1e-3, np.float32))


def test_float_conv_sums_a_channel_as_it_would_alone():
    """The reduction order of a channel does not depend on the other channels of its layer: the
    channel computed with 1000 others equals the channel computed alone (a float32 BLAS blocks
    output channels and sums each block in its own order; this held for 0 of 143 channels)."""
    import onnx

    from snowir.backend import FloatBackend

    x = np.random.default_rng(0).standard_normal((1, 512, 13, 13)).astype(np.float32) * 1e3
    model = _logits_model(scale=1.0)
    w = np.random.default_rng(2).standard_normal((1000, 512, 1, 1)).astype(np.float32)
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    model.graph.node[3].op_type = "Identity"  # the logits themselves
    (whole,) = FloatBackend.prepare(model).run([x])
    for k in range(0, 1000, 111):
        model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w[k:k + 1], "w"))
        model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
        (alone,) = FloatBackend.prepare(model).run([x])
        assert whole[0, k] == alone[0, 0], (k, whole[0, k], alone[0, 0])


def test_equal_channels_alike_with_the_blas_kernel_that_split_them():
    """The issue's machine, here: OpenBLAS's Haswell (AVX2) sgemm kernel sums SqueezeNet's 1000
    equal logits as two groups (760 and 240) in float32; the float path does not use it so. Run in
    a process of its own, the kernel chosen by OPENBLAS_CORETYPE (where the CPU has AVX2)."""
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ)
    cpu = Path("/proc/cpuinfo")
    if cpu.exists() and " avx2" in cpu.read_text():
        env["OPENBLAS_CORETYPE"] = "Haswell"
    code = ("import sys; sys.path.insert(0, 'tests'); import test_onnx_backend as t; "
            "t.test_float_backend_computes_equal_channels_alike(); print('alike')")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0 and "alike" in done.stdout, done.stderr[-2000:]


if __name__ == "__main__" and sys.argv[1:] == ["--write-selection"]:
    SELECTION.write_text(_selection_text())
    print(f"{SELECTION}: {sum(len(v) for v in _listed().values())} tests")
