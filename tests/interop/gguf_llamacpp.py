#!/usr/bin/env python3
"""GGUF files written by `lowbit export`, checked by their real consumers (make test-interop).

For every file type on the bundled model:
  * llama.cpp's own quantizer (llama_model_quantize, from llama-cpp-python) quantizes the same F32
    GGUF with the same type, with and without an importance matrix: every tensor of lowbit's file
    must have the same ggml type and the same bytes as llama.cpp's.
  * llama.cpp loads lowbit's file and scores the KJV test text (llama-perplexity's chunks); lowbit
    scores the same file against llama.cpp's log-probabilities (`lowbit ppl --kl-base`): the PPLs
    agree within 0.1 %, top-1 agrees at >= 99 % of positions, KL(llama.cpp || lowbit) < 1e-4.
  * gguf-py (llama.cpp's Python package) parses the file, and its reference quantizers give the
    same bytes as lowbit for the types it implements.
llama.cpp's tokenizer must also give lowbit's token ids on the whole text from the vocabulary lowbit
wrote. llama-quantize's --token-embedding-type / --output-tensor-type give the same bytes in both tools.
Calibrated files (GPTQ on the ggml grids) run in llama.cpp as in lowbit; with the vocabulary tables'
types moved as `TABLE_TYPES` says, their KL against the F32 model is at most half llama.cpp's imatrix
quantization of the same types. Prints a table per type; exits 1 on any failure.
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np

import gguf
import llama_cpp

from common import check, failures, lowbit_json, run, write_kl_base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIXES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
         "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"]
# Single tensor types without a llama.cpp mix: every matrix in the type (llama-quantize --pure).
PURE = {"Q3_K": 11, "Q4_K": 14, "Q5_K": 16, "MXFP4": 38}
FTYPE = {"F32": 0, "F16": 1, "BF16": 32, "Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
         "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17,
         "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "TQ1_0": 36, "TQ2_0": 37}
# Calibrated mixes with the vocabulary tables' bits moved, at the mix's file size: the embedding
# (a lookup no calibration reaches) gets the bits GPTQ lets the output matrix do without.
TABLE_TYPES = {"Q4_K_M": ("Q5_K", "Q5_K"), "Q3_K_M": ("Q5_K", "Q4_K")}  # (token_embd, output)
IMATRIX_TYPES = ["Q4_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]
GGUF_PY_QUANTIZERS = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4", "BF16", "F16"}
CTX = 256
TOP_K = 512
def tensors_of(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def quantize_llamacpp(src, dst, ftype, pure, imatrix=None, tables=None):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.pure = pure
    if tables:
        p.token_embedding_type = gguf.GGMLQuantizationType[tables[0]].value
        p.output_tensor_type = gguf.GGMLQuantizationType[tables[1]].value
    p.nthread = 2
    keep = []
    if imatrix:
        entries = (llama_cpp.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, values) in enumerate(sorted(imatrix.items())):
            arr = np.ascontiguousarray(values, dtype=np.float32)
            keep.append(arr)
            entries[i].name = name.encode()
            entries[i].data = arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            entries[i].size = arr.size
        entries[len(imatrix)].name = None
        p.imatrix = entries
        keep.append(entries)
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize({src}, ftype {ftype}) failed: {rc}")


def read_imatrix_means(path):
    """llama-quantize's reading of an imatrix GGUF: in_sum2 / counts per column, each matrix by its own count."""
    r = gguf.GGUFReader(path)
    t = {x.name: np.array(x.data, dtype=np.float32).reshape(-1) for x in r.tensors}
    out = {}
    for name, sums in t.items():
        if name.endswith(".in_sum2"):
            base = name[: -len(".in_sum2")]
            counts = t[base + ".counts"]  # one per matrix (a MoE layer's ffn_*_exps: per expert)
            per = sums.reshape(len(counts), -1)
            out[base] = np.concatenate([row / c if c > 0 else np.ones_like(row) for row, c in zip(per, counts)])
    return out


def compare_tensors(ours, theirs, label):
    """Every tensor: same type, same bytes. Returns the number of identical tensors."""
    a, b = tensors_of(ours), tensors_of(theirs)
    check(set(a) == set(b), f"{label}: tensor names differ: {sorted(set(a) ^ set(b))}")
    same = 0
    for name in sorted(set(a) & set(b)):
        ta, tb = a[name], b[name]
        if not check(ta.tensor_type == tb.tensor_type,
                     f"{label}: {name} is {ta.tensor_type.name} in lowbit's file, {tb.tensor_type.name} in llama.cpp's"):
            continue
        if check(np.array_equal(np.asarray(ta.data).view(np.uint8), np.asarray(tb.data).view(np.uint8)),
                 f"{label}: {name} ({ta.tensor_type.name}) bytes differ from llama.cpp's"):
            same += 1
    return same, len(a)


class LlamaCppScorer:
    """llama-perplexity's protocol on lowbit's token ids, written as a lowbit --kl-base file."""

    def __init__(self, tokens, bos):
        self.tokens, self.bos = tokens, bos
        self.chunks = len(tokens) // CTX

    def write_base(self, model_path, out_path):
        llm = llama_cpp.Llama(model_path=model_path, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, logits_all=True,
                              n_threads=2, verbose=False)

        def logits(chunk):
            llm.reset()
            llm.eval(chunk)
            return np.array(llm.scores[:CTX], dtype=np.float64)

        ppl = write_kl_base(out_path, self.tokens, self.bos, CTX, TOP_K, llm.n_vocab(), logits)
        del llm
        return ppl


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lowbit", default=os.path.join(ROOT, "build", "lowbit"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-llama-7m"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "kjv-test.txt"))
    ap.add_argument("--types", default=",".join(MIXES + list(PURE)))
    ap.add_argument("--json", help="write the measured table here")
    ap.add_argument("--quality", action="store_true",
                    help="also measure each file's KL / top-1 against the F32 model (the closing-note table; slower)")
    args = ap.parse_args()
    lowbit = args.lowbit
    types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    tmp = tempfile.mkdtemp(prefix="lowbit-gguf-interop-")
    f32 = os.path.join(tmp, "model-F32.gguf")
    run(lowbit, "export", args.model, "-o", f32, "--type", "F32")

    # The vocabulary lowbit wrote tokenizes the text in llama.cpp exactly as lowbit does.
    tokens = lowbit_json(lowbit, "tokenize", "--model", f32, "--file", args.text)["ids"]
    vocab_llm = llama_cpp.Llama(model_path=f32, vocab_only=True, verbose=False)
    with open(args.text, "rb") as f:
        theirs = vocab_llm.tokenize(f.read(), add_bos=True, special=False)
    if theirs != tokens:
        first = next((i for i, (a, b) in enumerate(zip(theirs, tokens)) if a != b), min(len(theirs), len(tokens)))
        check(False, f"llama.cpp tokenizes {args.text} into {len(theirs)} ids, lowbit into {len(tokens)}; "
                     f"first difference at {first}")
    bos = vocab_llm.token_bos()
    del vocab_llm
    print(f"tokenizer: {len(tokens)} ids of {args.text} identical in llama.cpp and lowbit", flush=True)

    imatrix = os.path.join(tmp, "imatrix.gguf")
    run(lowbit, "imatrix", args.model, "--calib", os.path.join(ROOT, "data", "kjv-train.txt"), "-o", imatrix,
        "--ctx", "256", "--chunks", "64")
    means = read_imatrix_means(imatrix)

    # KL against the F32 model through a stored top-K base file: one F32 pass, not one per type.
    f32_base = os.path.join(tmp, "f32.base")
    run(lowbit, "ppl", "--model", f32, "--text", args.text, "--ctx", CTX, "--save-base", f32_base, "--top-k", TOP_K)

    def kl_vs_f32(path):
        return lowbit_json(lowbit, "ppl", "--model", path, "--text", args.text, "--ctx", CTX, "--kl-base", f32_base)["kl"]

    def versus_f32(path):
        if not args.quality:
            return {"kld_mean": math.nan, "top1_agreement": math.nan}
        return kl_vs_f32(path)

    # llama-quantize's --token-embedding-type / --output-tensor-type, past the mix: the same tensors.
    for t, tables in TABLE_TYPES.items():
        ours = os.path.join(tmp, f"lowbit-{t}-tables.gguf")
        theirs = os.path.join(tmp, f"llamacpp-{t}-tables.gguf")
        run(lowbit, "export", args.model, "-o", ours, "--type", t, "--imatrix", imatrix,
            "--token-embedding-type", tables[0].lower(), "--output-tensor-type", tables[1])
        quantize_llamacpp(f32, theirs, FTYPE[t], False, means, tables)
        same, total = compare_tensors(ours, theirs, f"{t} token_embd {tables[0]} output {tables[1]}")
        print(f"{t} + imatrix, token_embd {tables[0]}, output {tables[1]}: same bytes as llama.cpp {same}/{total}",
              flush=True)
        os.remove(ours)
        os.remove(theirs)

    scorer = LlamaCppScorer(tokens, bos)
    rows = []
    for t in types:
        pure = t in PURE
        ftype = PURE[t] if pure else FTYPE[t]
        ours = os.path.join(tmp, f"lowbit-{t}.gguf")
        exported = lowbit_json(lowbit, "export", args.model, "-o", ours, "--type", t)
        theirs = os.path.join(tmp, f"llamacpp-{t}.gguf")
        quantize_llamacpp(f32, theirs, ftype, pure)
        same, total = compare_tensors(ours, theirs, t)

        # gguf-py parses the file; its quantizers match ours; its dequantizers match llama.cpp's.
        reader = gguf.GGUFReader(ours)
        check(reader.fields["general.architecture"].contents() == "llama", f"{t}: general.architecture")
        check(reader.fields["general.file_type"].contents() == ftype, f"{t}: general.file_type")
        f32_tensors = tensors_of(f32)
        for tensor in reader.tensors:
            qtype = tensor.tensor_type
            if qtype.name in GGUF_PY_QUANTIZERS:
                ref = gguf.quants.quantize(np.asarray(f32_tensors[tensor.name].data, dtype=np.float32), qtype)
                check(np.array_equal(ref.view(np.uint8).reshape(-1), np.asarray(tensor.data).view(np.uint8).reshape(-1)),
                      f"{t}: gguf-py's {qtype.name} quantizer gives other bytes for {tensor.name}")

        base = os.path.join(tmp, f"llamacpp-{t}.base")
        ppl_llamacpp = scorer.write_base(ours, base)
        kl = lowbit_json(lowbit, "ppl", "--model", ours, "--text", args.text, "--ctx", str(CTX), "--kl-base", base)
        agree = kl["kl"]
        quality = versus_f32(ours)
        row = {"type": t, "bytes": exported["file_bytes"], "bpw": exported["bits_per_weight"],
               "identical_tensors": f"{same}/{total}", "ppl_llamacpp": ppl_llamacpp, "ppl_lowbit": kl["ppl"],
               "kl_llamacpp_lowbit": agree["kld_mean"], "top1_llamacpp_lowbit": agree["top1_agreement"],
               "kl_vs_f32": quality["kld_mean"], "top1_vs_f32": quality["top1_agreement"]}
        check(abs(kl["ppl"] / ppl_llamacpp - 1) < 1e-3, f"{t}: PPL lowbit {kl['ppl']:.4f} vs llama.cpp {ppl_llamacpp:.4f}")
        check(agree["top1_agreement"] >= 0.99, f"{t}: top-1 agreement {agree['top1_agreement']:.4f} < 0.99")
        check(agree["kld_mean"] < 1e-4, f"{t}: KL(llama.cpp || lowbit) {agree['kld_mean']:.2e} >= 1e-4")

        if t in IMATRIX_TYPES:
            ours_im = os.path.join(tmp, f"lowbit-{t}-imatrix.gguf")
            theirs_im = os.path.join(tmp, f"llamacpp-{t}-imatrix.gguf")
            run(lowbit, "export", args.model, "-o", ours_im, "--type", t, "--imatrix", imatrix)
            quantize_llamacpp(f32, theirs_im, ftype, pure, means)
            same_im, total_im = compare_tensors(ours_im, theirs_im, f"{t}+imatrix")
            q_im = versus_f32(ours_im)
            row.update({"identical_tensors_imatrix": f"{same_im}/{total_im}", "kl_vs_f32_imatrix": q_im["kld_mean"]})
        rows.append(row)
        print(f"{t:7s} {row['bytes']:>9d} B {row['bpw']:7.4f} bpw  same bytes as llama.cpp {row['identical_tensors']:>6s}"
              f"{'  +imatrix ' + row['identical_tensors_imatrix'] if 'identical_tensors_imatrix' in row else ''}  "
              f"PPL llama.cpp {ppl_llamacpp:8.4f} lowbit {kl['ppl']:8.4f}  KL {agree['kld_mean']:.2e} "
              f"top-1 {agree['top1_agreement']:.4f}"
              + (f"  vs F32: KL {quality['kld_mean']:.5f}" if args.quality else "")
              + (f" (imatrix {row['kl_vs_f32_imatrix']:.5f})" if args.quality and 'kl_vs_f32_imatrix' in row else ""),
              flush=True)
        for path in (theirs, base):
            os.remove(path)

    # Calibrated GGUF (GPTQ / AWQ on the ggml grids: `quantize --save-as gguf:Q4_0`, `export --calib`)
    # runs in llama.cpp as it runs in lowbit.
    calib = os.path.join(ROOT, "data", "kjv-train.txt")
    calibrated_runs = {
        "gptq Q4_0": [lowbit, "quantize", args.model, "--method", "gptq", "--save-as", "gguf:Q4_0", "--calib", calib],
        "awq Q4_0": [lowbit, "quantize", args.model, "--method", "awq", "--save-as", "gguf:Q4_0", "--calib", calib],
        "gptq Q4_K_M": [lowbit, "export", args.model, "--type", "Q4_K_M", "--calib", calib],
        "gptq Q3_K_M": [lowbit, "export", args.model, "--type", "Q3_K_M", "--calib", calib],
    }
    for t, tables in TABLE_TYPES.items():
        calibrated_runs[f"gptq {t} tables"] = [lowbit, "export", args.model, "--type", t, "--calib", calib,
                                               "--token-embedding-type", tables[0], "--output-tensor-type", tables[1]]
    for method, command in calibrated_runs.items():
        calibrated = os.path.join(tmp, "lowbit-" + method.replace(" ", "-") + ".gguf")
        run(*command, "-o", calibrated)
        base = os.path.join(tmp, "llamacpp-calibrated.base")
        ppl_llamacpp = scorer.write_base(calibrated, base)
        agree = lowbit_json(lowbit, "ppl", "--model", calibrated, "--text", args.text, "--ctx", str(CTX),
                            "--kl-base", base)
        label = method
        check(abs(agree["ppl"] / ppl_llamacpp - 1) < 1e-3, f"{label}: PPL lowbit {agree['ppl']:.4f} vs llama.cpp {ppl_llamacpp:.4f}")
        check(agree["kl"]["top1_agreement"] >= 0.99, f"{label}: top-1 agreement {agree['kl']['top1_agreement']:.4f}")
        check(agree["kl"]["kld_mean"] < 1e-4, f"{label}: KL(llama.cpp || lowbit) {agree['kl']['kld_mean']:.2e}")
        row = {"type": label, "bytes": os.path.getsize(calibrated), "ppl_llamacpp": ppl_llamacpp,
               "ppl_lowbit": agree["ppl"], "kl_llamacpp_lowbit": agree["kl"]["kld_mean"],
               "top1_llamacpp_lowbit": agree["kl"]["top1_agreement"]}
        note = ""
        if method.endswith(" tables"):
            # The figure: at most half llama.cpp's imatrix KL, same tensor types, same file size.
            t = method.split()[1]
            theirs = os.path.join(tmp, f"llamacpp-{t}-imatrix-tables.gguf")
            quantize_llamacpp(f32, theirs, FTYPE[t], False, means, TABLE_TYPES[t])
            ours_kl, theirs_kl = kl_vs_f32(calibrated)["kld_mean"], kl_vs_f32(theirs)["kld_mean"]
            check(os.path.getsize(theirs) == row["bytes"], f"{label}: {row['bytes']} bytes, llama.cpp's "
                                                           f"{os.path.getsize(theirs)}")
            check(ours_kl <= 0.5 * theirs_kl, f"{label}: KL vs F32 {ours_kl:.3e} > 0.5 x llama.cpp imatrix {theirs_kl:.3e}")
            row.update({"kl_vs_f32": ours_kl, "kl_vs_f32_llamacpp_imatrix": theirs_kl})
            note = f"  vs F32: KL {ours_kl:.3e}, llama.cpp imatrix {theirs_kl:.3e} ({ours_kl / theirs_kl:.2f}x)"
            os.remove(theirs)
        elif args.quality:
            quality = versus_f32(calibrated)
            row.update({"kl_vs_f32": quality["kld_mean"], "top1_vs_f32": quality["top1_agreement"]})
            note = f"  vs F32: KL {quality['kld_mean']:.5f}"
        rows.append(row)
        print(f"{label:11s} {row['bytes']:>9d} B  PPL llama.cpp {ppl_llamacpp:8.4f} lowbit {agree['ppl']:8.4f}  "
              f"KL {agree['kl']['kld_mean']:.2e} top-1 {agree['kl']['top1_agreement']:.4f}" + note, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    if failures:
        print(f"\n{len(failures)} failure(s); files kept in {tmp}")
        sys.exit(1)
    shutil.rmtree(tmp)
    print(f"\nall {len(types)} GGUF types: llama.cpp and gguf-py agree with lowbit")


if __name__ == "__main__":
    main()
