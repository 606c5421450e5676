"""What the interop checks share: failure bookkeeping, running lowbit, and lowbit's top-K base file
(`lowbit ppl --kl-base`, eval/compare.cc) written from any engine's logits, so that lowbit measures
KL(engine || lowbit) on the same checkpoint and the same windows."""
import atexit
import ctypes
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

failures = []


def check(ok, what):
    """Records a failed check (the script exits 1 at the end) and says so at once."""
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return ok


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(map(str, args))}\n{r.stderr}")
    return r.stdout


def print_table(header, rows):
    """Left-aligned columns, the header first."""
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))


def lowbit_json(lowbit, *args):
    return json.loads(run(lowbit, *args, "--json"))

_FNV_SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
uint64_t fnv1a64(const unsigned char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
"""
_fnv = None


def scratch_folder(prefix):
    """A temp folder removed when the check exits, however it exits."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def fnv1a(data, h=1469598103934665603):
    """FNV-1a 64 (core/checksum.h) continued from h; in C, as base files run to tens of MB."""
    global _fnv
    if _fnv is None:
        folder = scratch_folder("lowbit-fnv-")
        with open(os.path.join(folder, "fnv.c"), "w") as f:
            f.write(_FNV_SOURCE)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", os.path.join(folder, "fnv.so"),
                        os.path.join(folder, "fnv.c")], check=True)
        _fnv = ctypes.CDLL(os.path.join(folder, "fnv.so")).fnv1a64
        _fnv.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
        _fnv.restype = ctypes.c_uint64
    return _fnv(data, len(data), h)


def write_kl_base(out_path, tokens, bos, ctx, top_k, vocab, logits_of):
    """llama-perplexity's protocol on lowbit's token ids: chunks of `ctx` tokens starting with `bos` (None: as
    they are, for a tokenizer that adds no BOS), scored on their second half. `logits_of(chunk)` returns the engine's [ctx, vocab] logits.
    Writes a version 2 base file (header, checksum of header and records, records) and returns the
    engine's perplexity over the scored positions."""
    chunks = len(tokens) // ctx
    first = ctx // 2
    positions = chunks * (ctx - 1 - first)
    nll, records = 0.0, []
    record = np.dtype([("top", [("id", "<i4"), ("lp", "<f4")], top_k), ("tail", "<f4"), ("target", "<f4")])
    for c in range(chunks):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        if bos is not None:
            chunk[0] = bos
        logits = np.asarray(logits_of(chunk), dtype=np.float64)[first:ctx - 1]  # predicting chunk[first + 1:]
        lp = logits - logits.max(axis=1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
        rows = np.arange(lp.shape[0])[:, None]
        top = np.argpartition(-lp, top_k - 1, axis=1)[:, :top_k]
        top = np.take_along_axis(top, np.argsort(-lp[rows, top], axis=1, kind="stable"), axis=1)
        targets = np.array(chunk[first + 1:])
        target_lp = lp[np.arange(lp.shape[0]), targets]
        nll -= target_lp.sum()
        r = np.zeros(lp.shape[0], dtype=record)
        r["top"]["id"], r["top"]["lp"] = top, lp[rows, top]
        r["tail"] = np.log(np.maximum(1.0 - np.exp(lp[rows, top]).sum(axis=1), 1e-30))
        r["target"] = target_lp
        records.append(r.tobytes())
    write_base_file(out_path, tokens, vocab, ctx, top_k, positions, b"".join(records))
    return math.exp(nll / positions)


def write_base_file(out_path, tokens, vocab, ctx, top_k, positions, body):
    """A version 2 base file: the header, the checksum of header and records, the records (`body`). The token
    checksum covers the whole file lowbit tokenizes, as `lowbit ppl` computes it."""
    header = b"LBKLBASE" + struct.pack("<IIIIQQ", 2, vocab, ctx, top_k, positions,
                                       fnv1a(struct.pack(f"<{len(tokens)}i", *tokens)))
    with open(out_path, "wb") as f:
        f.write(header + struct.pack("<Q", fnv1a(body, fnv1a(header))) + body)


def window_token_ids(lowbit, model, text_path, window_text, ctx, windows):
    """lowbit's token ids of the shortest prefix of `text_path` holding about `windows` windows of `ctx` tokens,
    written to `window_text` (the file lowbit then scores)."""
    with open(text_path, encoding="utf-8") as f:
        text = f.read()

    def tokenize(chars):
        with open(window_text, "w", encoding="utf-8") as f:
            f.write(text[:chars])
        return lowbit_json(lowbit, "tokenize", "--model", model, "--file", window_text)["ids"]

    sample = 20000
    chars_per_token = sample / len(tokenize(sample))
    return tokenize(int(chars_per_token * ctx * (windows + 0.5)))
