"""
No silent wrong results: batches, names that clash with segment names, layers the lowering
cannot place, bad input values, bad hardware fields, outputs written all or nothing, --check
against the model as imported, and pipeline errors as one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_util import model, rand
from snowir.errors import SnowError
from snowir.driver.model_api import run_model_on_device
from snowir.tools.snow_run import main as snow_run


def _save(tmp_path: Path, m: onnx.ModelProto, name: str) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, path)
    return path


def _conv_net(batch: int, names=("c1", "p1", "c2")) -> onnx.ModelProto:
    n = helper.make_node
    nodes = [n("Conv", ["img", "w1", "b1"], ["a"], name=names[0], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
             n("MaxPool", ["r"], ["p"], name=names[1], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "w2", "b2"], ["out"], name=names[2], pads=[1, 1, 1, 1])]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=0.3), "b1": rand(16, seed=2, scale=0.1),
             "w2": rand(16, 16, 3, 3, seed=3, scale=0.1), "b2": rand(16, seed=4, scale=0.1)}
    return model(nodes, {"img": [batch, 3, 8, 8]}, {"out": None}, inits)


def test_a_batch_gives_the_single_image_results(tmp_path: Path) -> None:
    x = rand(2, 3, 8, 8, seed=7)
    two = run_model_on_device(_save(tmp_path, _conv_net(2), "b2"), x, check=True)
    assert two.outputs[0].shape == (2, 16, 4, 4)
    assert two.report["check"]["golden_bit_exact"] is True
    one = _save(tmp_path, _conv_net(1), "b1")
    singles = [run_model_on_device(one, x[i:i + 1]) for i in range(2)]
    assert np.array_equal(two.outputs[0], np.concatenate([s.outputs[0] for s in singles]))
    by_name = lambda r: {layer["name"]: layer["cycles"] for layer in r.report["layers"]}  # noqa: E731
    assert by_name(two) == {k: sum(by_name(s)[k] for s in singles) for k in by_name(two)}


def test_layers_named_like_segments_run(tmp_path: Path) -> None:
    path = _save(tmp_path, _conv_net(1, names=("x", "w", "y")), "names")
    rep = tmp_path / "r.json"
    assert snow_run([str(path), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    assert [layer["name"] for layer in r["layers"] if layer["cycles"]] == ["x", "w", "y"]


def test_what_the_lowering_cannot_place_runs_on_the_host(tmp_path: Path) -> None:
    """A dilated conv, a max pool over 200 channels and a concat on the width axis: labelled
    host work, the rest on the device, the whole still bit-exact and close to onnxruntime."""
    n = helper.make_node
    nodes = [n("Conv", ["img", "w1", "b1"], ["a"], name="wide", pads=[0, 0, 0, 0]),
             n("MaxPool", ["a"], ["p"], name="pool200", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "w2", "b2"], ["d"], name="dilated", pads=[2, 2, 2, 2], dilations=[2, 2]),
             n("Concat", ["d", "d"], ["out"], name="side_by_side", axis=3)]
    inits = {"w1": rand(200, 4, 1, 1, seed=1, scale=0.3), "b1": rand(200, seed=2, scale=0.1),
             "w2": rand(16, 200, 3, 3, seed=3, scale=0.02), "b2": rand(16, seed=4, scale=0.1)}
    path = _save(tmp_path, model(nodes, {"img": [1, 4, 8, 8]}, {"out": None}, inits), "fallback")
    rep = tmp_path / "r.json"
    assert snow_run([str(path), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    where = {layer["name"]: layer["where"] for layer in r["layers"]}
    assert where["wide"] == "device" and where["pool200"] == "host" and where["dilated"] == "host"
    assert where["side_by_side"] == "host"
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 30


def test_nan_input_is_refused_and_nothing_written(tmp_path: Path, capsys) -> None:
    path = _save(tmp_path, _conv_net(1), "net")
    x = rand(1, 3, 8, 8)
    x[0, 1, 2, 3] = np.nan
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    assert snow_run([str(path), "--input", str(tmp_path / "x.npy"), "--output", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "input 'img' holds 1 NaN/infinite values (first: NaN at index [0, 1, 2, 3])" in err
    assert not out.exists()


def test_double_and_integer_inputs_are_converted(tmp_path: Path) -> None:
    path = _save(tmp_path, _conv_net(1), "net")
    x = rand(1, 3, 8, 8)
    a = run_model_on_device(path, x).outputs[0]
    b = run_model_on_device(path, x.astype(np.float64)).outputs[0]
    assert np.array_equal(a, b)
    c = run_model_on_device(path, np.ones((1, 3, 8, 8), np.int32)).outputs[0]
    assert c.shape == a.shape


def test_outputs_are_all_or_nothing(tmp_path: Path, capsys) -> None:
    path = _save(tmp_path, _conv_net(1), "net")
    out, trace = tmp_path / "y.npy", tmp_path / "t.json"
    args = [str(path), "--quiet", "--output", str(out), "--trace", str(trace)]
    assert snow_run(args + ["--report", str(tmp_path / "missing" / "r.json")]) == 1
    assert "no such directory for --report" in capsys.readouterr().err
    assert not out.exists() and not trace.exists()
    # a failed check writes nothing either
    assert snow_run(args + ["--check", "--min-snr", "1000"]) == 1
    assert "check failed: SNR" in capsys.readouterr().err and not out.exists()
    assert snow_run(args + ["--check", "--min-snr", "10"]) == 0
    assert out.exists() and trace.exists()


def test_check_reads_the_model_as_imported(tmp_path: Path) -> None:
    """opset 6 AveragePool and IR version 14 reach onnxruntime upgraded, as snowir imports them;
    a softmax straight over the model input compares what the model holds (quantised)."""
    n = helper.make_node
    m = model([n("AveragePool", ["img"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
               n("Relu", ["a"], ["out"])], {"img": [1, 16, 4, 4]}, {"out": None}, opset=6)
    m.ir_version = 14
    r = run_model_on_device(_save(tmp_path, m, "old"), check=True).report
    assert r["check"]["reference"] == "onnxruntime" and r["check"]["snr_db"] > 30
    s = model([n("Softmax", ["img"], ["out"], axis=1)], {"img": [1, 10]}, {"out": None})
    r = run_model_on_device(_save(tmp_path, s, "softmax"), check=True).report
    assert r["check"]["golden_bit_exact"] is True


def test_pipeline_errors_are_one_line(tmp_path: Path, capsys) -> None:
    path = _save(tmp_path, _conv_net(1), "net")
    with pytest.raises(SnowError, match=r"bad pass pipeline \(column 21\): Malformed pass arguments"):
        run_model_on_device(path, pipeline="nn-to-tile{mode=COOP")
    assert snow_run([str(path), "--quiet", "--pipeline", "nn-to-tile{mode=}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Unknown argument value" in err and "Traceback" not in err


def test_zero_size_dimension_is_not_called_dynamic(tmp_path: Path, capsys) -> None:
    m = model([helper.make_node("Relu", ["img"], ["out"])], {"img": [1, 0, 4]}, {"out": [1, 0, 4]})
    assert snow_run([str(_save(tmp_path, m, "empty")), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "zero-size dimension" in err and "dynamic" not in err


def test_every_planner_path_goes_through_the_passes(tmp_path: Path) -> None:
    """INDP (3 channels), a gathered strided 1x1, grouped convs and a conv over a channel
    slice (split-kernels) lowered by nn-to-tile / tile-to-asm and run: bit-exact."""
    n = helper.make_node
    nodes = [n("Conv", ["img", "w1", "b1"], ["a"], name="indp", pads=[1, 1, 1, 1]), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["s"], name="stride2_1x1", strides=[2, 2]),
             n("Conv", ["s", "w3", "b3"], ["g"], name="grouped", pads=[1, 1, 1, 1], group=2),
             n("Conv", ["g", "w4", "b4"], ["out"], name="big_kernel", pads=[2, 2, 2, 2])]  # 5x5x192 > 4080 words
    inits = {"w1": rand(64, 3, 3, 3, seed=1, scale=0.3), "b1": rand(64, seed=2, scale=0.1),
             "w2": rand(32, 64, 1, 1, seed=3, scale=0.2), "b2": rand(32, seed=4, scale=0.1),
             "w3": rand(192, 16, 3, 3, seed=5, scale=0.1), "b3": rand(192, seed=6, scale=0.1),
             "w4": rand(16, 192, 5, 5, seed=7, scale=0.01), "b4": rand(16, seed=8, scale=0.1)}
    path = _save(tmp_path, model(nodes, {"img": [1, 3, 12, 12]}, {"out": None}, inits), "paths")
    r = run_model_on_device(path, check=True).report
    assert r["check"]["golden_bit_exact"] is True
    modes = {layer["name"]: layer["mode"] for layer in r["layers"] if layer["cycles"]}
    assert modes["indp"] == "INDP" and modes["stride2_1x1"] == "COOP" and modes["grouped"] == "COOP"
    assert sum(1 for name in modes if name.startswith("big_kernel")) >= 2  # split over channel slices


DIGITS = str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")


def test_an_input_shape_for_an_input_the_model_lacks_is_refused(capsys) -> None:
    assert snow_run([DIGITS, "--input-shape", "foo=1,1,8,8", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-shape names input 'foo', which the model does not have" in err


def test_snow_opt_refuses_an_output_in_a_missing_directory_before_running(tmp_path: Path, capsys) -> None:
    from snowir.tools.snow_opt import main as snow_opt

    target = tmp_path / "nodir" / "x.mlir"
    assert snow_opt([DIGITS, "-p", "nn-prepare", "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"snow-opt: no such directory for -o {target} (nothing run, nothing written)"
    assert not target.parent.exists()


def test_an_unknown_hardware_parameter_suggests_the_known_one(tmp_path: Path, capsys) -> None:
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"cuss": 4}))
    assert snow_run([DIGITS, "--hw", str(hw), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"snow-run: {hw}: unknown hardware parameter 'cuss' (did you mean 'cus'?)"


@pytest.mark.parametrize("pipeline,why", [("tile-to-asm", "tile-to-asm: no tile.layer in the module"),
                                          ("nn-prepare,balance-loads", "balance-loads: no snowflake_asm program")])
def test_a_lowering_pass_on_an_unlowered_module_says_so(pipeline: str, why: str, capsys) -> None:
    """A pass with nothing of its level to act on refuses in one line rather than printing the
    module unchanged."""
    from snowir.tools.snow_opt import main as snow_opt

    assert snow_opt([DIGITS, "-p", pipeline]) == 1
    assert why in capsys.readouterr().err


def test_a_conv_whose_kernel_shape_disagrees_with_its_weights_is_refused(tmp_path: Path, capsys) -> None:
    """onnxruntime fails such a node deep inside its own graph (naming an internal node); the
    import names the node and what disagrees, in one line."""
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5], name="badconv")],
              {"x": [1, 3, 8, 8]}, {"y": [1, 16, 6, 6]}, {"w": rand(16, 3, 3, 3)})
    assert snow_run([str(_save(tmp_path, m, "bad.onnx")), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "node 'badconv' (Conv): kernel_shape [5, 5] disagrees with the weight's 3x3" in err
