"""
Simulator speed, side by side in one run:

  * kernels: simulated instructions and MACs per second of the fast and the reference engine on
    a long scalar loop and on a MAC loop nest (a 3x3 16->16 convolution, tools/asm_kernels.py);
  * a whole layer (ResNet-50's 56x56 3x3 64->64 conv, compiled through the pipeline);
  * models: ResNet-18 and ResNet-50 compile seconds and full functional + cycle simulation wall
    seconds, one process and one process per core (`--jobs`), against onnxruntime's fp32 time
    per image on the same machine.

    python bench/sim_speed.py [--quick] [--no-models] [--out DIR | --update-results]
        # table + sim_speed.json in build/bench/ (bench/results/ with --update-results)
"""

from __future__ import annotations

import argparse
import json
import platform
import time


from snowir import api
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.tools.asm_kernels import conv3x3, scalar_loop

from _output import add_output_options, forget_blobs, loop_units, machine_speed, output_file, speed_line, with_speed


def measure(name: str, kernel, engine: str, repeat: int = 3) -> dict:
    module = api.parse_text(kernel.text)
    image = assemble(module)
    best = None
    for _ in range(repeat):
        r = run_image(image, engine=engine, inputs=kernel.inputs, module=module)
        if best is None or r.simulate_s < best.simulate_s:
            best = r
    hw = SnowflakeConfig()
    return {"kernel": name, "engine": engine, "dynamic_instructions": best.machine.dynamic,
            "simulate_s": best.simulate_s, "minstr_per_s": best.machine.dynamic / best.simulate_s / 1e6,
            "mmac_per_s": best.timing.macs / best.simulate_s / 1e6,
            "cycles": best.cycles, "ms": hw.cycles_to_ms(best.cycles),
            "mac_utilization": best.timing.macs / (best.cycles * hw.macs)}


def layer_case() -> dict:
    """ResNet-50's 56x56 3x3 64->64 conv + ReLU as an ONNX model through the whole pipeline."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import snowir

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.06).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "layer",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    compiled = snowir.compile(model)
    result = compiled.run()
    t = result.report.total
    return {"kernel": "layer 56x56 3x3 64->64", "engine": "fast", "dynamic_instructions": t.dynamic_instructions,
            "simulate_s": t.simulate_s, "minstr_per_s": t.dynamic_instructions / t.simulate_s / 1e6,
            "mmac_per_s": t.macs / t.simulate_s / 1e6, "cycles": t.cycles, "ms": t.ms,
            "mac_utilization": t.mac_utilization}


def model_case(name: str, path, jobs: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    import snowir

    t0, c0 = time.perf_counter(), time.process_time()
    compiled = snowir.compile(path)
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    x = np.random.default_rng(0).standard_normal(compiled.input_shapes[0]).astype(np.float32)
    walls, cpus = {}, {}
    for j in sorted({1, jobs}):
        t0, c0 = time.perf_counter(), time.process_time()
        result = compiled.run(x, jobs=j)
        walls[j], cpus[j] = time.perf_counter() - t0, time.process_time() - c0
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    t0 = time.perf_counter()
    for _ in range(5):
        sess.run(None, feed)
    ort_s = (time.perf_counter() - t0) / 5
    t = result.report.total
    # CPU seconds too (this process: the one-process run), which other processes sharing the cores
    # inflate less than wall seconds; loop-units of CPU seconds divide by the loop's CPU seconds
    return {"model": name, "compile_s": compile_s, "simulate_wall_s_1": walls[1], "jobs": jobs,
            "compile_cpu_s": compile_cpu_s, "simulate_cpu_s_1": cpus[1],
            "simulate_wall_s_jobs": walls[jobs], "dynamic_instructions": t.dynamic_instructions,
            "minstr_per_s": t.dynamic_instructions / walls[jobs] / 1e6, "cycles": t.cycles, "ms": t.ms,
            "ort_ms_per_image": 1e3 * ort_s, "slowdown_vs_ort": walls[jobs] / ort_s}


def main() -> None:
    import os

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-models", action="store_true", help="kernels and the layer only")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    add_output_options(p, "sim_speed.json")
    args = p.parse_args()
    big = not args.quick
    cases = [
        ("scalar loop", scalar_loop(400_000 if big else 40_000), "fast"),
        ("scalar loop", scalar_loop(40_000 if big else 4_000), "reference"),
        ("conv 3x3 16->16 on 34x34", conv3x3(34, 34), "fast"),
        ("conv 3x3 16->16 on 18x18", conv3x3(18, 18), "reference"),
    ]
    speed = machine_speed()
    rows = []
    t0 = time.perf_counter()
    for name, kernel, engine in cases:
        rows.append(measure(name, kernel, engine, 3 if big else 1))
        print(f"  measured {name} / {engine}", flush=True)
    rows.append(layer_case())
    print("  measured the 56x56 layer", flush=True)
    head = (f"{'kernel':<26} {'engine':<10} {'instr':>10} {'sim s':>8} {'M instr/s':>10} {'M MAC/s':>9} {'cycles':>10} "
            f"{'sim ms':>8} {'MAC util':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['kernel']:<26} {r['engine']:<10} {r['dynamic_instructions']:>10,} {r['simulate_s']:>8.3f} "
              f"{r['minstr_per_s']:>10.2f} {r['mmac_per_s']:>9.1f} {r['cycles']:>10,} {r['ms']:>8.3f} "
              f"{100 * r['mac_utilization']:>7.1f}%")
    models = []
    if not args.no_models:
        from snowir.tools.bench_models import build as build_bench
        from snowir.tools.light_models import build as build_light

        for name, path in (("resnet18", build_bench("resnet18")), ("resnet50", build_light("resnet50"))):
            models.append(model_case(name, path, args.jobs))
            forget_blobs()  # one model's weights at a time
            print(f"  measured {name}", flush=True)
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    if models:
        head = (f"{'model':<10} {'compile s':>9} {'sim s (1)':>9} {f'sim s ({args.jobs})':>10} {'M instr/s':>10} "
                f"{'sim ms':>8} {'ort ms':>8} {'x ort':>8}")
        print(head)
        print("-" * len(head))
        for m in models:
            print(f"{m['model']:<10} {m['compile_s']:>9.2f} {m['simulate_wall_s_1']:>9.2f} "
                  f"{m['simulate_wall_s_jobs']:>10.2f} {m['minstr_per_s']:>10.2f} {m['ms']:>8.2f} "
                  f"{m['ort_ms_per_image']:>8.2f} {m['slowdown_vs_ort']:>8.0f}")
        cpu_loop = sum(speed["python_loop_cpu_s_runs"]) / len(speed["python_loop_cpu_s_runs"])
        for m in models:
            print(f"{m['model']}: compile {m['compile_s']:.2f} s = {loop_units(m['compile_s'], speed):.1f} loop-units "
                  f"({m['compile_cpu_s']:.2f} CPU s = {m['compile_cpu_s'] / cpu_loop:.1f} CPU loop-units), simulate "
                  f"{m['simulate_wall_s_1']:.2f} s = {loop_units(m['simulate_wall_s_1'], speed):.1f} loop-units "
                  f"({m['simulate_cpu_s_1']:.2f} CPU s = {m['simulate_cpu_s_1'] / cpu_loop:.1f} CPU loop-units)")
    print(speed_line(speed))
    out = output_file(args, "sim_speed.json")
    out.write_text(json.dumps(with_speed({"machine": platform.processor() or platform.machine(),
                                          "python": platform.python_version(), "cores": os.cpu_count(),
                                          "bench_s": time.perf_counter() - t0, "rows": rows, "models": models},
                                         speed), indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
