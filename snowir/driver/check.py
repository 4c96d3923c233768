"""
Comparing snowir's results with onnxruntime fp32: logits (pre-softmax) of an ONNX model and
of an nn module, max abs error and SNR.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from xdsl.dialects.builtin import ModuleOp

from snowir.dialects import nn
from snowir.fixedpoint import dequantize
from snowir.frontend.onnx_import import prepare
from snowir.golden import Golden, element_frac, quantize


def softmax_input(graph: onnx.GraphProto) -> str | None:
    """The tensor feeding the Softmax that produces the (first) graph output, if any."""
    producers = {o: n for n in graph.node for o in n.output}
    name = graph.output[0].name
    for _ in range(4):  # Softmax, possibly followed by Reshape/Flatten/Identity
        node = producers.get(name)
        if node is None:
            return None
        if node.op_type == "Softmax":
            return node.input[0]
        if node.op_type not in ("Reshape", "Flatten", "Identity", "Squeeze"):
            return None
        name = node.input[0]
    return None


ORT_MAX_IR_VERSION = 10
"""The newest ONNX IR version the pinned onnxruntime loads; models are given it for --check."""


def ort_logits(model: onnx.ModelProto | str, x: np.ndarray) -> np.ndarray:
    """onnxruntime fp32 logits of the model as snowir imports it (opset upgraded, as the
    importer does, so old operators ORT no longer implements still run)."""
    import onnxruntime as ort


    source = model if isinstance(model, str) else "<model>"
    probe = prepare(onnx.load(model) if isinstance(model, str) else model, source)  # a new model: edited below
    probe.ir_version = min(probe.ir_version, ORT_MAX_IR_VERSION)
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
