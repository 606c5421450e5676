"""lowbit's tokenizer.json reader against the `tokenizers` library (what transformers' AutoTokenizer
runs) and llama.cpp's test vectors.

Also the other way: the Hugging Face files lowbit writes from each GGUF vocabulary, read by the
`tokenizers` library (tokenizer.json) and SentencePiece (tokenizer.model).

Cases: Phi-3.5's real tokenizer.json (SentencePiece-style BPE with byte fallback), the same file
rewritten the way newer Llama/Mistral files are (Metaspace pre-tokenizer and decoder), and
tokenizer.json files built from llama.cpp's GGUF vocabularies (byte-level BPE) with the
pre-tokenizer of each family: GPT-2, Falcon, StarCoder, Refact, MPT, DeepSeek-LLM, and the Llama-3
and Qwen2 split regexes (with NFC for Qwen2) over the GPT-2 vocabulary.

    --write F   writes the fixture that `make test` checks without Python (tests/data/...): the
                case specs, the strings (llama.cpp's test strings plus lowbit's own) and the
                library's ids for each.
    (default)   rebuilds the fixture with the pinned library, checks it equals the committed one,
                then tokenizes the KJV and WikiText-2 texts with lowbit and the library, id for id,
                and reports tokens/s of both.
"""
import argparse
import copy
import json
import os
import shutil
import sys
import time

import gguf
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(__file__))
from common import check, failures, print_table, run, scratch_folder  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SHARED = os.path.join(ROOT, "..", "shared")
VOCABS = os.path.join(SHARED, "tokenizers", "ggml-vocab")
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "data", "hf_tokenizer_cases.json")

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
GPT2_NO_TAIL = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's list for deepseek-llm (from DeepSeek's tokenizer.json), in escapes: several of its
# characters are compatibility singletons that an editor's NFC would silently change.
DEEPSEEK_LLM = [
    "[\r\n]",
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
]


def split(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def splits_then_bytes(patterns):
    return {"type": "Sequence", "pretokenizers": [split(p) for p in patterns] + [byte_level(False)]}


# name -> (GGUF vocabulary or None for Phi-3.5, what replaces the file's stages)
CASES = {
    "gpt-2": ("ggml-vocab-gpt-2.gguf", {"pre_tokenizer": byte_level(True)}),
    "mpt": ("ggml-vocab-mpt.gguf", {"pre_tokenizer": byte_level(True)}),
    "falcon": ("ggml-vocab-falcon.gguf", {"pre_tokenizer": splits_then_bytes(
        [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_NO_TAIL, "[0-9][0-9][0-9]"])}),
    "starcoder": ("ggml-vocab-starcoder.gguf", {"pre_tokenizer": splits_then_bytes([r"\p{N}", GPT2_NO_TAIL])}),
    "refact": ("ggml-vocab-refact.gguf", {"pre_tokenizer": splits_then_bytes([r"\p{N}", GPT2_NO_TAIL])}),
    "deepseek-llm": ("ggml-vocab-deepseek-llm.gguf", {"pre_tokenizer": splits_then_bytes(DEEPSEEK_LLM)}),
    "llama3-split": ("ggml-vocab-gpt-2.gguf", {"pre_tokenizer": splits_then_bytes([LLAMA3])}),
    "qwen2-split-nfc": ("ggml-vocab-gpt-2.gguf", {"normalizer": {"type": "NFC"},
                                                  "pre_tokenizer": splits_then_bytes([QWEN2])}),
    "phi-3.5": (None, {}),
    # The fuzz seeds, small files that reach the rarer components: added tokens with lstrip/rstrip/
    # single_word, ignore_merges, fused unknowns, Lowercase/Strip/NFC, Digits, Punctuation,
    # Metaspace with split, a Sequence post-processor.
    "seed-byte-level": ("fuzz/corpus/hf_tokenizer/byte_level.json", {}),
    "seed-sentencepiece-style": ("fuzz/corpus/hf_tokenizer/sentencepiece_style.json", {}),
    "seed-metaspace": ("fuzz/corpus/hf_tokenizer/metaspace.json", {}),
    "phi-3.5-metaspace": (None, {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}}),
}

# Other regexes over the GPT-2 vocabulary: no llama.cpp vectors to compare with.
SPLIT_VARIANTS = {"llama3-split", "qwen2-split-nfc"}

# Beyond llama.cpp's strings: added tokens in text (special, with lstrip/rstrip), normalization
# forms, scripts and digits the regexes treat differently, runs of white space and newlines.
EXTRA_STRINGS = [
    "The thin 123 in<|eot_id|>  x </s> <tool> \u00e9 a<tool>b <|begin_of_text|>",
    "  Hello,, world!! 4567 \u00c9COLE e\u0301 end  ",
    "Hello<|endoftext|>world <|endoftext|> again",
    "<|end|>\n<|user|> hi <|assistant|>",
    "caf\u0065\u0301 vs caf\u00e9, \uff21\uff22 \u00bd \ufb01",
    "1234567 digits 3.14159 \u0661\u0662\u0663 \u2163",
    "I'M SURE YOU'LL SEE WE'D",
    "  leading\n\n\n  lines\r\n\ttabs \u3000ideographic\u00a0nbsp",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \U0001F600\U0001F44D",
    "</s> <s>in the middle</s>",
]


def llama_cpp_strings():
    """llama.cpp's test-tokenizer-0 inputs (the same 46 in every .inp file), with their .out ids."""
    out = {}
    for name in sorted(os.listdir(VOCABS)):
        if not name.endswith(".gguf"):
            continue
        with open(os.path.join(VOCABS, name + ".inp"), encoding="utf-8", newline="") as f:
            inputs = f.read().split("\n__ggml_vocab_test__\n")[:-1]
        with open(os.path.join(VOCABS, name + ".out")) as f:
            lines = f.read().split("\n")
        out[name] = (inputs, [[int(t) for t in line.split()] for line in lines[:len(inputs)]])
    return out


def tokenizer_json_from_gguf(path):
    """The parts of a tokenizer.json that a GGUF byte-level vocabulary holds."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": ty == 3}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}


def build_case(name, folder):
    """Writes the case's tokenizer.json into `folder`; returns its path."""
    vocab, stages = CASES[name]
    if vocab is None or vocab.endswith(".json"):
        path = (os.path.join(SHARED, "tokenizers", "hf", "phi-3.5-mini", "tokenizer.json") if vocab is None
                else os.path.join(ROOT, vocab))
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    else:
        data = tokenizer_json_from_gguf(os.path.join(VOCABS, vocab))
    data.update(copy.deepcopy(stages))
    os.makedirs(os.path.join(folder, name), exist_ok=True)
    path = os.path.join(folder, name, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return path


def make_fixture(folder):
    vectors = llama_cpp_strings()
    strings = next(iter(vectors.values()))[0] + EXTRA_STRINGS
    cases = []
    for name, (vocab, stages) in CASES.items():
        tok = Tokenizer.from_file(build_case(name, folder))
        ids = [tok.encode(s, add_special_tokens=False).ids for s in strings]
        # Special tokens decode to nothing, as transformers' decode(skip_special_tokens=True) renders
        # them; the library alone keeps special tokens whose `normalized` is true.
        special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        decoded = [tok.decode([t for t in i if t not in special], skip_special_tokens=False) for i in ids]
        case = {"name": name, "vocab": vocab, "stages": stages, "ids": ids, "decoded": decoded}
        if vocab is not None and vocab.endswith(".gguf") and name not in SPLIT_VARIANTS:
            # The library agrees with llama.cpp's vectors on llama.cpp's strings.
            inputs, expected = vectors[vocab]
            agree = sum(ids[i] == expected[i] for i in range(len(inputs)))
            check(agree == len(inputs), f"{name}: the tokenizers library matches llama.cpp's vectors on "
                                        f"{agree}/{len(inputs)} strings")
        cases.append(case)
    return {"generated_by": "tests/interop/hf_tokenizers.py (tokenizers library)", "strings": strings, "cases": cases}


def texts():
    kjv = os.path.join(SHARED, "data", "kjv")
    kjv_file = os.path.join(kjv, sorted(f for f in os.listdir(kjv) if f.endswith(".txt"))[0])
    return {"kjv": kjv_file, "wikitext-2": os.path.join(SHARED, "data", "wikitext-2", "wiki.test.raw")}


def check_converted(lowbit, folder):
    """SentencePiece tokenizer.model files converted to tokenizer.json by transformers (as a user's
    AutoTokenizer.save_pretrained does): lowbit on the tokenizer.json, the library on it, and
    lowbit's SentencePiece path on the tokenizer.model give the same ids; and the bundled model
    with only the tokenizer.json has the same perplexity as with its tokenizer.model."""
    from transformers import AutoTokenizer
    rows = []
    for name, src in [("kjv-llama-7m", os.path.join(SHARED, "models", "kjv-llama-7m")),
                      ("llama-2", os.path.join(SHARED, "tokenizers", "llama2"))]:
        slow = os.path.join(folder, f"{name}-slow")
        os.makedirs(slow, exist_ok=True)
        shutil.copy(os.path.join(src, "tokenizer.model"), slow)
        config = os.path.join(src, "tokenizer_config.json")
        if os.path.exists(config):
            shutil.copy(config, slow)
        else:
            with open(os.path.join(slow, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True}, f)
        fast = os.path.join(folder, f"{name}-fast")
        AutoTokenizer.from_pretrained(slow).save_pretrained(fast)
        tok = Tokenizer.from_file(os.path.join(fast, "tokenizer.json"))
        for text_name, text_path in texts().items():
            with open(text_path, encoding="utf-8", newline="") as f:
                theirs = tok.encode(f.read(), add_special_tokens=True).ids
            ours = json.loads(run(lowbit, "tokenize", "--model", fast, "--file", text_path, "--json"))["ids"]
            spm = json.loads(run(lowbit, "tokenize", "--model", os.path.join(slow, "tokenizer.model"), "--file",
                                 text_path, "--json"))["ids"]
            check(ours == theirs, f"{name} tokenizer.json on {text_name}: lowbit differs from the tokenizers library")
            # Not a check: the converter's merge-rank BPE can split a rare piece differently from
            # SentencePiece's score order (WikiText-2's "  hr": '▁▁' 'hr' against '▁' '▁hr').
            differing = sum(a != b for a, b in zip(spm, theirs)) + abs(len(spm) - len(theirs))
            rows.append([name, text_name, len(theirs), "yes" if ours == theirs else "no", differing])
    print_table(["converted tokenizer.model", "text", "tokens (BOS too)", "lowbit = tokenizers",
                 "SentencePiece ids that differ"], rows)

    model = os.path.join(SHARED, "models", "kjv-llama-7m")
    json_only = os.path.join(folder, "kjv-json-only")
    os.makedirs(json_only, exist_ok=True)
    for f in os.listdir(model):
        if f not in ("tokenizer.model", "tokenizer_config.json"):
            os.symlink(os.path.join(model, f), os.path.join(json_only, f))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(folder, "kjv-llama-7m-fast", f), json_only)
    text = os.path.join(SHARED, "data", "kjv", "kjv-test.txt")
    ppl = [json.loads(run(lowbit, "ppl", "--model", m, "--text", text, "--ctx", "128", "--json"))["ppl"]
           for m in (model, json_only)]
    check(ppl[0] == ppl[1], f"kjv-llama-7m: PPL {ppl[0]} with tokenizer.model, {ppl[1]} with tokenizer.json only")
    print(f"kjv-llama-7m on kjv-test.txt: PPL {ppl[0]:.4f} with tokenizer.model, {ppl[1]:.4f} with only tokenizer.json")


def check_written_from_gguf(lowbit, folder):
    """The Hugging Face files lowbit writes for each of llama.cpp's GGUF vocabularies (`lowbit tokenize
    --save-hf`, as `convert` of a GGUF writes them): the `tokenizers` library on each tokenizer.json and
    SentencePiece on the llama-spm tokenizer.model give llama.cpp's ids for its test strings, and the ids
    lowbit gives the GGUF file for the KJV and WikiText-2 texts; transformers' AutoTokenizer on the
    folder is reported beside them."""
    import sentencepiece
    from transformers import AutoTokenizer
    rows = []
    for name, (inputs, expected) in llama_cpp_strings().items():
        out = os.path.join(folder, "from-gguf", name)
        run(lowbit, "tokenize", "--model", os.path.join(VOCABS, name), "--save-hf", out)
        spm = os.path.exists(os.path.join(out, "tokenizer.model"))
        if spm:
            processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
            encode = processor.encode  # noqa: E731
        else:
            tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
            encode = lambda t: tok.encode(t, add_special_tokens=False).ids  # noqa: E731
        auto = AutoTokenizer.from_pretrained(out)
        matched = sum(encode(t) == ids for t, ids in zip(inputs, expected))
        auto_matched = sum(auto.encode(t, add_special_tokens=False) == ids for t, ids in zip(inputs, expected))
        check(matched == len(inputs), f"{name}: the written {'tokenizer.model' if spm else 'tokenizer.json'} gives "
                                      f"llama.cpp's ids for {matched} of {len(inputs)} strings")
        same_texts = 0
        for text_name, text_path in texts().items():
            with open(text_path, encoding="utf-8", newline="") as f:
                theirs = encode(f.read())
            ours = json.loads(run(lowbit, "tokenize", "--model", os.path.join(VOCABS, name), "--file", text_path,
                                  "--no-bos", "--json"))["ids"]
            check(ours == theirs, f"{name} on {text_name}: the written files and the GGUF file give different ids")
            same_texts += ours == theirs
        rows.append([name, "tokenizer.model (sentencepiece)" if spm else "tokenizer.json (tokenizers)",
                     f"{matched}/{len(inputs)}", f"{same_texts}/{len(texts())}", f"{auto_matched}/{len(inputs)}"])
    print_table(["GGUF vocabulary", "written as, read by", "llama.cpp's strings", "KJV, WikiText-2 = GGUF",
                 "AutoTokenizer (not checked)"], rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowbit", default="build/lowbit")
    ap.add_argument("--write", help="write the fixture here and stop")
    args = ap.parse_args()
    folder = scratch_folder("lowbit-hf-tok-")
    fixture = make_fixture(folder)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            # One line per string and per case: small diffs when the library changes.
            dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
            f.write(f'{{"generated_by": {dump(fixture["generated_by"])},\n"strings": [\n')
            f.write(",\n".join(dump(s) for s in fixture["strings"]))
            f.write('\n],\n"cases": [\n' + ",\n".join(dump(c) for c in fixture["cases"]) + "\n]}\n")
        print(f"wrote {args.write}: {len(fixture['cases'])} cases x {len(fixture['strings'])} strings")
        return
    with open(FIXTURE, encoding="utf-8") as f:
        check(json.load(f) == fixture, f"{FIXTURE} differs from what the pinned tokenizers library gives now")

    rows = []
    for name in CASES:
        if name.startswith("seed-"):  # toy vocabularies: their strings are the test
            continue
        path = os.path.join(folder, name, "tokenizer.json")
        tok = Tokenizer.from_file(path)
        for text_name, text_path in texts().items():
            with open(text_path, encoding="utf-8", newline="") as f:  # keep \r\n as lowbit reads it
                text = f.read()
            timed = text_name == "wikitext-2"  # speed on the larger text only
            their_s = []
            for _ in range(3 if timed else 1):
                start = time.perf_counter()
                theirs = tok.encode(text, add_special_tokens=False).ids
                their_s.append(time.perf_counter() - start)
            ours = json.loads(run(args.lowbit, "tokenize", "--model", path, "--file", text_path, "--no-bos", "--json"))["ids"]
            same = ours == theirs
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            check(same, f"{name} on {text_name}: lowbit {len(ours)} ids, tokenizers {len(theirs)}, first difference "
                        f"at {first}")
            speed = ["", "", ""]
            if timed:
                bench = json.loads(run(args.lowbit, "bench", "tokenize", "--model", path, "--file", text_path, "--json"))
                ours_tps, theirs_tps = bench["tokens_per_s"], len(theirs) / min(their_s)
                speed = [f"{ours_tps / 1e3:.0f}", f"{theirs_tps / 1e3:.0f}", f"{ours_tps / theirs_tps:.2f}x"]
            rows.append([name, text_name, len(theirs), "yes" if same else f"no (at {first})"] + speed)
    print_table(["tokenizer", "text", "tokens", "identical", "lowbit ktok/s", "tokenizers ktok/s", "ratio"], rows)
    print("(encode only, one thread, best of 3 each: `lowbit bench tokenize` and Tokenizer.encode)")
    check_converted(args.lowbit, folder)
    check_written_from_gguf(args.lowbit, folder)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("hf_tokenizers: all checks passed")


if __name__ == "__main__":
    main()
