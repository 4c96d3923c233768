"""
ConvTranspose on the device vs on the host (issue 36 item 1), on a waifu2x-UpConv7-like model
built with onnx.helper: six 3x3 valid convs 3->16->32->64->128->128->256 (ReLU standing in for
LeakyReLU 0.1), then ConvTranspose(256->3, 4x4, stride 2, pad 3). "before" imports the
ConvTranspose as an `nn.host` node (as snowir did: its ONNX handler taken away), "after" as
`nn.conv_transpose2d`, which conv-transpose-to-conv rewrites into one stride-1 device conv over
the 4 output phases and its interleave, which the host applies as it reads the result back
(`host-read`: the result is the model's output). Machine model, fast engine, seeded weights; both runs
are checked bit-exact with the golden model and against onnxruntime.

    python bench/conv_transpose.py [--size 76] [--model upconv7|cunet] [--out DIR | --update-results]
        # table + conv_transpose[_cunet].json in build/bench/
"""

from __future__ import annotations

import argparse
import json
from unittest import mock

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from snowir.driver.model_api import compile as compile_model
from snowir.frontend import onnx_handlers

from _output import add_output_options, forget_blobs, output_file

CHANNELS = [3, 16, 32, 64, 128, 128, 256]


def upconv7(size: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (c, k) in enumerate(zip(CHANNELS, CHANNELS[1:])):
        w = (rng.standard_normal((k, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(k, np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    wt = (rng.standard_normal((256, 3, 4, 4)) * np.sqrt(1.0 / (256 * 4))).astype(np.float32)
    inits += [numpy_helper.from_array(wt, "wt"), numpy_helper.from_array(np.zeros(3, np.float32), "bt")]
    nodes.append(helper.make_node("ConvTranspose", [x, "wt", "bt"], ["y"], name="upconv", kernel_shape=[4, 4],
                                  strides=[2, 2], pads=[3, 3, 3, 3]))
    inner = size - 2 * (len(CHANNELS) - 1)
    out = 2 * (inner - 1) + 4 - 6
    g = helper.make_graph(nodes, "upconv7", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, out, out])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def cunet_up(size: int, channels: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A waifu2x-CUNet-like upsampling step: conv 3x3, ConvTranspose(C->C, 2x2, stride 2) (its
    phases are 1x1 convs: no zero tap), conv 3x3, all valid, ReLU standing in for LeakyReLU."""
    rng = np.random.default_rng(seed)
    c = channels

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(1.0 / np.prod(shape[1:]))).astype(np.float32)

    inits = [numpy_helper.from_array(w(c, 3, 3, 3), "w0"), numpy_helper.from_array(w(c, c, 2, 2), "wt"),
             numpy_helper.from_array(w(3, c, 3, 3), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"), helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("ConvTranspose", ["r0", "wt"], ["u"], name="upconv", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["u"], ["r1"]), helper.make_node("Conv", ["r1", "w1"], ["y"], name="conv1")]
    out = 2 * (size - 2) - 2
    g = helper.make_graph(nodes, "cunet_up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, out, out])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def measure(m: onnx.ModelProto, x: np.ndarray, on_host: bool) -> dict:
    handlers = {k: v for k, v in onnx_handlers.HANDLERS.items() if not (on_host and k == "ConvTranspose")}
    with mock.patch.dict(onnx_handlers.HANDLERS, handlers, clear=True):
        compiled = compile_model(m)
    result = compiled.run(x, check=True)
    layers = [layer for layer in result.report.to_json()["layers"] if layer["name"].startswith("upconv")]
    check = result.report.check
    total = result.report.total
    return {"layers": [{k: layer[k] for k in ("name", "op", "where", "ms", "host_ms", "macs", "mac_utilization")}
                       for layer in layers],
            "upconv_device_ms": sum(layer["ms"] for layer in layers if layer["where"] == "device"),
            "upconv_host_ms": sum(layer["host_ms"] or 0.0 for layer in layers if layer["where"] == "host"),
            "total_device_ms": total.ms, "total_host_ms": total.host_ms,
            "golden_bit_exact": check.golden_bit_exact, "snr_db": check.snr_db}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--size", type=int, default=76, help="input height and width (default 76: a 64x64 ConvTranspose input)")
    parser.add_argument("--model", choices=("upconv7", "cunet"), default="upconv7",
                        help="upconv7 (default), or cunet: a CUNet-like 64->64 2x2/2 ConvTranspose between two convs")
    add_output_options(parser, "conv_transpose.json")
    args = parser.parse_args()
    m = upconv7(args.size) if args.model == "upconv7" else cunet_up(args.size)
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, args.size, args.size)).astype(np.float32)
    rows = {}
    for name, on_host in (("before", True), ("after", False)):
        rows[name] = measure(m, x, on_host)
        forget_blobs()
    print(f"{args.model}-like, {args.size}x{args.size} input: the ConvTranspose layer(s)")
    print(f"{'run':8} {'layer':18} {'op':22} {'where':9} {'device ms':>10} {'host ms':>9} {'MACs':>12} {'util%':>6}")
    for name, r in rows.items():
        for layer in r["layers"]:
            print(f"{name:8} {layer['name']:18} {layer['op']:22} {layer['where']:9} {layer['ms']:10.3f} "
                  f"{layer['host_ms'] or 0.0:9.3f} {layer['macs']:12,} {100 * layer['mac_utilization']:6.1f}")
    print()
    for name, r in rows.items():
        print(f"{name:8} ConvTranspose: device {r['upconv_device_ms']:.3f} ms + host {r['upconv_host_ms']:.3f} ms; "
              f"model: device {r['total_device_ms']:.3f} ms, host {r['total_host_ms']:.3f} ms; "
              f"golden bit-exact {r['golden_bit_exact']}, SNR vs onnxruntime {r['snr_db']:.1f} dB")
    path = output_file(args, "conv_transpose.json" if args.model == "upconv7" else f"conv_transpose_{args.model}.json")
    path.write_text(json.dumps({"model": args.model, "size": args.size, **rows}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
