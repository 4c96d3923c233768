"""
Real models end to end at the nn level: the nine onnx-wheel light models with seeded
He-initialised weights (tools/light_models.py) and the shipped digits CNN.

  * every model imports; the float golden model matches onnxruntime to 1e-4 (relative to the
    largest logit); after nn-prepare the Q8.8 golden logits reach >= 30 dB SNR vs onnxruntime;
  * ResNet-50's nn module prints in < 3000 lines and round-trips through the parser;
  * the digits CNN keeps its accuracy in Q8.8.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.printer import Printer

from snowir import api
from snowir.driver.check import compare, golden_logits, ort_logits
from snowir.frontend.onnx_import import import_onnx
from snowir.passes.pipelines import NNPreparePass
from snowir.tools import light_models
from snowir.tools.light_models import NAMES
from snowir.tools.snow_run import main as snow_run

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def _model_group(name: str) -> pytest.MarkDecorator:
    """The tests of one built model run on one pytest-xdist worker (`--dist loadgroup`), which
    builds it once in its models_dir (ResNet-50's BN calibration alone is most of a minute)."""
    return pytest.mark.xdist_group(f"model-{name}")


BN_MODELS = ("inception_v2", "densenet121", "resnet50", "shufflenet")
"""The light models with batch norms: build() sets their statistics from the shipped file."""
_STEPS: dict[str, list[str]] = {}


def build(name: str, models_dir: Path) -> Path:
    """light_models.build, remembering the steps of the build that made the model."""
    return light_models.build(name, models_dir, say=_STEPS.setdefault(name, []).append)


@pytest.mark.heavy
@pytest.mark.parametrize("name", [pytest.param(n, marks=_model_group(n)) for n in NAMES])
def test_light_model(name: str, models_dir: Path) -> None:
    path = build(name, models_dir)
    if name in BN_MODELS:  # calibrating would be most of the suite's time: the shipped statistics are current
        assert "batch norms: the shipped statistics" in _STEPS[name], \
            f"{name}: {light_models.SHIPPED_BN_STATS.name} is stale: python tools/light_models.py --ship-bn-stats"
    module = import_onnx(path)
    shape = list(module.body.block.ops.first.body.block.args[0].type.get_shape())
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ref = ort_logits(str(path), x)
    flt = golden_logits(module, x)
    assert np.abs(flt - ref.reshape(flt.shape)).max() <= 1e-4 * np.abs(ref).max()
    NNPreparePass().apply(Context(), module)
    fixed = golden_logits(module, x)
    assert compare(ref.reshape(fixed.shape), fixed)["snr_db"] >= 30.0


@pytest.mark.heavy
@_model_group("resnet50")
def test_resnet50_prints_compactly_and_round_trips(models_dir: Path) -> None:
    module = import_onnx(build("resnet50", models_dir))
    text = _printed(module)
    assert len(text.splitlines()) < 3000
    again = api.parse_text(text)
    again.verify()
    assert len(list(again.walk())) == len(list(module.walk()))
    # printing changed nothing: the parsed module prints the same text, weights (the dense_resource
    # blobs in the metadata) included; cheaper and stricter than running both through the golden model
    assert _printed(again) == text


def test_shipped_bn_statistics_are_those_of_this_very_model() -> None:
    """The shipped statistics of a model are used only for the weighted graph they were
    calibrated on: one weight changed, and build() calibrates again."""
    import onnx
    from onnx import numpy_helper

    model = light_models.give_weights(onnx.load(str(light_models.light_path("shufflenet"))))
    stats = light_models.shipped_bn_stats("shufflenet", model)
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert stats is not None and len(stats) == 2 * len(bns) == 98
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for bn in bns:  # one mean and one (positive) variance per channel of the BN
        channels = inits[bn.input[1]].shape
        assert stats[bn.input[3]].shape == channels and stats[bn.input[4]].shape == channels
        assert stats[bn.input[3]].dtype == np.float32 and (stats[bn.input[4]] > 0).all()
    light_models.set_initializers(model, stats)
    assert all((numpy_helper.to_array(t) == stats[t.name]).all() for t in model.graph.initializer if t.name in stats)
    w = next(t for t in model.graph.initializer if t.name == bns[0].input[1])
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.5), w.name))
    assert light_models.shipped_bn_stats("shufflenet", model) is None


def _printed(module) -> str:
    out = io.StringIO()
    printer = Printer(stream=out)
    printer.print_op(module)
    printer.print_metadata([Builtin])
    return out.getvalue()


def test_digits_accuracy_in_q8_8() -> None:
    from snowir.tools.train_digits import load_split

    _, _, xte, yte = load_split()
    module = import_onnx(DIGITS)
    NNPreparePass().apply(Context(), module)
    pred = np.array([golden_logits(module, img[None]).argmax() for img in xte])
    assert (pred == yte).mean() >= 0.98


def test_snow_run_digits_check(tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    out = tmp_path / "y.npy"
    assert snow_run([str(DIGITS), "--engine", "golden", "--check", "--quiet", "--report", str(rep), "--output", str(out)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["reference"] == "onnxruntime" and r["check"]["snr_db"] >= 30 and r["check"]["top1_match"]
    assert {"conv1", "conv2", "fc", "pool1"} <= {layer["name"] for layer in r["layers"]}
    # useful MACs, padding taps excluded: 22^2 taps over 8x8 3x3 pad 1, 10^2 over 4x4
    assert r["total"]["macs"] == 22 * 22 * 16 + 10 * 10 * 16 * 32 + 10 * 128
    y = np.load(out)
    assert y.shape == (1, 10) and abs(float(y.sum()) - 1.0) < 0.05  # softmax probabilities (Q8.8)


@pytest.mark.heavy
@_model_group("bvlc_alexnet")
def test_caffe_alexnet_runs_end_to_end_on_the_machine(tmp_path: Path, models_dir: Path) -> None:
    """The light bvlc_alexnet (grouped convs, LRN on the host, FC layers streamed) compiled and run
    layer by layer on the machine model: every device layer bit-exact with the golden model."""
    rep = tmp_path / "r.json"
    assert snow_run([str(build("bvlc_alexnet", models_dir)), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] >= 30 and r["check"]["top1_match"]
    device = [layer for layer in r["layers"] if layer["cycles"]]
    convs = [layer for layer in device if layer["op"] in ("conv2d", "dense")]
    assert [layer["op"] for layer in convs][-3:] == ["dense"] * 3
    # the five convs, some as channel parts (split-kernels by cost: conv4/5's kernels double-buffer)
    assert len({layer["name"].split(".part")[0] for layer in convs[:-3]}) == 5
    lrn = [layer for layer in r["layers"] if layer["op"] == "lrn"]
    assert lrn and all(layer["where"] == "host" and layer["host_ms"] > 0 and layer["cycles"] == 0 for layer in lrn)
    assert r["total"]["host_ms"] == pytest.approx(sum(layer["host_ms"] or 0 for layer in r["layers"]))
    # what the bus and the lanes can do; a layer of a whole-model program is charged the bytes
    # issued from its marker to the next, so a short one may carry a little of its neighbour's
    assert r["total"]["gbps"] <= r["hw"]["dram_gbps"]
    for layer in device:
        assert layer["gbps"] <= r["hw"]["dram_gbps"] * (1.05 if layer["cycles"] < 50_000 else 1.0)
        assert layer["macs"] <= layer["lane_macs"]


def test_the_light_models_command_builds_what_it_is_asked(tmp_path: Path, monkeypatch, capsys) -> None:
    """`python tools/light_models.py squeezenet --out DIR` (README's model command) writes the model:
    its build loop once sat under the `--ship-bn-stats` branch's return and built nothing."""
    monkeypatch.setattr("sys.argv", ["light_models.py", "squeezenet", "--out", str(tmp_path)])
    light_models.main()
    assert (tmp_path / "squeezenet.onnx").is_file()
    assert f"squeezenet: {tmp_path / 'squeezenet.onnx'}" in capsys.readouterr().out
