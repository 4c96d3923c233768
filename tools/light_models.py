"""
Give the onnx wheel's nine "light" models (onnx/backend/test/data/light/) real weights.

Their weights are all `ConstantOfShape(0.02)`, which makes every logit equal. This tool
replaces each ConstantOfShape by a seeded initializer:
  * conv / Gemm weights: He-normal, std = sqrt(2 / fan_in);
  * conv / Gemm biases and BN/Scale shifts: N(0, 0.05); BN/Scale scales: 1 + N(0, 0.1);
  * batch-norm mean / variance: the actual per-channel statistics of the BN's input on a
    seeded calibration batch, layer after layer (onnxruntime, repeated until every BN has
    seen statistics computed with the earlier BNs already set), so activations stay near
    unit scale, inside Q8.8's +-128, even in residual nets.
Outputs go to build/models/ (not committed: 5 to 550 MB each).

    python tools/light_models.py [--out build/models] [names...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
NAMES = ("bvlc_alexnet", "zfnet512", "vgg19", "squeezenet", "inception_v1", "inception_v2",
         "densenet121", "resnet50", "shufflenet")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "build" / "models"


def light_path(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def _role(name: str, cons: dict, depth: int = 0) -> tuple[str, onnx.NodeProto | None]:
    """What a constant feeds: weight / bias / bn_scale / bn_shift / bn_stat / scale / shift."""
    for node, idx in cons.get(name, []):
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            return ("weight" if idx == 1 else "bias"), node
        if node.op_type == "BatchNormalization":
            return {1: "bn_scale", 2: "bn_shift", 3: "bn_mean", 4: "bn_var"}[idx], node
        if node.op_type == "Mul":
            return "scale", node
        if node.op_type in ("Add", "Sum"):
            return "shift", node
        if node.op_type in ("Unsqueeze", "Reshape", "Identity", "Cast") and depth < 4:
            return _role(node.output[0], cons, depth + 1)
    return "other", None


def _weight(rng: np.random.Generator, shape: list[int], node: onnx.NodeProto) -> np.ndarray:
    if node.op_type == "Conv":
        fan_in = int(np.prod(shape[1:]))
    elif node.op_type == "Gemm":
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
    else:
        fan_in = shape[0]
    return (rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)


def give_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    cons = _consumers(graph)
    new_nodes, new_inits = [], {}
    for node in graph.node:
        if node.op_type != "ConstantOfShape":
            new_nodes.append(node)
            continue
        shape = [int(v) for v in inits[node.input[0]]]
        out = node.output[0]
        role, user = _role(out, cons)
        if role == "weight":
            value = _weight(rng, shape, user)
        elif role in ("bias", "bn_shift", "shift"):
            value = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        elif role in ("bn_scale", "scale"):
            value = (1.0 + rng.standard_normal(shape) * 0.1).astype(np.float32)
        elif role == "bn_mean":
            value = np.zeros(shape, np.float32)
        elif role == "bn_var":
            value = np.ones(shape, np.float32)
        else:
            value = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        new_inits[out] = value
    used = {i for n in new_nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + [numpy_helper.from_array(v, k) for k, v in new_inits.items()])
    inputs = [i for i in graph.input if i.name in used or i.name not in inits]
    # IR version 3 wants every initializer listed as a graph input too
    inputs += [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, list(v.shape)) for k, v in new_inits.items()]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


def calibrate_batch_norm(model: onnx.ModelProto, seed: int = 1, batch: int = 2, max_rounds: int | None = None) -> onnx.ModelProto:
    """Set every BN's mean/var to the statistics of its input, front to back."""
    import onnxruntime as ort

    graph = model.graph
    bns = [n for n in graph.node if n.op_type == "BatchNormalization"]
    if not bns:
        return model
    init_index = {t.name: i for i, t in enumerate(graph.initializer)}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for bn in bns:
        if bn.input[0] not in known:
            probe.graph.output.append(helper.make_tensor_value_info(bn.input[0], onnx.TensorProto.FLOAT, None))
    inp = [i for i in graph.input if i.name not in init_index][0]
    shape = [d.dim_value if d.dim_value > 0 else batch for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    rounds = max_rounds or len(bns)
    for _ in range(rounds):
        for i, name in ((init_index[bn.input[3]], bn.input[3]) for bn in bns):
            probe.graph.initializer[i].CopyFrom(graph.initializer[i])
        for bn in bns:
            for k in (3, 4):
                idx = init_index[bn.input[k]]
                probe.graph.initializer[idx].CopyFrom(graph.initializer[idx])
        sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = dict(zip(names, sess.run(None, {inp.name: x})))
        changed = 0.0
        for bn in bns:
            act = outs[bn.input[0]].astype(np.float64)
            axes = (0,) + tuple(range(2, act.ndim))
            mean, var = act.mean(axis=axes), act.var(axis=axes) + 1e-3
            for k, value in ((3, mean), (4, var)):
                idx = init_index[bn.input[k]]
                old = numpy_helper.to_array(graph.initializer[idx])
                changed = max(changed, float(np.abs(old - value).max() / (np.abs(value).max() + 1e-9)))
                graph.initializer[idx].CopyFrom(numpy_helper.from_array(value.astype(np.float32), bn.input[k]))
        if changed < 1e-3:
            break
    return model


def build(name: str, out_dir: Path = DEFAULT_OUT, seed: int = 0) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.onnx"
    if target.exists():
        return target
    model = onnx.load(str(light_path(name)))
    model = give_weights(model, seed)
    model = calibrate_batch_norm(model)
    onnx.checker.check_model(model)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    onnx.save(model, str(tmp))
    os.replace(tmp, target)
    return target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("names", nargs="*", default=list(NAMES))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    for name in args.names:
        if name not in NAMES:
            sys.exit(f"light_models: unknown model '{name}' (one of {', '.join(NAMES)})")
        print(f"{name}: {build(name, args.out)}", flush=True)


if __name__ == "__main__":
    main()
