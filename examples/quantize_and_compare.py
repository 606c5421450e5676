"""Quantize a model with GPTQ from Python, then measure what it cost: KL divergence, top-1 agreement and
perplexity against the original, and a few greedy tokens from each.

    pip install .                                   # from the repository root
    python examples/quantize_and_compare.py         # the bundled model, int4 g64 GPTQ
    python examples/quantize_and_compare.py --model my-hf-folder --text my.txt --calib my-calib.txt --format int4:g128
"""

import argparse
import pathlib
import shutil
import tempfile

import lowbit

ROOT = pathlib.Path(__file__).resolve().parents[1]

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default=str(ROOT / "models" / "kjv-llama-7m"))
parser.add_argument("--text", default=str(ROOT / "data" / "kjv-test.txt"), help="evaluation text")
parser.add_argument("--calib", default=str(ROOT / "data" / "kjv-train.txt"), help="calibration text")
parser.add_argument("--format", default="int4:g64")
parser.add_argument("--method", default="gptq")
parser.add_argument("--ctx", type=int, default=256)
parser.add_argument("--out", help="output folder (default: a temporary one, removed at the end)")
args = parser.parse_args()

out = pathlib.Path(args.out) if args.out else pathlib.Path(tempfile.mkdtemp()) / "quantized"
recipe = {"method": args.method, "format": args.format, "calibration": {"file": args.calib, "samples": 32}}
card = lowbit.quantize(args.model, out, recipe=recipe)
print(f"{args.method} {card['scheme']}: {card['bits_per_weight']:.4f} bits/weight, "
      f"{card['seconds']['total']:.2f} s -> {out}")

result = lowbit.compare(args.model, out, args.text, ctx=args.ctx)
print(f"KL mean {result['kld_mean']:.5f}   top-1 agreement {100 * result['top1_agreement']:.2f} %   "
      f"PPL {result['ppl_base']:.3f} -> {result['ppl']:.3f}")

for path in (args.model, out):
    model = lowbit.Model.load(path)
    text = "".join(token.text for token in model.generate("And God said", max_tokens=16))
    print(f"{pathlib.Path(path).name:>16}: And God said{text}")

if not args.out:
    shutil.rmtree(out.parent)
