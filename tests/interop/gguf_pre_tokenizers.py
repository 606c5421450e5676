#!/usr/bin/env python3
"""Every tokenizer.ggml.pre name lowbit reads, against llama.cpp itself (make test-interop).

llama.cpp's GPT-2 test vocabulary (../shared/tokenizers/ggml-vocab/ggml-vocab-gpt-2.gguf) is
written again under each name with gguf-py, so the same 50k tokens and merges are split by each
family's pre-tokenizer (its regexes, ignore_merges and add-BOS default); the SentencePiece-style
names (Gemma 4's) get a vocabulary of that kind, built from Phi-3.5's tokenizer.json. llama.cpp
(llama-cpp-python, vocabulary only) tokenizes strings with each copy:

    --write F   writes the fixture `make test` checks without Python (tests/data/...): the strings
                (llama.cpp's test strings plus ones aimed at the families' differences: letter case
                runs, scripts, digits, long white space), and llama.cpp's ids (with its add-BOS) per
                name, names giving identical ids grouped.
    (default)   rebuilds the fixture with the pinned llama.cpp, checks it equals the committed one,
                checks lowbit refuses each name it does not implement with an error naming it, then
                tokenizes the KJV and WikiText-2 texts with lowbit and llama.cpp under one name of
                every group, id for id.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import gguf
import llama_cpp

sys.path.insert(0, os.path.dirname(__file__))
from common import check, failures, print_table, run, scratch_folder  # noqa: E402
from hf_tokenizers import EXTRA_STRINGS, llama_cpp_strings, texts  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SHARED = os.path.join(ROOT, "..", "shared")
VOCAB = "ggml-vocab-gpt-2.gguf"
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "data", "gguf_pre_tokenizer_cases.json")

# The names llama.cpp's loader (llama-vocab.cpp of the pinned llama-cpp-python) maps to a regex
# pre-tokenizer, all of which lowbit reads.
SUPPORTED = [
    "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "a.x-4.0", "mellum", "jina-v1-en", "roberta-bpe",
    "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling",
    "llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
    "dbrx", "smaug-bpe",
    "qwen2", "deepseek-r1-qwen", "megrez", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "grok-2",
    "qwen35", "jais-2", "tekken", "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2",
    "deepseek-llm", "deepseek-coder", "deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4", "spark2_5",
    "falcon", "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2",
    "poro-chat", "bloom", "gpt3-finnish", "viking", "chameleon", "bailingmoe", "bailingmoe2", "llada-moe",
    "seed-coder", "ufakzeka", "laguna", "exaone-moe", "minicpm5", "chatglm-bpe", "glm4", "glm5",
]
# Names whose vocabularies are SentencePiece-style BPE (Gemma 4): checked on a gpt2-model GGUF built
# from Phi-3.5's tokenizer.json (U+2581 pieces, byte fallback tokens, merges).
SENTENCEPIECE_STYLE = ["gemma4", "granite-embed-multi-311m"]
SPM_STYLE_SOURCE = "hf/phi-3.5-mini/tokenizer.json"
# Names llama.cpp knows whose splitting lowbit does not implement (hand-written splitters, a
# zero-width regex split, no byte-level encoding): lowbit must refuse them by name.
REFUSED = ["kimi-k2", "afmoe", "superbpe", "sarvam-moe", "whitespace", "tiny_aya", "cohere2moe",
           "youtu", "granite-embed-multi-97m"]

# Aimed at what separates the families: case runs inside words (Tekken, GPT-4o), contractions,
# digit groups, CJK and kana runs (DeepSeek-V3), combining marks (Qwen3.5), punctuation before
# letters, long white space (Jais-2), slashes and line ends, BLOOM's punctuation list.
FAMILY_STRINGS = [
    "HelloWorld iPhone XMLHttpRequest getHTTPResponseCode ABCdef abcDEF",
    "\u00c9COLE \u00e9cole \u00c0BcD \u00fcber\u00c4nderung Stra\u00dfe \u0130stanbul \u01c5emal \u1e9e",
    "I'M SURE YOU'LL SEE it's they're we've I'd you'll 'S 'LL",
    "1 12 123 1234 12345 123456 1234567 1,234,567.89 \u0661\u0662\u0663\u0664 \u2164 \u00bd",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u30ab\u30bf\u30ab\u30ca\u6f22\u5b57\u3067\u3059\u3002\u4e2d\u6587abc\u6df7\u5408",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 "
    "a\u0301e\u0300o\u0302 \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "def f(x):\n    return x**2 // 3  # ok\n\n\tif a<=b and c!=d: pass\r\n",
    "path/to/file.txt https://example.com/a/b?c=d&e=f C:\\dir\\file //comment\n/* block */",
    "a" + " " * 40 + "b" + " " * 9 + "c\t\t\t\td  \n  e" + " " * 600 + "f",
    "Hello, world! Really? Yes... \u201cquoted\u201d \u2018single\u2019 \u2014 dash \u2026 \u3002\uff0c\u3001 "
    "\u0964 \u06d4 \u060c (paren) [bracket] {brace} a|b",
    "$100 +5 <tag> ^caret `tick` ~tilde @at #hash %pct &amp *star =eq _under",
    "<sentinel:12> IMGIMGABZ text  two   three    four",
    "\U0001F600\U0001F44D emoji\U0001F680rocket \u200b\u200dzero width \u00a0nbsp \u3000ideo",
]


def write_vocab(reader, pre, path):
    """The GPT-2 test vocabulary with tokenizer.ggml.pre = pre and every other key as it was."""
    writer = gguf.GGUFWriter(path, arch=reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = pre if name == "tokenizer.ggml.pre" else field.contents()
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, field.types[0], sub_type=sub_type)
    if "tokenizer.ggml.pre" not in reader.fields:
        writer.add_string("tokenizer.ggml.pre", pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def sentencepiece_style_vocab(tokenizer_json, pre, path):
    """A gpt2-model GGUF vocabulary from a SentencePiece-style tokenizer.json (U+2581 pieces, <0xAB>
    byte tokens, merges), as a Gemma 4 GGUF holds one; tests/tokenizer_vocab_test.cc builds the same."""
    with open(tokenizer_json, encoding="utf-8") as f:
        data = json.load(f)
    ids = dict(data["model"]["vocab"])
    added = {t["id"]: t for t in data["added_tokens"]}
    ids.update({t["content"]: i for i, t in added.items()})
    tokens = [None] * (max(ids.values()) + 1)
    for piece, i in ids.items():
        tokens[i] = piece
    assert all(t is not None for t in tokens), "token ids with gaps"
    byte = re.compile(r"<0x[0-9A-F]{2}>")

    def token_type(i, t):
        if i in added:
            return 3 if added[i]["special"] else 4
        return 6 if byte.fullmatch(t) else 1
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    writer = gguf.GGUFWriter(path, arch="gpt2")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([token_type(i, t) for i, t in enumerate(tokens)])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_ids(path, strings):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    try:
        return [llm.tokenize(s.encode("utf-8"), add_bos=True, special=False) for s in strings]
    finally:
        llm.close()


def make_fixture(folder):
    reader = gguf.GGUFReader(os.path.join(SHARED, "tokenizers", "ggml-vocab", VOCAB))
    strings = llama_cpp_strings()[VOCAB][0] + EXTRA_STRINGS + FAMILY_STRINGS
    groups = {}  # ids of every string -> the names giving them
    paths = {}
    for pre in SUPPORTED + REFUSED:
        paths[pre] = os.path.join(folder, f"{pre}.gguf")
        write_vocab(reader, pre, paths[pre])
        if pre in SUPPORTED:
            ids = llama_ids(paths[pre], strings)
            groups.setdefault(json.dumps(ids), []).append(pre)
    cases = [{"names": names, "ids": json.loads(ids)} for ids, names in groups.items()]
    spm_groups = {}
    for pre in SENTENCEPIECE_STYLE:
        paths[pre] = os.path.join(folder, f"{pre}.gguf")
        sentencepiece_style_vocab(os.path.join(SHARED, "tokenizers", SPM_STYLE_SOURCE), pre, paths[pre])
        spm_groups.setdefault(json.dumps(llama_ids(paths[pre], strings)), []).append(pre)
    fixture = {"generated_by": "tests/interop/gguf_pre_tokenizers.py (llama-cpp-python's llama.cpp)",
               "vocab": VOCAB, "strings": strings, "refused": REFUSED, "cases": cases,
               "sentencepiece_style": {"source": SPM_STYLE_SOURCE,
                                       "cases": [{"names": n, "ids": json.loads(i)} for i, n in spm_groups.items()]}}
    return fixture, paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lowbit", default=os.path.join(ROOT, "build", "lowbit"))
    ap.add_argument("--write", help="write the fixture here and stop")
    args = ap.parse_args()
    folder = scratch_folder("lowbit-gguf-pre-")
    fixture, paths = make_fixture(folder)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            dump = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
            f.write(f'{{"generated_by": {dump(fixture["generated_by"])},\n"vocab": {dump(fixture["vocab"])},\n')
            f.write(f'"refused": {dump(fixture["refused"])},\n"strings": [\n')
            f.write(",\n".join(dump(s) for s in fixture["strings"]))
            f.write('\n],\n"cases": [\n' + ",\n".join(dump(c) for c in fixture["cases"]) + "\n],\n")
            f.write(f'"sentencepiece_style": {dump(fixture["sentencepiece_style"])}}}\n')
        print(f"wrote {args.write}: {len(fixture['cases'])} groups of {len(SUPPORTED)} names x "
              f"{len(fixture['strings'])} strings")
        return
    with open(FIXTURE, encoding="utf-8") as f:
        check(json.load(f) == fixture, f"{FIXTURE} differs from what the pinned llama.cpp gives now")

    for pre in REFUSED:
        r = subprocess.run([args.lowbit, "tokenize", "--model", paths[pre], "--text", "x"], capture_output=True,
                           text=True)
        check(r.returncode != 0 and f"'{pre}'" in r.stderr and paths[pre] in r.stderr,
              f"lowbit on tokenizer.ggml.pre '{pre}': rc {r.returncode}, {r.stderr.strip()!r}")

    rows = []
    for case in fixture["cases"] + fixture["sentencepiece_style"]["cases"]:
        pre = case["names"][0]
        llm = llama_cpp.Llama(model_path=paths[pre], vocab_only=True, verbose=False)
        for text_name, text_path in texts().items():
            with open(text_path, "rb") as f:
                theirs = llm.tokenize(f.read(), add_bos=True, special=False)
            ours = json.loads(run(args.lowbit, "tokenize", "--model", paths[pre], "--file", text_path, "--json"))["ids"]
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            same = ours == theirs
            check(same, f"{pre} on {text_name}: lowbit {len(ours)} ids, llama.cpp {len(theirs)}, first difference "
                        f"at {first}")
            rows.append([pre, len(case["names"]), text_name, len(theirs), "yes" if same else f"no (at {first})"])
        llm.close()
    print_table(["pre-tokenizer", "names alike", "text", "llama.cpp ids", "lowbit identical"], rows)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print(f"gguf_pre_tokenizers: all checks passed ({len(SUPPORTED) + len(SENTENCEPIECE_STYLE)} names in "
          f"{len(fixture['cases']) + len(fixture['sentencepiece_style']['cases'])} groups, "
          f"{len(REFUSED)} refused)")


if __name__ == "__main__":
    main()
