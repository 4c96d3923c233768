"""
Comparing snowir's results with onnxruntime fp32: logits (pre-softmax) of an ONNX model and
of an nn module, max abs error and SNR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from xdsl.dialects.builtin import ModuleOp

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.fixedpoint import dequantize
from snowir.frontend.onnx_prepare import prepare
from snowir.golden import Golden, element_frac, quantize


def softmax_input(graph: onnx.GraphProto, output: int = 0) -> str | None:
    """The tensor feeding the Softmax that produces graph output `output`, if any. In a quantized
    model (which snowir imports as the float model, docs/frontend.md) the Softmax may be followed
    by a QuantizeLinear -> DequantizeLinear pair, or be com.microsoft's QLinearSoftmax between
    8-bit tensors: `dequantized_softmax_inputs` gave the probe the float value that one reads."""
    producers = {o: n for n in graph.node for o in n.output}
    name = graph.output[output].name
    for _ in range(6):  # Softmax, possibly followed by Reshape/Flatten/Identity, a Q -> DQ pair
        node = producers.get(name)
        if node is None:
            return None
        if node.op_type == "Softmax":
            return node.input[0]
        if node.op_type == "QLinearSoftmax" and f"{node.input[0]}{LOGITS}" in producers:
            return f"{node.input[0]}{LOGITS}"
        if node.op_type == "DequantizeLinear" and node.input[0] in producers \
                and producers[node.input[0]].op_type in ("QuantizeLinear", "QLinearSoftmax"):
            name = node.input[0] if producers[node.input[0]].op_type == "QLinearSoftmax" \
                else producers[node.input[0]].input[0]
            continue
        if node.op_type not in ("Reshape", "Flatten", "Identity", "Squeeze"):
            return None
        name = node.input[0]
    return None


LOGITS = "_dequantized_logits"


def dequantized_softmax_inputs(graph: onnx.GraphProto) -> None:
    """Give each com.microsoft QLinearSoftmax's 8-bit input a float copy, NAME + LOGITS, for
    `softmax_input` to name (the logits --check compares)."""
    for node in [n for n in graph.node if n.op_type == "QLinearSoftmax" and len(n.input) >= 3]:
        graph.node.append(helper.make_node("DequantizeLinear", list(node.input[:3]), [f"{node.input[0]}{LOGITS}"]))


ORT_MAX_IR_VERSION = 10
"""The newest ONNX IR version the pinned onnxruntime loads; models are given it for --check."""


def ort_logits(model: onnx.ModelProto | str, x: np.ndarray) -> np.ndarray:
    """onnxruntime fp32 logits of the model as snowir imports it (opset upgraded, as the
    importer does, so old operators ORT no longer implements still run)."""
    import onnxruntime as ort


    source = model if isinstance(model, str) else "<model>"
    probe = prepare(onnx.load(model) if isinstance(model, str) else model, source)  # a new model: edited below
    probe.ir_version = min(probe.ir_version, ORT_MAX_IR_VERSION)
    dequantized_softmax_inputs(probe.graph)
    logits = softmax_input(probe.graph) or probe.graph.output[0].name
    if logits not in {o.name for o in probe.graph.output}:
        probe.graph.output.insert(0, helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = probe.SerializeToString()
    del probe  # a big model's weights: once in `data`, once in the session, not a third time
    sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    del data
    inputs = [i for i in sess.get_inputs()]
    out = sess.run([logits], {inputs[0].name: x})[0]
    return np.asarray(out, np.float32)


def golden_logits(module: ModuleOp, x: np.ndarray) -> np.ndarray:
    """The input of the last nn.softmax (or the output if there is none), dequantised."""
    golden = Golden(module)
    captured: dict[str, np.ndarray] = {}
    lastsoftmax_input = None
    for op in golden.main.body.block.ops:
        if isinstance(op, nn.SoftmaxOp):
            lastsoftmax_input = op.input

    def trace(result, value) -> None:
        if lastsoftmax_input is not None and result is lastsoftmax_input:
            captured["logits"] = golden._float(value)

    golden.trace = trace
    outputs = golden.run(x)
    if lastsoftmax_input is not None and "logits" not in captured:
        owner = lastsoftmax_input.owner
        if not hasattr(owner, "results"):  # the softmax reads a block argument: as the model holds it

            frac = element_frac(lastsoftmax_input)
            captured["logits"] = x if frac is None else dequantize(quantize(x, frac), frac)
    return np.asarray(captured.get("logits", outputs[0]), np.float32)


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    ref = np.asarray(reference, np.float64).ravel()
    err = np.asarray(test, np.float64).ravel() - ref
    noise = float(np.sum(err * err))
    signal = float(np.sum(ref * ref))
    if noise == 0.0:
        return float("inf")
    return 10.0 * np.log10(signal / noise) if signal > 0 else float("-inf")


def compare(reference: np.ndarray, test: np.ndarray) -> dict[str, float | bool]:
    ref = reference.reshape(reference.shape[0], -1) if reference.ndim > 1 else reference[None]
    tst = test.reshape(ref.shape)
    return {"max_abs_err": float(np.abs(tst - ref).max()),
            "snr_db": snr_db(ref, tst),
            "top1_match": bool((ref.argmax(axis=1) == tst.argmax(axis=1)).all())}


COLLAPSED = 0.01
"""An output whose spread (max - min) is below this share of the reference's has collapsed."""


def constant_output(test: np.ndarray, reference: np.ndarray) -> bool:
    """`test` is (nearly) one value throughout while `reference` is not: what a detector whose
    activations saturate gives (PP-OCR's probability map in Q8.8 on a synthetic page: all below
    1.3e-6 where onnxruntime's reaches 0.067), worth a warning whatever the SNR says."""
    test, reference = np.asarray(test, np.float64), np.asarray(reference, np.float64)
    spread = float(np.ptp(reference)) if reference.size else 0.0
    return bool(test.size > 1 and spread > 0 and float(np.ptp(test)) <= COLLAPSED * spread)


# ---------------------------------------------------------------- every output
def _feeds(names: list[str], xs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    if len(names) != len(xs):
        raise SnowError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(xs)}")
    return dict(zip(names, xs))


def ort_checked(model: onnx.ModelProto | str, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime fp32, per graph output, what --check compares: the logits (the Softmax's
    input) of an output a Softmax produces, else the output itself."""
    import onnxruntime as ort

    source = model if isinstance(model, str) else "<model>"
    probe = prepare(onnx.load(model) if isinstance(model, str) else model, source)
    probe.ir_version = min(probe.ir_version, ORT_MAX_IR_VERSION)
    dequantized_softmax_inputs(probe.graph)
    wanted = []
    for k, out in enumerate(probe.graph.output):
        wanted.append(softmax_input(probe.graph, k) or out.name)
    listed = {o.name for o in probe.graph.output}
    for name in dict.fromkeys(wanted):
        if name not in listed:
            probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    inits = {t.name for t in probe.graph.initializer}
    names = [i.name for i in probe.graph.input if i.name not in inits]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = probe.SerializeToString()
    del probe
    sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    del data
    feeds = _feeds(names, xs)
    outs = sess.run(list(dict.fromkeys(wanted)), feeds)
    by_name = dict(zip(dict.fromkeys(wanted), outs))
    return [np.asarray(by_name[w], np.float32) for w in wanted]


def golden_checked(module: ModuleOp, xs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """The golden model's values, dequantised, of what --check compares per output of @main: the
    input of the nn.softmax that produces it (through reshapes), else the output itself; and
    `golden_logits`' value (the last softmax's input, else the first output), from the same run."""
    golden = Golden(module)
    block = golden.main.body.block
    ret = block.last_op
    softmaxes = [op.input for op in block.ops if isinstance(op, nn.SoftmaxOp)]
    wanted = [_logits_of(v) for v in ret.operands]
    last = softmaxes[-1] if softmaxes else ret.operands[0]
    ids = {id(v) for v in [*wanted, last]}
    captured: dict[int, np.ndarray] = {}

    def trace(result, value) -> None:
        if id(result) in ids:
            captured[id(result)] = golden._float(value)

    golden.trace = trace
    outputs = golden.run(*xs)

    def value_of(value, output: np.ndarray | None) -> np.ndarray:
        if id(value) in captured:
            return np.asarray(captured[id(value)], np.float32)
        if output is not None:
            return np.asarray(output, np.float32)
        frac = element_frac(value)  # the softmax reads a block argument: as the model holds it
        x = np.asarray(xs[list(block.args).index(value)], np.float32)
        return x if frac is None else dequantize(quantize(x, frac), frac)

    checked = [value_of(v, out if v is ret.operands[k] else None) for k, (v, out) in enumerate(zip(wanted, outputs))]
    return checked, value_of(last, outputs[0] if last is ret.operands[0] else None)


def _logits_of(value):
    """The input of the softmax producing `value` through reshapes, else `value`: an nn.softmax, or
    an ONNX Softmax the host runs (over another axis), as `softmax_input` finds either."""
    v = value
    for _ in range(6):
        owner = v.owner
        if isinstance(owner, nn.SoftmaxOp):
            return owner.input
        if isinstance(owner, nn.HostOp) and owner.op_type.data == "Softmax":
            return owner.operands[0]
        if isinstance(owner, nn.HostOp) and owner.op_type.data == "DequantizeLinear" and owner.operands \
                and isinstance(q := owner.operands[0].owner, nn.HostOp) and q.op_type.data == "QuantizeLinear":
            v = q.operands[0]  # a quantized model's 8-bit rounding of its output, as `softmax_input` skips it
            continue
        if not isinstance(owner, nn.ReshapeOp | nn.FlattenOp | nn.IdentityOp):
            return value
        v = owner.input
    return value


def is_classifier(reference: np.ndarray) -> bool:
    """Top-1 means something: an output (or a Softmax's logits) shaped [N, classes], trailing
    1-dims aside, with at least two classes. A detector's boxes [1, 84, 8400], a face detector's
    scores [1, 4420, 2] or a super-resolution image is not a classifier's."""
    shape = list(np.shape(reference))
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
    return len(shape) == 2 and shape[1] >= 2


def check_outputs(reference: Sequence[np.ndarray], got: Sequence[np.ndarray],
                  names: Sequence[str]) -> list[dict[str, Any]]:
    """Per output: its name, SNR and max |error| against the reference, top-1 agreement (None
    where the output is not a classifier's) and whether it collapsed to a constant."""
    rows = []
    for name, ref, tst in zip(names, reference, got):
        ref = np.asarray(ref, np.float32).reshape(np.shape(tst)) if np.size(ref) == np.size(tst) else ref
        if np.shape(ref) != np.shape(tst):
            raise SnowError(f"output '{name}' has shape {list(np.shape(tst))}, the reference's is {list(np.shape(ref))}")
        cmp = compare(ref, tst) if np.size(ref) else {"max_abs_err": 0.0, "snr_db": float("inf"), "top1_match": True}
        rows.append({"name": name, "snr_db": float(cmp["snr_db"]), "max_abs_err": float(cmp["max_abs_err"]),
                     "top1_match": bool(cmp["top1_match"]) if is_classifier(ref) else None,
                     "constant_output": constant_output(tst, ref)})
    return rows


def check_summary(reference: str, rows: list[dict[str, Any]], exact: bool) -> dict[str, Any]:
    """The report's `check`: the worst output's SNR, the largest error, top-1 over the classifier
    outputs (None when there is none), and every output's row."""
    worst = min(rows, key=lambda r: r["snr_db"])
    tops = [r["top1_match"] for r in rows if r["top1_match"] is not None]
    return {"reference": reference, "max_abs_err": max(r["max_abs_err"] for r in rows), "snr_db": worst["snr_db"],
            "golden_bit_exact": bool(exact), "top1_match": all(tops) if tops else None,
            "constant_output": any(r["constant_output"] for r in rows), "worst_output": worst["name"],
            "outputs": rows}
