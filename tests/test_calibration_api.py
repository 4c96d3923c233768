"""
Calibration data through every API (snowir.compile, SnowflakeBackend.prepare, snow-run), and
the synthetic default of format=auto: synthetic inputs say nothing of real ranges, so without
calibration data auto computes what fixed Q8.8 computes (and warns), never losing to it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import snowir
from snowir.backend import SnowflakeBackend
from snowir.dialects import nn
from snowir.driver.check import snr_db
from snowir.driver.model_api import SyntheticCalibrationWarning
from snowir.errors import SnowError
from snowir.golden import Golden

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import model, ort_run, rand, snow_run  # noqa: E402


def image_net() -> onnx.ModelProto:
    """Two convs whose weights have a positive mean, as a net trained on images in [0, 1] has in
    its first layers: N(0, 1) inputs cancel out, images add up to activations ~6x larger."""
    w1 = 0.3 + rand(16, 3, 3, 3, seed=1, scale=0.1)
    w2 = 0.1 + rand(8, 16, 3, 3, seed=2, scale=0.05)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1] * 4)]
    return model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 8, 8, 8]}, {"w1": w1, "w2": w2})


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 3, 8, 8)).astype(np.float32)


def fracs(module) -> list[int]:
    main = Golden(module).main
    return [r.type.get_element_type().frac_bits.data for op in main.body.block.ops for r in op.results
            if op.name.startswith("nn.") and not isinstance(op, nn.ConstantOp)
            and isinstance(getattr(r.type, "get_element_type", lambda: None)(), nn.FixedType)]


def snr(compiled, m: onnx.ModelProto, tests: np.ndarray) -> float:
    ref = np.stack([ort_run(m, x) for x in tests])
    got = np.stack([compiled.run(x, engine="golden").outputs[0] for x in tests])
    return snr_db(ref.reshape(len(tests), -1), got.reshape(len(tests), -1))


def test_synthetic_auto_never_loses_to_q88_and_warns() -> None:
    m = image_net()
    tests = images(3, 2)
    q88 = snowir.compile(m)
    with pytest.warns(SyntheticCalibrationWarning, match="synthetic inputs"):
        synthetic = snowir.compile(m, format="auto")
    assert set(fracs(synthetic.module)) == {8}
    for x in tests:  # bit for bit what Q8.8 computes, on the images and on N(0, 1) alike
        for y in (x, np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)):
            assert np.array_equal(synthetic.run(y, engine="golden").outputs[0], q88.run(y, engine="golden").outputs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # calibration data given: no warning
        calibrated = snowir.compile(m, format="auto", calibration=images(4, 1))
    assert max(fracs(calibrated.module)) > 8  # the real ranges are narrow enough for more fraction bits
    assert snr(calibrated, m, tests) > snr(q88, m, tests) + 6


def test_calibration_as_array_or_path_is_the_same(tmp_path: Path) -> None:
    m = image_net()
    cal = images(4, 1)
    path = tmp_path / "cal.npy"
    np.save(path, cal[:, 0])  # N images, the batch dim dropped
    by_array = snowir.compile(m, format="auto", calibration=cal)
    by_path = snowir.compile(m, format="auto", calibration=path)
    assert fracs(by_array.module) == fracs(by_path.module)
    digest = by_array.module.attributes["nn.calibration"].data.split()[0]
    assert digest == by_path.module.attributes["nn.calibration"].data.split()[0]
    rep = SnowflakeBackend.prepare(m, engine="golden", format="auto", calibration=cal)
    assert fracs(rep.module) == fracs(by_array.module)
    x = images(1, 5)[0]
    assert np.array_equal(rep.run(x)[0], by_array.run(x, engine="golden").outputs[0])


def test_calibration_refused_where_it_would_go_unused() -> None:
    m = image_net()
    with pytest.raises(SnowError, match="calibration data is for format='auto', not Q8.8"):
        SnowflakeBackend.prepare(m, calibration=images(2, 1))
    with pytest.raises(SnowError, match="already quantised"):
        snowir.compile(m, pipeline="nn-prepare{format=Q8.8}", format="auto", calibration=images(2, 1))
    with pytest.raises(SnowError, match=r"calibration data: calibration inputs of shape \[2, 1, 8, 8\], the model takes"):
        snowir.compile(m, format="auto", calibration=np.zeros((2, 1, 8, 8), np.float32))


def test_n_images_calibrate_a_batched_model() -> None:
    m = image_net()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 2
    cal = images(3, 1)[:, 0]  # three images for a batch-2 model: two batches, the last one filled up
    compiled = snowir.compile(m, format="auto", calibration=cal)
    assert "2 inputs" in compiled.module.attributes["nn.calibration"].data



def test_snow_run_auto_without_calibration_warns_in_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(image_net(), path)
    assert snow_run([str(path), "--format", "auto", "--engine", "golden", "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("snow-run: warning:") and "synthetic inputs" in err[0]
    cal = tmp_path / "cal.npy"
    np.save(cal, images(4, 1)[:, 0])
    x = tmp_path / "x.npy"
    np.save(x, images(1, 2)[0])  # an image like the calibration ones (N(0, 1) would clip the input)
    assert snow_run([str(path), "--format", "auto", "--calibration", str(cal), "--input", str(x), "--engine", "golden",
                     "--quiet"]) == 0
    assert capsys.readouterr().err.strip() == ""


def test_a_calibration_path_with_spaces_works_and_a_missing_one_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "my calibration"
    folder.mkdir()
    path, cal = folder / "m.onnx", folder / "cal images.npy"
    onnx.save(image_net(), path)
    np.save(cal, images(4, 1)[:, 0])
    assert snowir.compile(str(path), format="auto", calibration=str(cal)).run(images(1, 2)[0], engine="golden").outputs
    with pytest.raises(SnowError, match=r"^.*m\.onnx: quantize: .*none\.npy: cannot read calibration inputs"):
        snowir.compile(str(path), format="auto", calibration=str(folder / "none.npy"))


def test_calibrated_auto_never_loses_to_a_uniform_format_on_its_calibration_data() -> None:
    """A 1x1 conv whose input and output stay below 1: the range rule with headroom 1.25 gives the
    output Q2.14 where Q1.15 holds every calibrated value; per-tensor auto lost 85.0 dB to 90.5 on
    the data it was calibrated on (issue 40: ShuffleNet's auto lost to Q5.11). Auto now measures
    the uniform formats too and keeps the best."""
    w = np.array([0.9, -0.85, 0.6, -0.3], np.float32).reshape(4, 1, 1, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": [1, 1, 8, 8]}, {"y": [1, 4, 8, 8]}, {"w": w})
    cal = np.random.default_rng(5).random((8, 1, 1, 8, 8)).astype(np.float32) * 0.99
    auto = snowir.compile(m, format="auto", calibration=cal)
    got = snr(auto, m, cal)
    for n in range(16):
        uniform = snr(snowir.compile(m, format=f"Q{16 - n}.{n}"), m, cal)
        assert got >= uniform - 1e-9, (f"Q{16 - n}.{n}", uniform, got)
    assert "chosen by SNR on the calibration inputs" in auto.module.attributes["nn.calibration"].data
