"""
Train the small CNN that ships with snowir (snowir/data/digits_cnn.onnx) on scikit-learn's
bundled 8x8 handwritten digits, in plain numpy, and export it to ONNX (opset 13).

    conv 3x3 1->16 pad 1, ReLU, maxpool 2 -> conv 3x3 16->32 pad 1, ReLU, maxpool 2
    -> flatten (32x2x2) -> dense 128->10 (logits; softmax only in the loss)

Deterministic (seeded), ~10 s on one core. `python tools/train_digits.py [--out PATH]`
prints train/test accuracy; docs/accuracy.md records fp32 vs Q8.8 vs Q5.11 on the test split.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "snowir" / "data" / "digits_cnn.onnx"
SPLIT_SEED = 0


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Images scaled to [0, 1] as N x 1 x 8 x 8 float32; a fixed 80/20 split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        from snowir.errors import SnowError

        raise SnowError("the digits dataset comes from scikit-learn: pip install -e '.[bench]'") from None

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = order[:cut], order[cut:]
    return x[tr], y[tr], x[te], y[te]


# ---------------------------------------------------------------- numpy layers
def im2col(x: np.ndarray, k: int, pad: int) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # n c h w k k
    return cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * w, c * k * k)


def conv_forward(x, w, b):
    n, c, h, wd = x.shape
    o = w.shape[0]
    cols = im2col(x, 3, 1)
    out = cols @ w.reshape(o, -1).T + b
    return out.reshape(n, h, wd, o).transpose(0, 3, 1, 2), cols


def conv_backward(dout, cols, x_shape, w):
    n, c, h, wd = x_shape
    o = w.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, o)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dcols = (d @ w.reshape(o, -1)).reshape(n, h, wd, c, 3, 3)
    dx = np.zeros((n, c, h + 2, wd + 2), np.float32)
    for ky in range(3):
        for kx in range(3):
            dx[:, :, ky:ky + h, kx:kx + wd] += dcols[:, :, :, :, ky, kx].transpose(0, 3, 1, 2)
    return dx[:, :, 1:-1, 1:-1], dw, db


def pool_forward(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def pool_backward(dout, mask):
    d = mask * dout[:, :, :, None, :, None]
    d = d / np.maximum(mask.sum(axis=(3, 5), keepdims=True), 1)
    n, c, h2, _, w2, _ = d.shape
    return d.reshape(n, c, h2 * 2, w2 * 2)


class Net:
    def __init__(self, rng: np.random.Generator):
        he = lambda shape, fan: (rng.standard_normal(shape) * np.sqrt(2.0 / fan)).astype(np.float32)
        self.p = {"w1": he((16, 1, 3, 3), 9), "b1": np.zeros(16, np.float32),
                  "w2": he((32, 16, 3, 3), 144), "b2": np.zeros(32, np.float32),
                  "w3": he((10, 128), 128) * 0.5, "b3": np.zeros(10, np.float32)}

    def forward(self, x):
        p = self.p
        a1, c1 = conv_forward(x, p["w1"], p["b1"])
        r1 = np.maximum(a1, 0)
        p1, m1 = pool_forward(r1)
        a2, c2 = conv_forward(p1, p["w2"], p["b2"])
        r2 = np.maximum(a2, 0)
        p2, m2 = pool_forward(r2)
        f = p2.reshape(len(x), -1)
        logits = f @ p["w3"].T + p["b3"]
        self.cache = (x, a1, c1, p1, m1, a2, c2, p2, m2, f)
        return logits

    def backward(self, dlogits):
        p = self.p
        x, a1, c1, p1, m1, a2, c2, p2, m2, f = self.cache
        g = {"w3": dlogits.T @ f, "b3": dlogits.sum(0)}
        dp2 = (dlogits @ p["w3"]).reshape(p2.shape)
        da2 = pool_backward(dp2, m2) * (a2 > 0)
        dp1, g["w2"], g["b2"] = conv_backward(da2, c2, p1.shape, p["w2"])
        da1 = pool_backward(dp1, m1) * (a1 > 0)
        _, g["w1"], g["b1"] = conv_backward(da1, c1, x.shape, p["w1"])
        return g


def train(epochs: int = 40, seed: int = 0) -> tuple[Net, float, float]:
    xtr, ytr, xte, yte = load_split()
    rng = np.random.default_rng(seed)
    net = Net(rng)
    m = {k: np.zeros_like(v) for k, v in net.p.items()}
    v = {k: np.zeros_like(v) for k, v in net.p.items()}
    lr, b1, b2, step = 2e-3, 0.9, 0.999, 0
    for _ in range(epochs):
        order = rng.permutation(len(ytr))
        for i in range(0, len(order), 32):
            idx = order[i:i + 32]
            logits = net.forward(xtr[idx])
            e = np.exp(logits - logits.max(1, keepdims=True))
            prob = e / e.sum(1, keepdims=True)
            prob[np.arange(len(idx)), ytr[idx]] -= 1
            grads = net.backward(prob / len(idx))
            step += 1
            for k in net.p:
                m[k] = b1 * m[k] + (1 - b1) * grads[k]
                v[k] = b2 * v[k] + (1 - b2) * grads[k] ** 2
                mh, vh = m[k] / (1 - b1 ** step), v[k] / (1 - b2 ** step)
                net.p[k] -= (lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    acc = lambda x, y: float((net.forward(x).argmax(1) == y).mean())
    return net, acc(xtr, ytr), acc(xte, yte)


def export(net: Net, path: Path) -> None:
    p = net.p
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in p.items()]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="snowir train_digits")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--epochs", type=int, default=40)
    args = ap.parse_args()
    net, tr, te = train(args.epochs)
    export(net, args.out)
    print(f"train accuracy {tr:.4f}, test accuracy {te:.4f}; wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
