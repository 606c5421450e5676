#!/usr/bin/env python3
"""lowbit beside llama.cpp on the same GGUF files, same threads, alternated rounds.

Decode: `llama-bench -p 0 -n N` against `lowbit bench decode --batch 1 --ctx C --steps N`; prefill:
`llama-bench -p P -n 0` against `lowbit bench prefill --ctx P`. Each round runs both engines on one file
before the next file, so a machine whose bandwidth drifts moves both alike; the table gives the median of
the rounds and lowbit / llama.cpp. llama-bench comes from scripts/build-llama-tools.sh.

--avx2: both engines held to AVX2 on this CPU (what a laptop without AVX-512 runs): lowbit under LOWBIT_CPU=avx2,
llama.cpp from `scripts/build-llama-tools.sh --avx2`.

Usage: scripts/bench_vs_llamacpp.py FILE.gguf... [--rounds 3] [--threads 2] [--avx2] [--json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama_tps(bench, model, threads, prompt, gen):
    rows = run_json([str(bench), "-m", model, "-t", str(threads), "-p", str(prompt), "-n", str(gen), "-r", "1", "-o", "json"])
    return rows[0]["avg_ts"]


def lowbit_tps(lowbit, model, threads, mode, ctx, steps):
    cmd = [str(lowbit), "bench", mode, "--model", model, "--threads", str(threads), "--ctx", str(ctx), "--json"]
    cmd += ["--batch", "1", "--steps", str(steps)] if mode == "decode" else ["--batch", "1"]
    return run_json(cmd)[0]["tokens_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=256, help="prefill length (llama-bench -p)")
    ap.add_argument("--gen", type=int, default=64, help="decode steps (llama-bench -n)")
    ap.add_argument("--ctx", type=int, default=64, help="lowbit decode: context before the timed steps")
    ap.add_argument("--lowbit", default=str(ROOT / "build" / "lowbit"))
    ap.add_argument("--llama-bench", help="default: build/llama-tools[-avx2]/bin/llama-bench")
    ap.add_argument("--avx2", action="store_true", help="both engines held to AVX2")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.llama_bench is None:
        a.llama_bench = str(ROOT / "build" / ("llama-tools-avx2" if a.avx2 else "llama-tools") / "bin" / "llama-bench")
    if a.avx2:
        os.environ["LOWBIT_CPU"] = "avx2"  # lowbit's runs inherit it
    for tool in (a.lowbit, a.llama_bench):
        if not Path(tool).is_file():
            sys.exit(f"bench_vs_llamacpp: {tool} not found (make build; scripts/build-llama-tools.sh"
                     f"{' --avx2' if a.avx2 else ''})")
    samples = {f: {k: [] for k in ("llama_tg", "lowbit_tg", "llama_pp", "lowbit_pp")} for f in a.files}
    for r in range(a.rounds):
        for f in a.files:
            s = samples[f]
            s["llama_tg"].append(llama_tps(a.llama_bench, f, a.threads, 0, a.gen))
            s["lowbit_tg"].append(lowbit_tps(a.lowbit, f, a.threads, "decode", a.ctx, a.gen))
            s["llama_pp"].append(llama_tps(a.llama_bench, f, a.threads, a.prompt, 0))
            s["lowbit_pp"].append(lowbit_tps(a.lowbit, f, a.threads, "prefill", a.prompt, 0))
            print(f"round {r + 1}/{a.rounds} {Path(f).name}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in s.items()),
                  file=sys.stderr, flush=True)
    rows = []
    for f, s in samples.items():
        m = {k: statistics.median(v) for k, v in s.items()}
        rows.append({"file": Path(f).name, **m, "decode_ratio": m["lowbit_tg"] / m["llama_tg"],
                     "prefill_ratio": m["lowbit_pp"] / m["llama_pp"]})
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"| file | llama.cpp tg{a.gen} | lowbit decode | ratio | llama.cpp pp{a.prompt} | lowbit prefill | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['file']} | {r['llama_tg']:.1f} | {r['lowbit_tg']:.1f} | {r['decode_ratio']:.2f}x "
              f"| {r['llama_pp']:.1f} | {r['lowbit_pp']:.1f} | {r['prefill_ratio']:.2f}x |")
    print(f"\ntokens/s, median of {a.rounds} alternated rounds, {a.threads} threads"
          f"{', both engines held to AVX2' if a.avx2 else ''}")


if __name__ == "__main__":
    main()
