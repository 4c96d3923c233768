"""
Dynamic input dimensions, as exporters write them (`[N, 3, H, W]`): the ONNX backend compiles per
input shape at the first run and keeps it, takes `input_shapes=`, runs a dynamic batch of N
images; snow-run takes the shape from `--input`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snowir.backend import FloatBackend, SnowflakeBackend
from snowir.errors import SnowError

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import ort_run, rand, snow_run  # noqa: E402


def exported(dims: list) -> onnx.ModelProto:
    """conv + BN + relu + conv + global pool, input dims as a PyTorch export with dynamic axes."""
    c = 8
    inits = {"w1": rand(c, 3, 3, 3, seed=1, scale=0.3), "b1": rand(c, seed=2, scale=0.1),
             "g": 1 + rand(c, seed=3, scale=0.1), "beta": rand(c, seed=4, scale=0.1),
             "mu": rand(c, seed=5, scale=0.1), "var": 1 + np.abs(rand(c, seed=6, scale=0.1)),
             "w2": rand(4, c, 1, 1, seed=7, scale=0.3)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"])]
    graph = helper.make_graph(nodes, "exported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4, 1, 1])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


DYNAMIC = ["N", 3, "H", "W"]


def images(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape).astype(np.float32)


def test_prepare_accepts_dynamic_dims_and_compiles_each_shape_once() -> None:
    m = exported(DYNAMIC)
    rep = SnowflakeBackend.prepare(m, engine="golden")
    assert rep.module is None  # nothing to compile before a shape is known
    for shape in ([1, 3, 8, 8], [2, 3, 6, 10]):  # the second: a batch of two images
        x = images(*shape)
        (y,) = rep.run([x])
        ref = ort_run(m, x)
        assert y.shape == ref.shape
        assert np.abs(y - ref).max() <= 0.05 * max(1.0, float(np.abs(ref).max()))
    first = rep.shapes[((1, 3, 8, 8),)]
    rep.run(images(1, 3, 8, 8, seed=3))
    assert len(rep.shapes) == 2 and rep.shapes[((1, 3, 8, 8),)] is first  # kept, not compiled again


def test_dynamic_batch_runs_each_image_as_alone() -> None:
    m = exported(DYNAMIC)
    rep = SnowflakeBackend.prepare(m, engine="golden")
    x = images(3, 3, 8, 8)
    (batch,) = rep.run(x)
    alone = np.concatenate([rep.run(x[i:i + 1])[0] for i in range(3)])
    assert np.array_equal(batch, alone)


def test_machine_engine_on_a_dynamic_model_matches_golden() -> None:
    m = exported(DYNAMIC)
    x = images(1, 3, 6, 6)
    (machine,) = SnowflakeBackend.prepare(m).run(x)
    (golden,) = SnowflakeBackend.prepare(m, engine="golden").run(x)
    assert np.array_equal(machine, golden)


def test_input_shapes_fix_the_dims_at_prepare() -> None:
    m = exported(DYNAMIC)
    rep = SnowflakeBackend.prepare(m, engine="golden", input_shapes=[1, 3, 8, 8])
    assert rep.module is not None and rep.input_types[0].get_shape() == (1, 3, 8, 8)
    with pytest.raises(SnowError, match=r"has shape \[1, 3, 6, 6\], the model expects \[1, 3, 8, 8\]"):
        rep.run(images(1, 3, 6, 6))
    by_name = SnowflakeBackend.prepare(m, engine="golden", input_shapes={"x": [2, 3, 4, 4]})
    assert by_name.run(images(2, 3, 4, 4))[0].shape == (2, 4, 1, 1)
    with pytest.raises(SnowError, match="'image', not an input of the model"):
        SnowflakeBackend.prepare(m, engine="golden", input_shapes={"image": [1, 3, 8, 8]})
    with pytest.raises(SnowError, match="dimensions must be positive"):
        SnowflakeBackend.prepare(m, engine="golden", input_shapes=[1, 3, 0, 8])


def test_float_backend_runs_dynamic_dims() -> None:
    m = exported(DYNAMIC)
    x = images(2, 3, 5, 7)
    (y,) = FloatBackend.prepare(m).run(x)
    assert np.allclose(y, ort_run(m, x), rtol=1e-4, atol=1e-5)



def test_snow_run_takes_the_shape_from_input(tmp_path: Path, capsys) -> None:
    path = tmp_path / "dyn.onnx"
    onnx.save(exported(DYNAMIC), path)
    x, out = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(x, images(2, 3, 6, 6))
    assert snow_run([str(path), "--input", str(x), "--output", str(out), "--engine", "golden", "--quiet"]) == 0
    assert np.load(out).shape == (2, 4, 1, 1)
    capsys.readouterr()
    assert snow_run([str(path), "--quiet", "--engine", "golden"]) == 1  # no --input: no shape to take
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dynamic dimension" in err[0]


def test_calibration_images_of_one_size_serve_every_input_size() -> None:
    """A dynamic H x W model calibrated on 8 x 8 images runs at 12 x 20 and as a batch of 2: the
    images are resampled to each compiled size (snowir/calibration.resample), close to onnxruntime."""
    m = exported(DYNAMIC)
    rep = SnowflakeBackend.prepare(m, engine="golden", format="auto", calibration=images(4, 1, 3, 8, 8, seed=1))
    for x in (images(1, 3, 12, 20, seed=2), images(2, 3, 16, 8, seed=3)):
        (y,) = rep.run(x)
        want = ort_run(m, x)
        assert y.shape == want.shape
        assert 10 * np.log10(np.sum(want ** 2) / np.sum((y - want) ** 2)) > 35
    assert len(rep.shapes) == 2


def test_an_option_prepare_does_not_know_is_refused_in_one_line() -> None:
    m = exported([1, 3, 8, 8])
    with pytest.raises(SnowError, match=r"^prepare: unknown option 'calibraton' \(this backend takes: engine"):
        SnowflakeBackend.prepare(m, engine="golden", calibraton=images(4, 1, 3, 8, 8))
    with pytest.raises(SnowError, match=r"^prepare: unknown option 'format' \(this backend takes: input_shapes\)"):
        FloatBackend.prepare(m, format="auto")
