"""
Give the onnx wheel's nine "light" models (onnx/backend/test/data/light/) real weights.

Their weights are all `ConstantOfShape(0.02)`, which makes every logit equal. This tool
replaces each ConstantOfShape by a seeded initializer:
  * conv / Gemm weights: He-normal, std = sqrt(2 / fan_in);
  * conv / Gemm biases: N(0, 0.05);
  * BN / Scale scales 1 + N(0, 0.1), shifts N(0.5, 0.05): about 70% of the ReLUs after a BN are
    active, as in trained nets. With zero-mean shifts a random BN network is chaotic (a 1e-3
    input perturbation of ResNet-50 grows ~1 dB per conv layer in float, to 15 dB SNR at the
    logits), which no trained network is, and no 16-bit format survives it;
  * the scale of a BN whose output is added to a residual stream is x0.2 (the residual branch
    starts small, as in trained ResNets and "zero-init residual" training);
  * the classifier (the layer feeding the final Softmax) is rescaled so the logits' RMS is 3;
  * batch-norm mean / variance: the actual per-channel statistics of the BN's input on a
    seeded calibration batch, layer after layer (onnxruntime, repeated until every BN has
    seen statistics computed with the earlier BNs already set), so activations stay near
    unit scale, inside Q8.8's +-128, even in residual nets.
Outputs go to build/models/ (not committed: 5 to 550 MB each).

The BN statistics are most of a build's time (ResNet-50: 48 onnxruntime runs of the whole net
at 224², about 40 CPU-seconds; DenseNet-121: 121 BNs), and they are a pure function of the
weighted graph, the calibration code and the onnxruntime version. snowir/data/light_bn_stats.npz
ships them for build()'s models, keyed by a hash of those three: a build whose key matches
uses them (the same float32 values calibration gives, without it), any other calibrates as
before. `python tools/light_models.py --ship-bn-stats` rewrites the file after a change.

    python tools/light_models.py [--out build/models] [--ship-bn-stats] [names...]
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
NAMES = ("bvlc_alexnet", "zfnet512", "vgg19", "squeezenet", "inception_v1", "inception_v2",
         "densenet121", "resnet50", "shufflenet")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "build" / "models"
SHIPPED_BN_STATS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "light_bn_stats.npz"
"""build()'s BN statistics per model, with the key they were computed under (module docstring)."""


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
    # every float parameter is a placeholder in the light models: the ConstantOfShape
    # outputs and the float initializers alike (DenseNet's Scale weights are ~0.02)
    targets: list[tuple[str, list[int]]] = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape":
            targets.append((node.output[0], [int(v) for v in inits[node.input[0]]]))
        else:
            new_nodes.append(node)
    targets += [(name, list(arr.shape)) for name, arr in inits.items() if arr.dtype == np.float32]
    for out, shape in targets:
        role, user = _role(out, cons)
        if role == "weight":
            value = _weight(rng, shape, user)
        elif role == "bias":
            value = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        elif role in ("bn_shift", "shift"):
            value = (0.5 + rng.standard_normal(shape) * 0.05).astype(np.float32)
        elif role in ("bn_scale", "scale"):
            value = (1.0 + rng.standard_normal(shape) * 0.1).astype(np.float32)
            if role == "bn_scale" and any(c.op_type in ("Sum", "Add") for c, _ in cons.get(user.output[0], [])):
                value *= 0.2
        elif role == "bn_mean":
            value = np.zeros(shape, np.float32)
        elif role == "bn_var":
            value = np.ones(shape, np.float32)
        else:
            continue
        new_inits[out] = value
    used = {i for n in new_nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used and t.name not in new_inits]
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + [numpy_helper.from_array(v, k) for k, v in new_inits.items()])
    inputs = [i for i in graph.input if (i.name in used or i.name not in inits) and i.name not in new_inits]
    # IR version 3 wants every initializer listed as a graph input too
    inputs += [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, list(v.shape)) for k, v in new_inits.items()]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


def calibrate_batch_norm(model: onnx.ModelProto, seed: int = 1, batch: int = 2, max_rounds: int | None = None,
                         x: np.ndarray | None = None) -> onnx.ModelProto:
    """Set every BN's mean/var to the statistics of its input, front to back (on `x`, default a
    seeded N(0, 1) batch)."""
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
    if x is None:
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    # one session for every round, the statistics fed as inputs (most of a minute for ResNet-50
    # was building a session per round from the re-serialised model)
    stat_names = set(bn.input[k] for bn in bns for k in (3, 4))
    kept = [t for t in probe.graph.initializer if t.name not in stat_names]
    del probe.graph.initializer[:]
    probe.graph.initializer.extend(kept)
    listed = {i.name for i in probe.graph.input}
    probe.graph.input.extend(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                             for name in sorted(stat_names - listed))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    rounds = max_rounds or len(bns)
    for _ in range(rounds):
        feeds = {name: numpy_helper.to_array(graph.initializer[init_index[name]]) for name in stat_names}
        outs = dict(zip(names, sess.run(None, {inp.name: x, **feeds})))
        changed = 0.0
        for bn in bns:
            # before the earlier BNs are calibrated, late activations can overflow float32: those
            # statistics are provisional and replaced in a later round (hence inf/nan are allowed)
            act = outs[bn.input[0]].astype(np.float64)
            axes = (0,) + tuple(range(2, act.ndim))
            with np.errstate(over="ignore", invalid="ignore"):
                mean, var = act.mean(axis=axes), act.var(axis=axes) + 1e-3
            for k, value in ((3, mean), (4, var)):
                idx = init_index[bn.input[k]]
                old = numpy_helper.to_array(graph.initializer[idx])
                delta = float(np.abs(old - value).max() / (np.abs(value).max() + 1e-9))
                changed = float("inf") if not np.isfinite(delta) else max(changed, delta)
                with np.errstate(over="ignore", invalid="ignore"):
                    stat = value.astype(np.float32)
                graph.initializer[idx].CopyFrom(numpy_helper.from_array(stat, bn.input[k]))
        if not np.isfinite(changed):
            changed = float("inf")
        if changed < 1e-3:
            break
    return model


def scale_classifier(model: onnx.ModelProto, target_rms: float = 3.0, seed: int = 1,
                     x: np.ndarray | None = None) -> onnx.ModelProto:
    """Rescale the weights and bias of the layer that feeds the final Softmax to logits of RMS `target_rms`."""
    import onnxruntime as ort

    from snowir.driver.check import softmax_input

    graph = model.graph
    logits = softmax_input(graph)
    if logits is None:
        return model
    producers = {o: n for n in graph.node for o in n.output}
    node = producers.get(logits)
    while node is not None and node.op_type in ("Reshape", "Flatten", "Relu", "GlobalAveragePool", "Identity"):
        node = producers.get(node.input[0])
    if node is None or node.op_type not in ("Gemm", "Conv", "MatMul"):
        return model
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.insert(0, helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    init_names = {t.name for t in graph.initializer}
    inp = [i for i in graph.input if i.name not in init_names][0]
    shape = [d.dim_value if d.dim_value > 0 else 1 for d in inp.type.tensor_type.shape.dim]
    if x is None:
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run([logits], {inp.name: x})[0]
    factor = target_rms / max(float(np.sqrt(np.mean(out.astype(np.float64) ** 2))), 1e-9)
    params = set()
    for name in node.input[1:3]:
        while name in producers and producers[name].op_type in ("Reshape", "Identity", "Unsqueeze", "Transpose"):
            name = producers[name].input[0]
        params.add(name)
    for i, t in enumerate(graph.initializer):
        if t.name in params:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(
                (numpy_helper.to_array(t) * factor).astype(np.float32), t.name))
    return model


def bn_stats_key(model: onnx.ModelProto) -> str:
    """What build()'s BN statistics of `model` (weighted, not yet calibrated) depend on: the
    model's bytes, calibrate_batch_norm's code (and its defaults) and the onnxruntime version."""
    import onnxruntime as ort

    digest = hashlib.sha256(model.SerializeToString(deterministic=True))
    digest.update(inspect.getsource(calibrate_batch_norm).encode())
    digest.update(ort.__version__.encode())
    return digest.hexdigest()


def _stat_names(model: onnx.ModelProto) -> list[str]:
    return [bn.input[k] for bn in model.graph.node if bn.op_type == "BatchNormalization" for k in (3, 4)]


def shipped_bn_stats(name: str, model: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    """The shipped statistics of `name` if they were computed for this very model, else None."""
    if not SHIPPED_BN_STATS.exists():
        return None
    with np.load(SHIPPED_BN_STATS) as shipped:
        if f"{name}:key" not in shipped.files or str(shipped[f"{name}:key"]) != bn_stats_key(model):
            return None
        return {stat: shipped[f"{name}:{stat}"] for stat in _stat_names(model)}


def set_initializers(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    for i, t in enumerate(model.graph.initializer):
        if t.name in values:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(values[t.name], t.name))
    return model


def ship_bn_stats(names: list[str]) -> Path:
    """Calibrate `names`' BNs (those with any) and write them, keyed, to SHIPPED_BN_STATS."""
    arrays: dict[str, np.ndarray] = {}
    for name in names:
        model = give_weights(onnx.load(str(light_path(name))))
        if not _stat_names(model):
            continue
        key = bn_stats_key(model)
        calibrated = {t.name: numpy_helper.to_array(t) for t in calibrate_batch_norm(model).graph.initializer}
        arrays[f"{name}:key"] = np.array(key)
        arrays.update({f"{name}:{stat}": calibrated[stat] for stat in _stat_names(model)})
    np.savez_compressed(SHIPPED_BN_STATS, **arrays)
    return SHIPPED_BN_STATS


def build(name: str, out_dir: Path = DEFAULT_OUT, seed: int = 0, say=None) -> Path:
    """The model with weights, built once (`say`: called with each step as it starts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.onnx"
    if target.exists():
        return target
    say = say or (lambda _step: None)
    say("loading the graph")
    model = onnx.load(str(light_path(name)))
    say("drawing weights")
    model = give_weights(model, seed)
    shipped = shipped_bn_stats(name, model)
    if shipped is not None:
        say("batch norms: the shipped statistics")
        model = set_initializers(model, shipped)
    else:
        say("calibrating batch norms on onnxruntime (the long step)")
        model = calibrate_batch_norm(model)
    say("scaling the classifier")
    model = scale_classifier(model)
    onnx.checker.check_model(model)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    onnx.save(model, str(tmp))
    os.replace(tmp, target)
    return target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("names", nargs="*", default=list(NAMES))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--ship-bn-stats", action="store_true",
                   help=f"calibrate the BN models and write their statistics to {SHIPPED_BN_STATS.name}, then stop")
    args = p.parse_args()
    for name in args.names:
        if name not in NAMES:
            sys.exit(f"light_models: unknown model '{name}' (one of {', '.join(NAMES)})")
    if args.ship_bn_stats:
        print(ship_bn_stats(args.names))
        return
    for name in args.names:
        start = time.perf_counter()
        say = lambda step, name=name: print(f"  {name}: {step} ({time.perf_counter() - start:.0f} s)",  # noqa: E731
                                            file=sys.stderr, flush=True)
        print(f"{name}: {build(name, args.out, say=say)}", flush=True)


if __name__ == "__main__":
    main()
