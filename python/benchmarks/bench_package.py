"""The Python package's speed figures (issue 20), each a ratio measured in one run on this machine:

1. quantize_tensor on a 4096 x 4096 float32 NumPy array (int4:g128, nvfp4) against `lowbit bench codecs`'s
   figure for the same scheme (both single-threaded, GB/s of fp32 consumed): the binding's own cost;
2. compressed-tensors' quantize (llm-compressor's reference, torch on the CPU, with its qparams) on the same
   tensor, int4 symmetric groups of 128: lowbit's speed-up;
3. Model.logits on one token against the same call timed inside C++: the per-call overhead in microseconds;
4. GPTQ on the bundled model from Python against `lowbit quantize`: seconds and bits per weight.

    build/interop-venv/bin/python python/benchmarks/bench_package.py      (after make test-python)
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np
import torch

import lowbit

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = str(pathlib.Path(sys.executable).parent / "lowbit")
MODEL = str(ROOT / "models" / "kjv-llama-7m")


def best_seconds(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def cli_json(*args):
    return json.loads(subprocess.run([CLI, *args, "--json"], capture_output=True, text=True, check=True).stdout)


def codecs():
    w = np.random.default_rng(0).normal(0, 0.02, (4096, 4096)).astype(np.float32)
    schemes = ("int4:g128", "nvfp4")
    shapes = {"4096 x 4096": w, "512 x 4096 (bench codecs' shape)": w[:512]}
    py = {(text, shape): 0.0 for text in schemes for shape in shapes}
    cli = {text: 0.0 for text in schemes}
    for _ in range(3):  # alternated rounds, the best of each: this machine's speed drifts
        for r in cli_json("bench", "codecs", "--format", ",".join(schemes), "--seconds", "0.5"):
            if r["op"] == "quantize":
                cli[r["format"]] = max(cli[r["format"]], r["gbps"])
        for (text, shape), best in py.items():
            a, scheme = shapes[shape], lowbit.Scheme(text)
            py[text, shape] = max(best, a.nbytes / 1e9 / best_seconds(lambda: lowbit.quantize_tensor(a, scheme), 3))
    print("quantize_tensor on float32 NumPy arrays, one thread (GB/s of fp32 in), best of 3 alternated rounds")
    for (text, shape), gbps in py.items():
        print(f"  {text:10s} {shape:34s} python {gbps:6.3f}   bench codecs {cli[text]:6.3f}   "
              f"python / cli {gbps / cli[text]:.3f}")
    return w


def compressed_tensors_peer(w):
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    torch.set_num_threads(1)
    x = torch.from_numpy(w)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128)

    def peer():
        groups = x.reshape(4096, -1, 128)
        scale, zero = calculate_qparams(groups.amin(dim=2), groups.amax(dim=2), args)
        return quantize(x, scale, zero, args)

    scheme = lowbit.Scheme("int4:g128")
    ours = best_seconds(lambda: lowbit.quantize_tensor(w, scheme))
    theirs = best_seconds(peer, repeats=3)
    print("int4 g128 symmetric, 4096 x 4096, one thread: compressed-tensors (torch) vs lowbit")
    print(f"  compressed-tensors {theirs * 1e3:8.1f} ms   lowbit {ours * 1e3:8.1f} ms   speed-up {theirs / ours:.1f}x")


def logits_overhead():
    # Each Python call is paired with the same call timed inside C++ right after it, so both see the same
    # machine state; the median of the differences is the binding's cost (argument conversion, the GIL, the
    # NumPy array around the result).
    model = lowbit.Model.load(MODEL, threads=1)
    tokens = [model.tokenizer.bos_id]
    py, diffs = [], []
    for _ in range(3000):
        t = time.perf_counter()
        model.logits(tokens)
        elapsed = time.perf_counter() - t
        py.append(elapsed)
        diffs.append(elapsed - model._time_logits(tokens[0], 1))
    print(f"Model.logits, one token, 1 thread, 3000 paired calls: python median {np.median(py) * 1e6:.1f} us, "
          f"overhead over the C++ call median {np.median(diffs) * 1e6:.1f} us")
    # The binding's fixed cost alone: the same entry point with no work (a call, the GIL released and taken).
    calls = 20000
    empty = min(timeit.repeat(lambda: model._time_logits(tokens[0], 0), number=calls, repeat=5)) / calls
    view = min(timeit.repeat(lambda: model.logits, number=calls, repeat=5)) / calls
    print(f"  a bound call that releases the GIL and does nothing: {empty * 1e6:.2f} us "
          f"(attribute lookup alone {view * 1e6:.2f} us)")


def gptq():
    calib = str(ROOT / "data" / "kjv-train.txt")
    recipe = {"method": "gptq", "format": "int4:g64", "calibration": {"file": calib, "samples": 64}}
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for run in range(2):  # alternated, to even out the machine
            t = time.perf_counter()
            card = lowbit.quantize(MODEL, f"{tmp}/py{run}", recipe=recipe, threads=2)
            py = time.perf_counter() - t
            (pathlib.Path(tmp) / "recipe.json").write_text(json.dumps(recipe))
            t = time.perf_counter()
            cli = cli_json("quantize", MODEL, "-o", f"{tmp}/cli{run}", "--recipe", f"{tmp}/recipe.json",
                           "--threads", "2")
            cl = time.perf_counter() - t
            rows.append((py, cl, card["bits_per_weight"], cli["bits_per_weight"]))
    py, cl = min(r[0] for r in rows), min(r[1] for r in rows)
    print(f"GPTQ int4 g64, bundled model, 64 x 256 calibration tokens, 2 threads (best of 2): python {py:.2f} s, "
          f"CLI {cl:.2f} s (python / CLI {py / cl:.3f}); bits/weight {rows[0][2]:.4f} vs {rows[0][3]:.4f}")


if __name__ == "__main__":
    w = codecs()
    compressed_tensors_peer(w)
    logits_overhead()
    gptq()
