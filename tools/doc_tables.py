"""
The tables and values the docs quote, each rendered from the tracked bench results
(bench/results/*.json): `TABLES` and `VALUES` by the name a doc's marker gives
(tools/gen_doc_tables.py finds the markers and rewrites the regions).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

# Paper figures (C17, the Snowball paper) shown beside our measurements: citations, not measurements.
S17_HAND_MS = {"alexnet_owt": 9.95, "resnet50": 56.25}  # C17 Table 2, hand-written code for Snowflake
NAMES = {"alexnet_owt": "AlexNet-OWT", "resnet18": "ResNet-18", "resnet50": "ResNet-50"}


class Results:
    """bench/results/*.json, loaded on first use; remembers which files a region read."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[str, object] = {}
        self.read: list[str] = []

    def __call__(self, name: str):
        if name not in self.read:
            self.read.append(name)
        if name not in self._cache:
            path = self.directory / name
            if not path.is_file():
                raise DocTableError(f"{path} is missing")
            self._cache[name] = json.loads(path.read_text())
        return self._cache[name]


class DocTableError(Exception):
    pass


Render = Callable[..., str]
TABLES: dict[str, Render] = {}
VALUES: dict[str, Render] = {}


def table(name: str) -> Callable[[Render], Render]:
    def register(fn: Render) -> Render:
        TABLES[name] = fn
        return fn
    return register


def value(name: str) -> Callable[[Render], Render]:
    def register(fn: Render) -> Render:
        VALUES[name] = fn
        return fn
    return register


# ---------------------------------------------------------------------------------------------
# formatting


def md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def caption(json_names: str, command: str) -> str:
    return f"Generated from {json_names} (`{command}`) by `tools/gen_doc_tables.py`; do not edit by hand."


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def signed_pct(x: float) -> str:
    """A percentage difference with a real minus sign: +0.0%, −1.3%."""
    s = f"{x:+.1f}%"
    return s.replace("-", "−") if not s.startswith("-0.0") else "+0.0%"


def kilo(cycles: float) -> str:
    return f"{cycles / 1000:.0f} k" if cycles >= 10_000 else f"{cycles / 1000:.1f} k"


def yes(flag: bool | None) -> str:
    return {True: "yes", False: "no", None: "–"}[flag]


def shape_label(layer: str) -> str:
    """table1.json's '27x27,5x5,64->192,s1,p2' as '27², 5×5, 64→192'."""
    m = re.fullmatch(r"(\d+)x(\d+),(\d+)x(\d+),(\d+)->(\d+),s(\d+),p(\d+)", layer)
    if not m:
        return layer
    h, w, kh, kw, c, k, s, _ = m.groups()
    size = f"{h}²" if h == w else f"{h}×{w}"
    return f"{size}, {kh}×{kw}{'/' + s if s != '1' else ''}, {c}→{k}"


def _shape(layer: str) -> tuple[int, int, int, int]:
    """(C, K, kh, kw) of a table1.json layer."""
    m = re.fullmatch(r"(\d+)x(\d+),(\d+)x(\d+),(\d+)->(\d+),s(\d+),p(\d+)", layer)
    if not m:
        raise DocTableError(f"table1.json: cannot read the layer shape {layer!r}")
    _, _, kh, kw, c, k, _, _ = (int(g) for g in m.groups())
    return c, k, kh, kw


# ---------------------------------------------------------------------------------------------
# C17 Table 1 (bench/table1.py)


def _table1_cycles(R: Results, row: dict) -> int:
    return round(row["ms"] * R("table1.json")["hw"]["clock_mhz"] * 1000)


@table("table1")
def table1(R: Results) -> str:
    rows = []
    for r in R("table1.json")["rows"]:
        c, _, kh, kw = _shape(r["layer"])
        part_words = kh * kw * math.ceil(c / r["parts"])
        rows.append([shape_label(r["layer"]), f"{r['ms']:.3f}", f"{r['paper_hand_ms']:.3f}", signed_pct(r["vs_hand_pct"]),
                     f"{r['paper_auto_ms']:.3f}", f"{r['bound_ms']:.3f}", f"{r['of_bound_pct']:.1f}%",
                     f"{r['paper_of_bound_pct']:.1f}%", str(r["parts"]), f"{part_words:,}", r["loop_order"],
                     yes(r["bit_exact"])])
    return md_table(["layer", "snowir ms", "paper hand ms", "vs hand", "paper auto ms", "padding-free bound ms",
                     "snowir % of bound", "paper % of bound", "channel parts", "kernel words (largest part)",
                     "loop order", "bit-exact"], rows) + "\n\n" + caption("bench/results/table1.json",
                                                                        "python bench/table1.py")


@table("table1-stalls")
def table1_stalls(R: Results) -> str:
    rows = []
    for r in R("table1.json")["rows"]:
        cycles = _table1_cycles(R, r)
        s = r["stalls"]
        rows.append([shape_label(r["layer"]), f"{cycles:,}"]
                    + [f"{s.get(k, 0):,} ({pct(s.get(k, 0) / cycles)})" for k in ("cu_load_wait", "cu_starved")]
                    + [f"{s.get(k, 0):,}" for k in ("raw", "dram_raw", "icache")])
        # the CU time the bound does not cover and no stall names: the cold start and queue flushes
    return md_table(["layer", "cycles", "CUs waiting for loads (`cu_load_wait`)", "CUs starved (`cu_starved`)",
                     "RAW stalls", "DRAM page waits (`dram_raw`)", "icache fill"], rows) + "\n\n" + caption(
        "bench/results/table1.json", "python bench/table1.py")


@value("table1-vs-hand")
def table1_vs_hand(R: Results) -> str:
    """The range of the four layers' differences from the paper's hand-written code."""
    d = [r["vs_hand_pct"] for r in R("table1.json")["rows"]]
    return f"{signed_pct(min(d))} to {signed_pct(max(d))}"


@value("table1-ms")
def table1_ms(R: Results, index: str) -> str:
    return f"{R('table1.json')['rows'][int(index) - 1]['ms']:.3f} ms"


@value("table1-parts")
def table1_parts(R: Results, index: str) -> str:
    return str(R("table1.json")["rows"][int(index) - 1]["parts"])


# ---------------------------------------------------------------------------------------------
# C17 Table 2 models (bench/models.py)


def _model(R: Results, name: str) -> dict:
    for m in R("models.json"):
        if m["model"] == name:
            return m
    raise DocTableError(f"models.json has no model {name!r}")


def _layer(R: Results, model: str, layer: str) -> dict:
    for row in _model(R, model)["layers"]:
        if row["name"] == layer:
            return row
    raise DocTableError(f"models.json: {model} has no layer {layer!r}")


def _conv_layers(m: dict) -> list[dict]:
    """The layers C17 Table 2 counts: device layers with cycles, fully connected ones (op dense) left out."""
    return [r for r in m["layers"] if r["cycles"] and r["op"] != "dense"]


@table("table2")
def table2(R: Results) -> str:
    rows = []
    for m in R("models.json"):
        name = NAMES.get(m["model"], m["model"])
        if "error" in m:
            rows.append([name, "not lowered: " + m["error"]] + [""] * 11)
            continue
        hand = S17_HAND_MS.get(m["model"])
        rows.append([name, f"{m['conv_ms']:.2f}", f"{m['paper_ms']:.2f}", f"{hand:.2f}" if hand else "–",
                     f"{m['bound_ms']:.2f}", pct(m["bound_ms"] / m["conv_ms"]), f"{m['conv_gbps']:.2f}",
                     f"{m['paper_gbps']:.2f}", pct(m["conv_mac_utilization"]), f"{m['all_layers_ms']:.2f}",
                     yes(m["check"]["golden_bit_exact"]), f"{m['check']['snr_db']:.1f}",
                     f"{m['compile_s']:.1f} / {m['simulate_s']:.1f}"])
    return md_table(["model", "snowir ms", "paper's compiler ms", "S17 hand ms", "padding-free bound ms",
                     "% of bound", "GB/s", "paper GB/s", "useful-MAC util", "all layers ms", "bit-exact",
                     "logit SNR dB", "compile / simulate s"], rows) + "\n\n" + caption(
        "bench/results/models.json", "python bench/models.py")


@table("table2-losses")
def table2_losses(R: Results) -> str:
    rows = []
    for m in R("models.json"):
        if "error" in m:
            continue
        layers = _conv_layers(m)
        cycles = sum(r["cycles"] for r in layers)

        def share(key: str) -> str:
            return pct(sum(r["stall_cycles"].get(key, 0) for r in layers) / cycles)
        pools = sum(r["cycles"] for r in layers if r["op"] == "max_pool")
        to_95 = max(0.0, m["conv_ms"] - m["bound_ms"] / 0.95)
        rows.append([NAMES.get(m["model"], m["model"]), f"{cycles:,}", share("cu_load_wait"), share("cu_starved"),
                     share("raw"), f"{pools:,}", f"{to_95:.2f}"])
    return md_table(["model", "conv + pool cycles", "CUs waiting for loads", "CUs starved", "RAW stalls",
                     "standalone max-pool cycles", "ms above 95% of the bound"], rows) + "\n\n" + caption(
        "bench/results/models.json", "python bench/models.py")


@table("table2-layers")
def table2_layers(R: Results, count: str = "4") -> str:
    """Per model, the `count` layer shapes whose cycles exceed their padding-free bound the most,
    summed over the layers of equal cycles and MACs (a network repeats its block shapes)."""
    rows = []
    for m in R("models.json"):
        if "error" in m:
            continue
        groups: dict[tuple, list[dict]] = {}
        for r in _conv_layers(m):
            groups.setdefault((r["op"], r["mode"], r["cycles"], r["macs"]), []).append(r)
        ranked = sorted(groups.values(), key=lambda g: len(g) * g[0]["cycles"] * (1 - g[0]["mac_utilization"]),
                        reverse=True)
        for g in ranked[:int(count)]:
            r = g[0]
            bound = r["cycles"] * r["mac_utilization"]
            stalls = {k: v for k, v in r["stall_cycles"].items() if k.startswith("cu_") or k == "raw"}
            worst = max(stalls, key=stalls.get) if any(stalls.values()) else None
            what = r["op"] + (f" + {r['computes']}" if r.get("computes") else "")
            conv = r["macs"] > 0
            rows.append([NAMES.get(m["model"], m["model"]), ", ".join(f"`{x['name']}`" for x in g), what,
                         r["mode"] or "–", f"{r['cycles']:,}", f"{bound:,.0f}" if conv else "–",
                         pct(r["mac_utilization"]) if conv else "–",
                         f"`{worst}` {stalls[worst]:,}" if worst else "–"])
    return md_table(["model", "layers (equal cycles)", "op", "mode", "cycles each", "padding-free bound",
                     "useful-MAC util", "largest CU stall"], rows) + "\n\n" + caption(
        "bench/results/models.json", "python bench/models.py")


@value("layer-cycles")
def layer_cycles(R: Results, model: str, *layers: str) -> str:
    """A layer's cycles (several layers of equal cycles: each must agree), in k."""
    cycles = {_layer(R, model, name)["cycles"] for name in layers}
    if len(cycles) != 1:
        raise DocTableError(f"models.json: {model} layers {', '.join(layers)} differ in cycles ({sorted(cycles)})")
    return kilo(cycles.pop())


@value("layer-bound")
def layer_bound(R: Results, model: str, layer: str) -> str:
    row = _layer(R, model, layer)
    return kilo(row["cycles"] * row["mac_utilization"])


@value("layer-util")
def layer_util(R: Results, model: str, layer: str) -> str:
    return pct(_layer(R, model, layer)["mac_utilization"])


# ---------------------------------------------------------------------------------------------
# the onnx wheel's nine light models (bench/light_machine.py, bench/light_snr.py)


@table("light-machine")
def light_machine(R: Results) -> str:
    rows = []
    for r in R("light_machine.json"):
        if "error" in r:
            rows.append([r["model"], "not lowered: " + r["error"]] + [""] * 8)
            continue
        rows.append([r["model"], f"{r['ms']:.2f}", f"{r['host_ms']:.2f}", f"{r['snr_db']:.1f}",
                     yes(r["golden_bit_exact"]), yes(r["top1_match"]), f"{r['device_convs']} / {r['host_convs']}",
                     str(r["max_pools"]), pct(r["mac_utilization"], 0), f"{r['gbps']:.2f}"])
    return md_table(["model", "device ms", "host ms (Cortex-A9 estimate)", "logit SNR dB", "bit-exact",
                     "top-1 as onnxruntime", "device / host convs", "device max pools", "useful-MAC util", "GB/s"],
                    rows) + "\n\n" + caption("bench/results/light_machine.json", "python bench/light_machine.py")


@table("depthwise")
def depthwise(R: Results) -> str:
    """bench/depthwise.py: each shape's form, cycles against its bound (the kernels as their vMACs
    hold them) and against the bound with the kernels' useful words alone ("kernels once", the
    bound before 2026-11-29), and the forms it beat. A depthwise.json written before the two
    bounds (no `bound_kernels_once_cycles`) holds the kernels-once bound alone: the other shows "–"."""
    rows = []
    for r in R("depthwise.json")["rows"]:
        other = lambda key: f"{r[key]:,}" if r.get(key) else "–"  # noqa: E731
        if "bound_kernels_once_cycles" in r:
            by = "MAC" if r["bound_cycles"] == r["bound_mac_cycles"] else "DRAM"
            held = [f"{r['bound_cycles']:,} ({by})", f"{r['bound_util_pct']:.2f}%", f"**{r['share_of_bound_pct']:.1f}%**"]
            once, once_share = r["bound_kernels_once_cycles"], r["share_of_bound_kernels_once_pct"]
            fixed = r["fixed_share_of_bound_pct"]
        else:
            held = ["–", "–", "–"]
            once, once_share, fixed = r["bound_cycles"], r["share_of_bound_pct"], None
        once_by = "MAC" if once == r["bound_mac_cycles"] else "DRAM"
        rows.append([r["shape"], r["form"] if r["where"] == "device" else "on the host", f"{r['cycles']:,}",
                     f"{r['util_pct']:.2f}%", *held, f"{once:,} ({once_by}), {once_share:.1f}%",
                     other("slices_cycles"), other("no_blocks_cycles"), other("no_slices_cycles"),
                     f"{r['fixed_cycles']:,}" + (f", {fixed:.1f}%" if fixed is not None else "")])
    return md_table(["shape (C, H×W, kernel/stride)", "form", "cycles", "useful-MAC util", "bound cycles (by)",
                     "bound util", "share of bound", "kernels once: bound (by), share", "slices on its blocks: cycles",
                     "no blocks: cycles", "no slices: cycles", "16-groups: cycles, share"], rows) \
        + "\n\n" + caption("bench/results/depthwise.json", "python bench/depthwise.py --update-results")


@table("real-nets")
def real_nets(R: Results) -> str:
    rows = [[r["model"], "x".join(map(str, r["input"])), f"{r['device_layers']} / {r['device_macs'] / 1e6:.1f} M",
             f"{r['host_layers']} / {r['host_macs'] / 1e6:.1f} M", f"{r['device_ms']:.2f}", f"{r['host_ms']:.2f}",
             f"{r['snr_db']:.1f}", f"{r['metric']} {r['score']:.3f}", yes(r["golden_eq_machine"])]
            for r in R("real_nets.json")["rows"]]
    return md_table(["model", "input", "device layers / MACs", "host layers / MACs", "device ms",
                     "host ms (estimate)", "output SNR dB", "task result vs onnxruntime", "machine = golden"],
                    rows) + "\n\n" + caption("bench/results/real_nets.json", "python bench/real_nets.py")


@table("real-nets-unit")
def real_nets_unit(R: Results) -> str:
    """The real nets run on the stock machine (real_nets.json) and with the write-back activation
    unit (real_nets_unit.json, the models run there)."""
    stock = {r["model"]: r for r in R("real_nets.json")["rows"]}
    rows = []
    for u in R("real_nets_unit.json")["rows"]:
        s = stock[u["model"]]
        rows.append([u["model"], f"{s['device_ms']:.2f} / {u['device_ms']:.2f}", f"{s['host_ms']:.2f} / {u['host_ms']:.2f}",
                     f"{s['end_to_end_ms']:.2f} / {u['end_to_end_ms']:.2f}",
                     f"**{u['end_to_end_ms'] / s['end_to_end_ms']:.2f}×**",
                     ", ".join(f"{k} {v}" for k, v in sorted(u.get("host_ops", {}).items())) or "–",
                     f"{s['metric']} {s['score']:.3f} / {u['score']:.3f}", yes(u["golden_eq_machine"])])
    return md_table(["model", "device ms (stock / unit)", "host ms", "end to end ms", "unit / stock",
                     "host ops left with the unit", "task result vs onnxruntime", "machine = golden (unit)"],
                    rows) + "\n\n" + caption("bench/results/real_nets.json and real_nets_unit.json",
                                               "python bench/real_nets.py; python bench/real_nets.py --only "
                                               "common_det,ch_PP-OCRv4_det_infer,ch_ppocr_mobile_v2.0_cls_infer,common_old "
                                               "--hw unit.json --out DIR")


@table("mobile-nets")
def mobile_nets(R: Results) -> str:
    """bench/mobile_nets.py: each net on the stock machine and with the write-back activation unit."""
    rows = [[r["model"], "unit" if r["unit"] else "stock", f"{r['device_ms']:.2f}", f"{r['host_ms']:.2f}",
             f"{r['end_to_end_ms']:.2f}", pct(r["mac_utilization"]), yes(r["golden_bit_exact"]), f"{r['snr_db']:.1f}",
             f"{r['snr_db_auto']:.1f}" + ("" if r["golden_bit_exact_auto"] else " (not bit-exact)")
             if "snr_db_auto" in r else "–",
             ", ".join(r["host_ops"]) or "–"] for r in R("mobile_nets.json")["rows"]]
    return md_table(["model", "machine", "device ms", "host ms (estimate)", "end to end ms", "device MAC util",
                     "golden = machine", "SNR dB vs onnxruntime", "SNR dB, --format auto",
                     "host layers (with host time)"], rows) \
        + "\n\n" + caption("bench/results/mobile_nets.json", "python bench/mobile_nets.py --fetch; "
                                                            "python bench/mobile_nets.py --update-results")


@table("light-snr")
def light_snr(R: Results) -> str:
    rows = [[r["model"], r["format"], f"{r['float_rel_err']:.1e}", f"{r['snr_db']:.1f}", f"{r['max_abs_err']:.3f}",
             yes(r["top1_match"]), f"{r['import_s']:.2f}", f"{r['golden_float_s']:.2f}", f"{r['golden_fixed_s']:.2f}"]
            for r in R("light_snr.json")]
    return md_table(["model", "format", "float golden rel. error", "logit SNR dB", "max abs error",
                     "top-1 same as fp32", "import s", "golden fp32 s", "golden fixed s"], rows) + "\n\n" + caption(
        "bench/results/light_snr.json", "python bench/light_snr.py")


# ---------------------------------------------------------------------------------------------
# the digits CNN and the fixed-point formats (bench/digits_accuracy.py, bench/qformat.py)


def _digits(R: Results, fmt: str) -> dict:
    for r in R("digits_accuracy.json")["rows"]:
        if r["format"] == fmt:
            return r
    raise DocTableError(f"digits_accuracy.json has no row {fmt!r}")


@table("digits-accuracy")
def digits_accuracy(R: Results) -> str:
    d = R("digits_accuracy.json")
    rows = [[r["format"], pct(r["accuracy"], 2), "–" if r.get("snr_db") is None else f"{r['snr_db']:.1f}",
             pct(r["top1_agree"]) if "top1_agree" in r else "–"] for r in d["rows"]]
    return md_table(["model / format", f"test accuracy ({d['test_images']} images)", "logit SNR vs fp32 (dB)",
                     "top-1 same as fp32"], rows) + "\n\n" + caption("bench/results/digits_accuracy.json",
                                                                     "python bench/digits_accuracy.py")


@value("digits-accuracy")
def digits_accuracy_value(R: Results, *fmt: str) -> str:
    return pct(_digits(R, " ".join(fmt))["accuracy"])


@value("digits-snr")
def digits_snr(R: Results, *fmt: str) -> str:
    return f"{_digits(R, ' '.join(fmt))['snr_db']:.1f} dB"


@value("digits-test-images")
def digits_test_images(R: Results) -> str:
    return str(R("digits_accuracy.json")["test_images"])


QFORMATS = ("Q8.8", "Q5.11", "auto")


@table("qformat")
def qformat(R: Results) -> str:
    rows = []
    for r in R("qformat.json"):
        snr = [f"{r[f]['snr_db']:.1f}" for f in QFORMATS]
        best = max(QFORMATS, key=lambda f: r[f]["snr_db"])
        snr[QFORMATS.index(best)] = f"**{snr[QFORMATS.index(best)]}**"
        agree = " / ".join(pct(r[f]["top1_agree"], 0) for f in QFORMATS)
        acc = (" / ".join(pct(r[f]["accuracy"], 2) for f in QFORMATS) + f" (fp32 {pct(r['fp32_accuracy'], 2)})"
               if "fp32_accuracy" in r else "")
        rows.append([r["model"], *snr, agree, acc])
    return md_table(["model", "Q8.8 dB", "Q5.11 dB", "auto dB", "top-1 agreement (Q8.8 / Q5.11 / auto)",
                     "test accuracy (digits)"], rows) + "\n\n" + caption("bench/results/qformat.json",
                                                                       "python bench/qformat.py")


@value("qformat-auto-gain")
def qformat_auto_gain(R: Results) -> str:
    """auto's SNR over the better of the two global formats: its smallest and largest margin."""
    gains = [r["auto"]["snr_db"] - max(r["Q8.8"]["snr_db"], r["Q5.11"]["snr_db"]) for r in R("qformat.json")]
    return f"{min(gains):.1f}–{max(gains):.1f} dB"


@value("qformat-auto-min")
def qformat_auto_min(R: Results) -> str:
    return f"{min(r['auto']['snr_db'] for r in R('qformat.json')):.1f} dB"


@value("qformat-below")
def qformat_below(R: Results, fmt: str, db: str) -> str:
    """The models whose SNR in format `fmt` is below `db` dB."""
    names = [r["model"] for r in R("qformat.json") if r[fmt]["snr_db"] < float(db)]
    return ", ".join(names) if names else "none"


@value("qformat-range")
def qformat_range(R: Results, fmt: str, db: str) -> str:
    """The lowest and highest SNR in format `fmt` among the models below `db` dB in it."""
    snr = [r[fmt]["snr_db"] for r in R("qformat.json") if r[fmt]["snr_db"] < float(db)]
    return f"{min(snr):.0f}–{max(snr):.0f} dB"


# ---------------------------------------------------------------------------------------------
# the scaling study (bench/dse_scaling.py)


def _dse(R: Results, model: str, cus: int, gbps: float) -> dict:
    for r in R("dse_scaling.json")[model]:
        if r["cus"] == cus and r["dram_gbps"] == gbps:
            return r
    raise DocTableError(f"dse_scaling.json: {model} has no row for {cus} CUs at {gbps} GB/s")


def _dse_base(R: Results, model: str) -> dict:
    return _dse(R, model, 4, 4.2)


@table("dse-scaling")
def dse_scaling(R: Results) -> str:
    rows = []
    for model, runs in R("dse_scaling.json").items():
        base = _dse_base(R, model)
        for r in sorted(runs, key=lambda r: (r["dram_gbps"], r["cus"])):
            wait = r["stall_cu_load_wait"] / r["cycles"] if r["cycles"] else 0.0
            rows.append([NAMES.get(model, model), str(r["cus"]), f"{r['dram_gbps']}", f"{r['conv_ms']:.2f}",
                         f"{base['conv_ms'] / r['conv_ms']:.2f}x", f"{r['cus'] / 4:.2f}x", f"{r['gbps']:.2f}", pct(wait),
                         f"{r['conv_bound_ms']:.2f}", pct(r["conv_bound_share"]),
                         f"{r['conv_overlap_bound_ms']:.2f}"])
    return md_table(["model", "CUs", "GB/s", "conv ms", "speed-up", "CUs / 4", "GB/s used", "CU load wait",
                     "bound ms", "of bound", "overlapped bound ms"],
                    rows) + "\n\n" + caption("bench/results/dse_scaling.json", "python bench/dse_scaling.py")


@value("dse")
def dse_value(R: Results, model: str, cus: str, gbps: str, field: str) -> str:
    """One point of the scaling study: speedup (against 4 CUs at 4.2 GB/s), conv_ms, gbps, wait, fc_ms."""
    r = _dse(R, model, int(cus), float(gbps))
    if field == "speedup":
        return f"{_dse_base(R, model)['conv_ms'] / r['conv_ms']:.2f}x"
    if field == "conv_ms":
        return f"{r['conv_ms']:.2f} ms"
    if field == "gbps":
        return f"{r['gbps']:.2f} GB/s"
    if field == "wait":
        return pct(r["stall_cu_load_wait"] / r["cycles"], 0 if r["stall_cu_load_wait"] / r["cycles"] >= 0.1 else 1)
    if field == "bound_ms":  # the conv layers' bound on that machine (snowir/driver/bound.py)
        return f"{r['conv_bound_ms']:.2f} ms"
    if field == "of_bound":
        return pct(r["conv_bound_share"])
    if field == "overlap_bound_ms":  # the conv layers' bound were they to overlap perfectly
        return f"{r['conv_overlap_bound_ms']:.2f} ms"
    if field == "bound_speedup":  # the bound's own speed-up against 4 CUs at 4.2 GB/s
        return f"{_dse_base(R, model)['conv_bound_ms'] / r['conv_bound_ms']:.2f}x"
    if field == "fc_ms":  # the device time that is not conv time: the fully connected layers
        return f"{r['ms'] - r['conv_ms']:.0f} ms"
    raise DocTableError(f"dse value: unknown field {field!r}")


# ---------------------------------------------------------------------------------------------
# simulator speed (bench/sim_speed.py)


@table("sim-speed")
def sim_speed(R: Results) -> str:
    d = R("sim_speed.json")
    rows = [[r["kernel"], r["engine"], f"{r['dynamic_instructions']:,}", f"{r['simulate_s']:.2f}",
             f"{r['minstr_per_s']:.2f}", f"{r['mmac_per_s']:.1f}", f"{r['cycles']:,}"] for r in d["rows"]]
    text = md_table(["program", "engine", "instructions", "simulate s", "M instr/s", "M MAC/s", "cycles"], rows)
    if d.get("models"):
        models = [[m["model"], f"{m['compile_s']:.1f}", f"{m['simulate_wall_s_1']:.1f}",
                   f"{m['simulate_wall_s_jobs']:.1f} ({m['jobs']})", f"{m['dynamic_instructions']:,}",
                   f"{m['ort_ms_per_image']:.1f}", f"{m['slowdown_vs_ort']:.0f}x"] for m in d["models"]]
        text += "\n\n" + md_table(["model", "compile s", "simulate s (1 process)", "simulate s (processes)",
                                   "instructions", "onnxruntime fp32 ms", "simulation / onnxruntime"], models)
    return text + "\n\n" + caption("bench/results/sim_speed.json", "python bench/sim_speed.py") + (
        f" Measured on {d['machine']}, {d['cores']} cores, Python {d['python']}.")


@value("sim-speed")
def sim_speed_value(R: Results, engine: str, *kernel: str) -> str:
    for r in R("sim_speed.json")["rows"]:
        if r["engine"] == engine and r["kernel"] == " ".join(kernel):
            return f"{r['minstr_per_s']:.2f} M instr/s"
    raise DocTableError(f"sim_speed.json has no {engine} row {' '.join(kernel)!r}")


# ---------------------------------------------------------------------------------------------
# formats on held-out weights and on trained nets (bench/heldout_qformat.py, bench/real_qformat.py)

FORMATS = ("Q8.8", "Q5.11", "auto-synthetic", "auto-calibrated")
FORMAT_HEAD = ["Q8.8", "Q5.11", "auto, no data", "auto, calibrated"]


def _best_bold(cells: list[float], text: list[str]) -> list[str]:
    best = max(range(len(cells)), key=lambda i: cells[i])
    return [f"**{t}**" if i == best else t for i, t in enumerate(text)]


@table("heldout-qformat")
def heldout_qformat(R: Results) -> str:
    rows = []
    for name, label in (("heldout_qformat_unit_normal.json", "[0, 1), N(0, 1)"),
                        ("heldout_qformat_normalized_normal.json", "standardised, N(0, 1)"),
                        ("heldout_qformat_unit_images.json", "[0, 1), images")):
        for r in R(name):
            snr = [r[f]["snr_db"] for f in FORMATS]
            rows.append([r["model"], label, *_best_bold(snr, [f"{x:.1f}" for x in snr])])
    return md_table([f"net (seed {R('heldout_qformat_unit_normal.json')[0]['seed']})", "inputs, BN statistics",
                     *FORMAT_HEAD], rows) + "\n\n" + caption(
        "bench/results/heldout_qformat_{unit_normal,normalized_normal,unit_images}.json",
        "python bench/heldout_qformat.py")


@table("real-qformat")
def real_qformat(R: Results) -> str:
    rows = []
    for r in [*R("real_qformat.json"), *R("real_qformat_det.json")]:
        snr = [r[f]["snr_db"] for f in FORMATS]
        text = [f"{x:.1f} ({pct(r[f]['task_agree'], 0)})" for x, f in zip(snr, FORMATS)]
        rows.append([r["model"].removesuffix(".onnx"), "×".join(map(str, r["shape"][1:])), *_best_bold(snr, text)])
    return md_table(["net", "input", *FORMAT_HEAD], rows) + "\n\n" + caption(
        "bench/results/real_qformat.json, real_qformat_det.json", "python bench/real_qformat.py")
