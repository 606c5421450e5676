#!/usr/bin/env python3
"""`lowbit imatrix` beside llama.cpp's `llama-imatrix` on the same model and text.

MODEL (a Hugging Face or lowbit folder) is exported to an F32 GGUF; llama-imatrix runs on that file with one
sequence per batch (-b = -ub = --ctx: with several, llama.cpp splits attention per sequence and drops the
products it sees with fewer than 16 rows, so attn_v_b loses rows); `lowbit imatrix` runs on MODEL. The table
gives each entry's counts and the largest relative difference of its means (sum of squares / count). Exit
status 1 when the two files hold different entries or different per-matrix shapes. llama-imatrix comes from
scripts/build-llama-tools.sh; Python needs numpy and gguf (build/interop-venv from scripts/setup-interop.sh).

Usage: scripts/compare_imatrix.py MODEL --calib FILE [--ctx 128] [--chunks 100] [--tokenizer T] [--json]
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def read_imatrix(path):
    """entry -> (sums [n_mat, cols], counts [n_mat]), as llama-quantize reads the file."""
    tensors = {t.name: np.array(t.data, dtype=np.float64).reshape(-1) for t in gguf.GGUFReader(path).tensors}
    out = {}
    for name, sums in tensors.items():
        if name.endswith(".in_sum2"):
            entry = name[: -len(".in_sum2")]
            counts = tensors[entry + ".counts"]
            out[entry] = (sums.reshape(len(counts), -1), counts)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--calib", required=True)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokenizer", help="for MODEL folders without one (lowbit export --tokenizer)")
    ap.add_argument("--lowbit", default=str(ROOT / "build" / "lowbit"))
    ap.add_argument("--llama-imatrix", default=str(ROOT / "build" / "llama-tools" / "bin" / "llama-imatrix"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for tool in (a.lowbit, a.llama_imatrix):
        if not Path(tool).is_file():
            sys.exit(f"compare_imatrix: {tool} not found (make build; scripts/build-llama-tools.sh)")
    tmp = Path(tempfile.mkdtemp(prefix="lowbit-imatrix-"))
    f32, ours, theirs = tmp / "model-F32.gguf", tmp / "lowbit.imatrix.gguf", tmp / "llama.imatrix.gguf"
    tokenizer = ["--tokenizer", a.tokenizer] if a.tokenizer else []
    run = lambda cmd: subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True)
    run([a.lowbit, "export", a.model, "-o", f32, "--type", "F32", *tokenizer])
    run([a.llama_imatrix, "-m", f32, "-f", a.calib, "-c", a.ctx, "-b", a.ctx, "-ub", a.ctx, "--chunks", a.chunks,
         "-t", a.threads, "-o", theirs])
    run([a.lowbit, "imatrix", a.model, "--calib", a.calib, "-o", ours, "--ctx", a.ctx, "--chunks", a.chunks,
         "--threads", a.threads, *tokenizer])
    mine, llama = read_imatrix(ours), read_imatrix(theirs)
    rows, same = [], set(mine) == set(llama)
    for entry in sorted(set(mine) & set(llama)):
        (s1, c1), (s2, c2) = mine[entry], llama[entry]
        if s1.shape != s2.shape:
            same = False
            rows.append({"entry": entry, "shape_lowbit": s1.shape, "shape_llama": s2.shape})
            continue
        m1, m2 = s1 / np.maximum(c1, 1)[:, None], s2 / np.maximum(c2, 1)[:, None]
        rel = float(np.max(np.abs(m1 - m2) / np.maximum(np.abs(m2), 1e-30)))
        rows.append({"entry": entry, "counts_lowbit": c1.astype(int).tolist(), "counts_llama": c2.astype(int).tolist(),
                     "max_rel_diff": rel})
    result = {"only_lowbit": sorted(set(mine) - set(llama)), "only_llama": sorted(set(llama) - set(mine)),
              "entries": rows, "worst": max((r.get("max_rel_diff", 0.0) for r in rows), default=0.0)}
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print("| entry | counts lowbit | counts llama-imatrix | max rel. diff of means |")
        print("|---|---|---|---:|")
        short = lambda c: ", ".join(map(str, c[:4])) + (", ..." if len(c) > 4 else "")
        for r in rows:
            if "max_rel_diff" in r:
                print(f"| {r['entry']} | {short(r['counts_lowbit'])} | {short(r['counts_llama'])} | {r['max_rel_diff']:.2e} |")
            else:
                print(f"| {r['entry']} | shape {r['shape_lowbit']} | shape {r['shape_llama']} | - |")
        print(f"\nonly in lowbit's: {result['only_lowbit'] or 'none'}; only in llama-imatrix's: {result['only_llama'] or 'none'}; "
              f"worst {result['worst']:.2e}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
