"""ONNX control flow (issue 28, item 1): an If on a constant condition is its taken branch,
inlined; an If on a computed condition, a Loop and a Scan run on the host as nn.host nodes
carrying their sub-graphs, through onnxruntime or, without it, onnx's reference evaluator."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xdsl.utils.exceptions import VerifyException

from snowir.dialects import nn
from tests.onnx_util import ort_run, rand

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
X = [1, 16, 8, 8]
CONV = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
WEIGHTS = {"w": rand(16, 16, 3, 3, scale=0.1), "b": rand(16, seed=1, scale=0.1)}


def _model(nodes: list, inits: dict, outputs: dict[str, list[int]] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", F, X)],
                              [helper.make_tensor_value_info(k, F, v) for k, v in (outputs or {"y": X}).items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in {**WEIGHTS, **inits}.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _branch(name: str, nodes: list, out: str, inits: dict | None = None) -> onnx.GraphProto:
    """A branch reading the outer value `c` (no inputs: If's branches take none)."""
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F, X)],
                             [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])


def _if(cond: str) -> onnx.NodeProto:
    then = _branch("then", [helper.make_node("Mul", ["c", "two"], ["t"])], "t", {"two": np.array(2, np.float32)})
    other = _branch("else", [helper.make_node("Sigmoid", ["c"], ["e"])], "e")
    return helper.make_node("If", [cond], ["y"], name="if", then_branch=then, else_branch=other)


def if_on_shape() -> onnx.ModelProto:
    """What exporters write for `if x.shape[1] == 16`: the condition folds to a constant."""
    return _model([CONV, helper.make_node("Shape", ["c"], ["sh"]), helper.make_node("Gather", ["sh", "one"], ["ch"]),
                   helper.make_node("Equal", ["ch", "sixteen"], ["cond"]), _if("cond")],
                  {"one": np.array(1, np.int64), "sixteen": np.array(16, np.int64)})


def if_on_data() -> onnx.ModelProto:
    return _model([CONV, helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0),
                   helper.make_node("Greater", ["s", "zero"], ["cond"]), _if("cond")], {"zero": np.array(0, np.float32)})


def loop() -> onnx.ModelProto:
    """Three steps of v <- (v + c) / 2 (`c` read from the outer scope), each step's v scanned out;
    y = the last v + the mean of the scanned ones."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "c"], ["s"]),
         helper.make_node("Mul", ["s", "half"], ["v_out"]), helper.make_node("Identity", ["v_out"], ["scan"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []),
                 helper.make_tensor_value_info("v_in", F, X)],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, X),
         helper.make_tensor_value_info("scan", F, X)],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    return _model([CONV, helper.make_node("Loop", ["trips", "true", "c"], ["v", "steps"], name="loop", body=body),
                   helper.make_node("ReduceMean", ["steps"], ["m"], axes=[0], keepdims=0),
                   helper.make_node("Add", ["v", "m"], ["y"])],
                  {"trips": np.array(3, np.int64), "true": np.array(True)})


def scan() -> onnx.ModelProto:
    """A running sum over the 16 channels (rows of 64), each partial sum through a Relu (its body's
    names are those the host's one-node model would give the node's own inputs and outputs)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["in0", "row"], ["s_out"]), helper.make_node("Relu", ["s_out"], ["out1"])],
        "body", [helper.make_tensor_value_info("in0", F, [64]), helper.make_tensor_value_info("row", F, [64])],
        [helper.make_tensor_value_info("s_out", F, [64]), helper.make_tensor_value_info("out1", F, [64])])
    return _model([CONV, helper.make_node("Reshape", ["c", "rows"], ["c2"]),
                   helper.make_node("Scan", ["s0", "c2"], ["total", "partial"], name="scan", body=body,
                                    num_scan_inputs=1),
                   helper.make_node("Reshape", ["partial", "shape"], ["y"])],
                  {"rows": np.array([16, 64], np.int64), "s0": np.zeros(64, np.float32), "shape": np.array(X, np.int64)})


def _x() -> np.ndarray:
    return np.random.default_rng(9).uniform(-1, 1, X).astype(np.float32)


def _hosts(m: onnx.ModelProto) -> list[str]:
    from snowir.frontend.onnx_import import import_model

    return [op.op_type.data for op in import_model(m).walk() if isinstance(op, nn.HostOp)]


def test_an_if_on_a_constant_condition_is_its_branch_inlined() -> None:
    from snowir.backend import FloatBackend

    m, x = if_on_shape(), _x()
    assert _hosts(m) == []  # Mul by the branch's constant 2: an nn op, no host node
    assert np.allclose(FloatBackend.prepare(m).run([x])[0], ort_run(m, x), atol=1e-5)
    m.graph.initializer[[t.name for t in m.graph.initializer].index("sixteen")].CopyFrom(
        numpy_helper.from_array(np.array(15, np.int64), "sixteen"))
    assert _hosts(m) == ["Sigmoid"]  # the else branch
    assert np.allclose(FloatBackend.prepare(m).run([x])[0], ort_run(m, x), atol=1e-5)


def test_a_loop_on_constants_is_folded() -> None:
    """A Loop reading only constants (its scan outputs stacked, as onnxruntime has them) is a constant."""
    from snowir.backend import FloatBackend

    m = loop()
    nodes = list(m.graph.node)
    nodes[1].input[2] = "v0"
    nodes[1].attribute[0].g.node[1].input[1] = "v0"
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.append(numpy_helper.from_array(rand(*X, seed=3), "v0"))
    m.graph.node[-1].input[1] = "c"  # y = the last v + c
    m.graph.node.insert(len(nodes) - 1, helper.make_node("Add", ["m", "c"], ["unused"]))
    assert "Loop" not in _hosts(m)
    x = _x()
    assert np.allclose(FloatBackend.prepare(m).run([x])[0], ort_run(m, x), atol=1e-5)


@pytest.mark.parametrize("build,op", [(if_on_data, "If"), (loop, "Loop"), (scan, "Scan")])
def test_control_flow_runs_on_the_host_and_matches_onnxruntime(build, op: str) -> None:
    from snowir.backend import FloatBackend, SnowflakeBackend
    from snowir.driver.check import snr_db

    m, x = build(), _x()
    assert _hosts(m).count(op) == 1  # (with host arithmetic around it: the If's condition, ...)
    ref = ort_run(m, x)
    assert np.allclose(FloatBackend.prepare(m).run([x])[0], ref, atol=1e-5)
    (y,) = SnowflakeBackend.prepare(m, engine="golden").run([x])
    assert snr_db(ref, y) > 30  # snow-run --check's default bar: Q8.8 conv output into the host node


def test_an_if_on_data_takes_either_branch() -> None:
    from snowir.backend import FloatBackend

    m = if_on_data()
    rep = FloatBackend.prepare(m)
    for x in (_x(), -_x(), np.full(X, 3, np.float32), np.full(X, -3, np.float32)):
        assert np.allclose(rep.run([x])[0], ort_run(m, x), atol=1e-5)


def test_a_host_node_with_sub_graphs_prints_parses_and_verifies() -> None:
    from snowir.frontend.onnx_import import import_model
    from xdsl.parser import Parser

    from tests.test_dialects import _ctx

    for build in (if_on_data, loop, scan):
        text = str(import_model(build()))
        again = Parser(_ctx(), text).parse_module()
        again.verify()
        hosts = [line for line in text.splitlines() if "nn.host" in line]
        assert hosts and hosts == [line for line in str(again).splitlines() if "nn.host" in line]
        assert "#nn.onnx_graph<\"" in text
        assert ('captures = ["c"]' in text) == (build is not scan)  # If's and Loop's sub-graphs read `c`
    bad = import_model(loop())
    host = next(op for op in bad.walk() if isinstance(op, nn.HostOp) and op.captures is not None)
    host.properties["captures"] = nn.ArrayAttr([nn.StringAttr("c"), nn.StringAttr("c")])
    with pytest.raises(VerifyException, match="captures"):
        host.verify()


def test_snow_run_checks_a_loop_against_onnxruntime(tmp_path: Path, capsys) -> None:
    from snowir.tools.snow_run import main as snow_run

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(loop(), path)
    rc = snow_run([str(path), "--check", "--quiet", "--report", str(report)])
    assert rc == 0, capsys.readouterr().err
    got = json.loads(report.read_text())
    assert got["check"]["reference"] == "onnxruntime" and got["check"]["snr_db"] > 30
    assert {layer["name"]: layer["where"] for layer in got["layers"]}["loop"] == "host"


def test_the_reference_evaluator_runs_control_flow_without_onnxruntime(monkeypatch) -> None:
    from snowir.backend import FloatBackend
    from snowir.frontend import onnx_host

    x = _x()
    refs = {build: ort_run(build(), x) for build in (if_on_shape, if_on_data, loop, scan)}
    monkeypatch.setattr(onnx_host.NodeRunner, "_cache", {})
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    for build, ref in refs.items():
        assert np.allclose(FloatBackend.prepare(build()).run([x])[0], ref, atol=1e-5), build.__name__


def test_a_loop_of_data_dependent_length_is_refused_in_one_line() -> None:
    from snowir.errors import SnowError
    from snowir.frontend.onnx_import import import_model

    m = loop()
    trips = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0), helper.make_node("Cast", ["mx"], ["trips"], to=I64)]
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(trips + nodes)
    del m.graph.initializer[[t.name for t in m.graph.initializer].index("trips")]
    with pytest.raises(SnowError, match=r"^<onnx>: node 'loop' \(Loop\): its scan outputs are as long as a trip count "
                                        r"that is computed or absent \(it depends on the data\); not supported$"):
        import_model(m)


def test_a_sub_graph_operator_no_runtime_runs_is_refused_in_one_line() -> None:
    from snowir.errors import SnowError
    from snowir.frontend.onnx_import import import_model

    odd = _branch("then", [helper.make_node("Frobnicate", ["c"], ["t"], name="odd", domain="org.example")], "t")
    other = _branch("else", [helper.make_node("Sigmoid", ["c"], ["e"])], "e")
    m = if_on_data()
    m.graph.node[-1].CopyFrom(helper.make_node("If", ["cond"], ["y"], name="if", then_branch=odd, else_branch=other))
    m.opset_import.append(helper.make_opsetid("org.example", 1))
    with pytest.raises(SnowError, match=r"^<onnx>: node 'odd' \(Frobnicate\): operator domain 'org.example' has no "
                                        r"operator Frobnicate that onnxruntime runs, nor does onnx's reference evaluator$"):
        import_model(m)


def test_the_reference_loop_stacks_scan_outputs_as_onnxruntime_does() -> None:
    """onnx's reference Loop joins three [1, 16, 8, 8] scan outputs into [3, 16, 8, 8]; ONNX's shape
    inference and onnxruntime stack them, [3, 1, 16, 8, 8]: the fallback does too."""
    from snowir.frontend.onnx_host import ort_session, reference_evaluator

    m = loop()
    m.graph.output.append(helper.make_tensor_value_info("steps", F, [3, *X]))
    x = _x()
    ref = ort_session(m).run(None, {"x": x})
    got = reference_evaluator(m).run(None, {"x": x})
    assert [g.shape for g in got] == [r.shape for r in ref] == [tuple(X), (3, *X)]
    assert all(np.allclose(g, r, atol=1e-5) for g, r in zip(got, ref))


def test_a_loop_that_stops_early_on_other_data_fails_its_run_in_one_line() -> None:
    """The scan outputs' length comes from one run on zeros (3 steps); a condition computed from the
    data that stops the loop after one step is caught at that run, not passed on with a wrong shape."""
    from snowir.backend import FloatBackend
    from snowir.errors import SnowError

    m = loop()
    body = m.graph.node[1].attribute[0].g
    body.node[0].CopyFrom(helper.make_node("ReduceSum", ["v_in"], ["sv"], keepdims=0))
    body.node.insert(1, helper.make_node("Less", ["sv", "limit"], ["cond_out"]))
    body.initializer.append(numpy_helper.from_array(np.array(50, np.float32), "limit"))
    rep = FloatBackend.prepare(m)
    x = np.full(X, 5, np.float32)  # 3 steps, as on zeros
    assert np.allclose(rep.run([x])[0], ort_run(m, x), atol=1e-5)
    with pytest.raises(SnowError, match=r'^nn.host "Loop": result of shape \[1, 1, 16, 8, 8\], the IR says '
                                        r'\[3, 1, 16, 8, 8\]$'):
        rep.run([-x])  # 1 step


def test_a_control_flow_node_builds_its_session_once(monkeypatch) -> None:
    from snowir.backend import SnowflakeBackend
    from snowir.frontend import onnx_host

    built = []
    real = onnx_host.ort_session
    monkeypatch.setattr(onnx_host.NodeRunner, "_cache", {})
    monkeypatch.setattr(onnx_host, "ort_session", lambda model: built.append(model.graph.node[0].op_type) or real(model))
    rep = SnowflakeBackend.prepare(if_on_data(), engine="golden")
    for x in (_x(), -_x(), _x()):
        rep.run([x])
    assert built.count("If") == 1
