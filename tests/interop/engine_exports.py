#!/usr/bin/env python3
"""GPTQ, AWQ and compressed-tensors folders written by `lowbit export --to` / `quantize --save-as` / `convert`,
checked by their consumers (make test-interop).

Each export starts from a lowbit quantized folder of the bundled model, whose codes it repacks:
  * the reference is that folder's own tensors decoded as lowbit defines them (W = (code - zero) * scale);
  * compressed-tensors exports: transformers + compressed-tensors load the folder and decompress every
    linear; each must equal the reference exactly (max abs difference 0). NVFP4 is decompressed to bf16
    there, as code * (scale / global scale) where lowbit and vLLM's kernels multiply by 1 / global scale:
    it must equal the reference rounded to bf16 within one bf16 step, and compressed-tensors' own fp32
    decompression must equal the reference within one fp32 step of the block scale; the global scale's
    fp32 reciprocal must be lowbit's tensor scale exactly (W4A4: input_global_scale's, lowbit's static
    input scale), and q/k/v and gate/up (one fused matrix in vLLM) must share it. transformers' fp32 logits on
    the KJV windows are written as a lowbit --kl-base file, and lowbit, running the same export,
    must agree: KL(transformers || lowbit) < 1e-6 and top-1 >= 99 % (exports with quantized inputs, W8A8 and
    NVFP4 W4A4: < 1e-4, see main). NVFP4 runs on compressed-tensors' fp32 decompression there.
  * folders written by compressed-tensors' own compressors (third-party files, as llm-compressor saves them):
    lowbit's reading of the folder is the reference, and the compressed-tensors checks above apply to it;
  * GPTQ and AWQ exports: every linear decoded from qweight / qzeros / scales / g_idx by the formats'
    definitions (docs/formats.md sections 3 and 4, independent of lowbit's code) equals the reference
    exactly, and lowbit reads the export back to the source folder's perplexity, to the last digit.
Prints a table; exits 1 on any failure.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file as load_torch
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import dequantize
from transformers import AutoModelForCausalLM, CompressedTensorsConfig

from common import check, failures, lowbit_json, print_table, run, window_token_ids, write_kl_base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTX = 128
WINDOWS = 32
TOP_K = 64
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
# name, `lowbit quantize` arguments of the source folder, export arguments
CALIB = ["--calib", os.path.join(ROOT, "data", "kjv-train.txt"), "--calib-samples", "16"]
EXPORTS = [
    ("ct-w4a16-g128", ["--format", "int4:g128"], ["--to", "compressed-tensors"]),
    ("ct-w4a16-asym-g128", ["--format", "int4:g128:asym"], ["--to", "compressed-tensors"]),
    ("ct-w8a16-channel", ["--format", "int8:channel"], ["--to", "compressed-tensors"]),
    ("ct-w4a16-g128-fp8-kv", ["--format", "int4:g128"], ["--to", "compressed-tensors"]),  # + calibrate-kv scales
    ("ct-int3-g64-bf16", ["--format", "int3:g64:scale=bf16"], ["--to", "compressed-tensors"]),  # 3-bit values straddle words
    ("ct-w8a8-smoothquant-dynamic", ["--method", "smoothquant", "--format", "int8:channel", "--act-format", "int8:token",
                                     *CALIB], ["--to", "compressed-tensors"]),
    ("ct-w8a8-static", ["--format", "int8:channel", "--act-format", "int8:tensor", *CALIB], ["--to", "compressed-tensors"]),
    # asymmetric inputs (vLLM's W8A8 with azp): a zero-point per token per call, or calibrated with the static scale
    ("ct-w8a8-asym-dynamic", ["--format", "int8:channel", "--act-format", "int8:token:asym:scale=f32"],
     ["--to", "compressed-tensors"]),
    ("ct-w8a8-asym-static", ["--format", "int8:channel", "--act-format", "int8:tensor:asym", *CALIB],
     ["--to", "compressed-tensors"]),
    # W4A8 / W4AFP8: packed int4 weights, inputs quantized per token per call
    ("ct-w4a8-int8-token", ["--format", "int4:g128", "--act-format", "int8:token"], ["--to", "compressed-tensors"]),
    ("ct-w4afp8-fp8-token", ["--format", "int4:g128", "--act-format", "fp8_e4m3:token"], ["--to", "compressed-tensors"]),
    ("ct-fp8-channel", ["--format", "fp8_e4m3"], ["--to", "compressed-tensors"]),
    ("ct-fp8-block128-dynamic", ["--format", "fp8_e4m3:block128x128:scale=f32", "--act-format", "fp8_e4m3:token"],
     ["--to", "compressed-tensors"]),
    # FP8_BLOCK (DeepSeek-V3's scheme): inputs per 1 x 128 group per call, as vLLM's block kernels quantize them
    ("ct-fp8-block128-g128-inputs", ["--format", "fp8_e4m3:block128x128:scale=f32", "--act-format",
                                     "fp8_e4m3:g128:scale=f32"], ["--to", "compressed-tensors"]),
    ("ct-nvfp4a16", ["--format", "nvfp4"], ["--to", "compressed-tensors"]),
    ("ct-nvfp4a16-gptq", ["--method", "gptq", "--format", "nvfp4", *CALIB], ["--to", "compressed-tensors"]),
    # W4A4: NVFP4 inputs on a calibrated input_global_scale, which compressed-tensors' forward applies in transformers
    ("ct-nvfp4-w4a4", ["--format", "nvfp4", "--act-format", "nvfp4", *CALIB], ["--to", "compressed-tensors"]),
    ("ct-mxfp4a16", ["--format", "mxfp4"], ["--to", "compressed-tensors"]),
    # MX inputs (the MXFP4 and MXFP8 presets): dynamic E8M0 scales per 32 inputs on compressed-tensors' rule
    ("ct-mxfp4-w4a4", ["--format", "mxfp4", "--act-format", "mxfp4:e8m0=round"], ["--to", "compressed-tensors"]),
    ("ct-mxfp8-w8a8", ["--format", "mxfp8_e4m3", "--act-format", "mxfp8_e4m3:e8m0=round"],
     ["--to", "compressed-tensors"]),
    # MXFP4 weights with dynamic FP8 inputs, per group of 128 (the MXFP4xFP8 preset) and per token
    ("ct-mxfp4-fp8-g128", ["--format", "mxfp4", "--act-format", "fp8_e4m3:g128:scale=f32"], ["--to", "compressed-tensors"]),
    ("ct-mxfp4-fp8-token", ["--format", "mxfp4", "--act-format", "fp8_e4m3:token:scale=f32"], ["--to", "compressed-tensors"]),
    ("ct-mxfp6a16", ["--format", "mxfp6_e2m3"], ["--to", "compressed-tensors"]),
    ("ct-mxfp8a16", ["--format", "mxfp8_e4m3"], ["--to", "compressed-tensors"]),
    ("gptq-v1-int4-g128", ["--format", "int4:g128"], ["--to", "gptq"]),
    ("gptq-v2-int4-asym-g128", ["--format", "int4:g128:asym"], ["--to", "gptq", "--format", "gptq_v2"]),
    ("gptq-v1-int3-g64", ["--format", "int3:g64"], ["--to", "gptq"]),
    ("gptq-v1-int8-channel", ["--format", "int8:channel"], ["--to", "gptq"]),
    # GPTQ act-order with groups in processing order: desc_act, a g_idx that is not column / group
    ("gptq-v1-int4-g128-desc-act", ["--method", "gptq", "--act-order=group", "--format", "int4:g128", *CALIB],
     ["--to", "gptq"]),
    ("awq-int4-asym-g128", ["--format", "int4:g128:asym"], ["--to", "awq"]),
    # `lowbit convert` from an engine folder (exported first with the fourth entry's arguments): the same checks
    # hold against the original lowbit folder, and convert must report an exact repack.
    ("convert-gptq-to-ct-int4-g128", ["--format", "int4:g128"], ["--to", "compressed-tensors"], ["--to", "gptq"]),
    ("convert-ct-to-awq-int4-asym-g64", ["--format", "int4:g64:asym"], ["--to", "awq"], ["--to", "compressed-tensors"]),
    ("convert-awq-to-gptq-v2-int4-asym-g128", ["--format", "int4:g128:asym"], ["--to", "gptq", "--format", "gptq_v2"],
     ["--to", "awq"]),
    # from a GGUF file (Q4_0 blocks, F32 tables): the Hugging Face folder it came from (config.json, tokenizer.model)
    ("convert-gguf-q4_0-to-ct-int4-g32", ["--format", "int4:g32:scale=f16"], ["--to", "compressed-tensors"],
     ["--type", "Q4_0", "--token-embedding-type", "F32", "--output-tensor-type", "F32"]),
    # Written by compressed-tensors itself (third-party files, as llm-compressor saves them): the quantization
    # arguments of its config group instead of lowbit's. lowbit reads the folder (`convert --to lowbit`, which
    # must be exact) and that reading is the reference transformers' decompression must equal.
    ("ct-own-w4a16-g128", dict(num_bits=4, symmetric=True, strategy="group", group_size=128), None),
    ("ct-own-w4a16-asym-g128", dict(num_bits=4, symmetric=False, strategy="group", group_size=128), None),
    ("ct-own-w8a16-channel", dict(num_bits=8, symmetric=True, strategy="channel"), None),
    # llm-compressor's NVFP4 preset (W4A4): static-minmax global scales, fused ones shared, calibrated inputs
    ("ct-own-nvfp4-w4a4", dict(preset="NVFP4"), None),
    # its MXFP4 preset (W4A4): E8M0 weight scales by its own rule, MX inputs quantized per call
    ("ct-own-mxfp4-w4a4", dict(preset="MXFP4"), None),
    ("ct-own-mxfp4xfp8", dict(preset="MXFP4XFP8"), None),
    # its W4A8 preset: int4 g128 weights, int8 inputs per token per call
    ("ct-own-w4a8", dict(preset="W4A8"), None),
    # its FP8_BLOCK preset: 128 x 128 block weights, FP8 inputs per group of 128 per call
    ("ct-own-fp8-block", dict(preset="FP8_BLOCK"), None),
    # W8A8 with asymmetric int8 inputs per token (int-quantized, as llm-compressor saves W8A8)
    ("ct-own-w8a8-asym-dynamic", dict(num_bits=8, symmetric=True, strategy="channel",
                                      inputs=dict(num_bits=8, symmetric=False, strategy="token", dynamic=True)), None),
]


def input_amax(model, calib_ids, ctx):
    """max |x| of each Linear's input over the calibration windows (llm-compressor's static_minmax observer)."""
    amax, hooks = {}, []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            def record(m, inp):
                amax[m] = torch.maximum(amax.get(m, torch.zeros(())), inp[0].detach().abs().amax())
            hooks.append(module.register_forward_pre_hook(record))
    with torch.no_grad():
        for start in range(0, len(calib_ids) - ctx + 1, ctx):
            model(torch.tensor([calib_ids[start:start + ctx]]))
    for h in hooks:
        h.remove()
    return amax


def write_with_compressed_tensors(model_dir, out, weights, calib_ids):
    """A folder written by compressed-tensors' own code: min/max qparams per group or channel
    (calculate_qparams, as llm-compressor's minmax observer gives them), then ModelCompressor's compress and
    save, as llm-compressor saves a model; the tokenizer files copied beside it. NVFP4 (the preset): each global
    scale from its tensor's (weights) or calibration inputs' max |x| (generate_gparam), the weights' shared by
    q/k/v and by gate/up as llm-compressor fuses them (their minimum)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme, apply_quantization_config,
                                                 preset_name_to_scheme)
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
    weights = dict(weights)
    preset, inputs = weights.pop("preset", None), weights.pop("inputs", None)
    scheme = preset_name_to_scheme(preset, ["Linear"]) if preset else \
        QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(type="int", **weights),
                           input_activations=QuantizationArgs(type="int", **inputs) if inputs else None)
    args = scheme.weights
    fmt = {"NVFP4": "nvfp4-pack-quantized", "MXFP4": "mxfp4-pack-quantized", "MXFP4XFP8": "mxfp4-pack-quantized",
           "FP8_BLOCK": "float-quantized"}.get(preset, "int-quantized" if inputs else "pack-quantized")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    amax = input_amax(model, calib_ids, CTX) if preset == "NVFP4" else {}
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"],
                                                        format=fmt))
    global_scales = {}
    for name, module in model.named_modules():
        if hasattr(module, "weight_global_scale"):
            w = module.weight.detach()
            global_scales[name] = generate_gparam(w.amin(), w.amax()).reshape(1)
    def fused_with(name):
        parent, leaf = name.rsplit(".", 1)
        group = next((g for g in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")) if leaf in g), (leaf,))
        return [f"{parent}.{p}" for p in group]

    global_scales = {n: torch.cat([global_scales[f] for f in fused_with(n)]).min().reshape(1) for n in global_scales}
    for name, module in model.named_modules():
        if hasattr(module, "weight_scale"):
            w = module.weight.detach()
            if args.block_structure:  # [N / rows, K / cols] cells of rows x cols
                rows, cols = args.block_structure
                cells = w.reshape(w.shape[0] // rows, rows, w.shape[1] // cols, cols).permute(0, 2, 1, 3).flatten(2)
            else:
                cells = w.reshape(w.shape[0], -1, args.group_size) if args.group_size else w.reshape(w.shape[0], 1, -1)
            g = global_scales.get(name)
            scale, zero = calculate_qparams(cells.amin(dim=2), cells.amax(dim=2), args, global_scale=g)
            module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
            if g is not None:
                module.weight_global_scale.data.copy_(g.reshape(module.weight_global_scale.shape))
            if hasattr(module, "weight_zero_point") and not preset:
                module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape))
            if hasattr(module, "input_global_scale"):
                a = amax[module]
                module.input_global_scale.data.copy_(generate_gparam(-a, a).reshape(module.input_global_scale.shape))
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    for side in ("tokenizer.model", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model_dir, side)):
            shutil.copy(os.path.join(model_dir, side), out)
def load_file(path):
    """A safetensors file as numpy arrays (bf16 widened to fp32, exactly)."""
    return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in load_torch(path).items()}


def unpack_lsb(data, count, bits):
    """Codes 0..count-1 of each row of an LSB-first bitstream (bytes, little-endian words)."""
    data = np.ascontiguousarray(data).view(np.uint8)
    bitstream = np.unpackbits(data, axis=-1, bitorder="little")[..., :count * bits]
    weights = (1 << np.arange(bits)).astype(np.int64)
    return (bitstream.reshape(*bitstream.shape[:-1], count, bits).astype(np.int64) * weights).sum(-1)


# The OCP element formats by their definitions (sign, then exponent and mantissa fields).
def minifloat(codes, exp_bits, man_bits, bias):
    sign = np.where(codes >> (exp_bits + man_bits) & 1, -1.0, 1.0)
    e = (codes >> man_bits) & ((1 << exp_bits) - 1)
    m = (codes & ((1 << man_bits) - 1)) / float(1 << man_bits)
    return sign * np.where(e == 0, m * 2.0 ** (1 - bias), (1 + m) * 2.0 ** (e - bias))


def decode_scales(raw, options):
    """A lowbit folder's scales as float64: E8M0 bytes are 2^(b - 127), UE4M3 bytes E4M3 values."""
    kind = next((o[6:] for o in options if o.startswith("scale=")), None)
    if kind == "e8m0":
        return np.exp2(raw.astype(np.float64) - 127)
    if kind == "ue4m3":
        return minifloat(raw.astype(np.int64), 4, 3, 7)
    return raw.astype(np.float64)


def lowbit_reference(folder, config):
    """Every quantized linear of a lowbit folder, decoded from its own tensors: (code - zero) * scale for
    integers, the element's value times the scale for fp8 / fp6 / fp4 (times the tensor scale, NVFP4),
    each scale over its group, channel, tensor or block; an act-order linear's stored column j is input
    column input_order[j]."""
    t = load_file(os.path.join(folder, "model.safetensors"))
    out = {}
    for prefix, scheme in config["quantization_config"]["lowbit"]["tensors"].items():
        element, *options = scheme.split(":")
        packed = t[prefix + ".weight_packed"]
        scale = decode_scales(t[prefix + ".weight_scale"], options)
        if "tscale" in options:
            scale = scale * np.float64(t[prefix + ".weight_global_scale"][0])
            scale = scale.astype(np.float32).astype(np.float64)  # the fp32 product lowbit decodes with
        n = packed.shape[0]
        if element in ("fp4_e2m1", "fp6_e2m3"):
            bits, exp_bits, man_bits, bias = (4, 2, 1, 1) if element == "fp4_e2m1" else (6, 2, 3, 1)
            k = packed.shape[1] * 8 // bits
            values = minifloat(unpack_lsb(packed, k, bits), exp_bits, man_bits, bias)
        elif element == "fp8_e4m3":
            k = packed.shape[1]
            values = torch.from_numpy(np.ascontiguousarray(packed)).view(torch.float8_e4m3fn).double().numpy()
        else:
            bits = int(element[3:])
            groups = scale.shape[1]
            group = next((int(o[1:]) for o in options if o.startswith("g")), None)
            k = group * groups if group else packed.shape[1] * 8 // bits
            codes = unpack_lsb(packed, k, bits)
            zeros = unpack_lsb(t[prefix + ".weight_zero_point"], groups, bits) if "asym" in options else \
                np.full((n, groups), 1 << (bits - 1))
            values = codes - np.repeat(zeros, -(-k // groups), axis=1)[:, :k]
        rows_per_cell, cols_per_cell = -(-n // scale.shape[0]), -(-k // scale.shape[1])
        s = np.repeat(np.repeat(scale, rows_per_cell, axis=0), cols_per_cell, axis=1)[:n, :k]
        w = (values * s).astype(np.float32)
        if prefix + ".input_order" in t:
            stored, w = w, np.empty_like(w)
            w[:, t[prefix + ".input_order"]] = stored
        out[prefix] = w
    return out


def decode_gptq(t, prefix, q):
    """formats.md 3.2: W[n, i] = scales[g, n] * (q - z), z = zero field (+1 in v1), g = g_idx[i]."""
    bits = q["bits"]
    qweight, qzeros, scales, g_idx = (t[prefix + s] for s in (".qweight", ".qzeros", ".scales", ".g_idx"))
    k, n = qweight.shape[0] * 32 // bits, qweight.shape[1]
    codes = unpack_lsb(np.ascontiguousarray(qweight.T), k, bits).T  # [K, N]: each column a bitstream along K
    zeros = unpack_lsb(qzeros, n, bits)  # [groups, N]
    if q.get("checkpoint_format", "gptq") != "gptq_v2":
        zeros = (zeros & ((1 << bits) - 1)) + 1
    w = scales.astype(np.float64)[g_idx] * (codes - zeros[g_idx])
    return w.T.astype(np.float32)


def decode_awq(t, prefix, q):
    """formats.md 4: nibble slot k of word c holds output channel 8c + ORDER[k]; W = (q - z) * s."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    qweight, qzeros, scales = (t[prefix + s] for s in (".qweight", ".qzeros", ".scales"))

    def unpack(words):
        out = np.zeros((words.shape[0], words.shape[1] * 8), dtype=np.int64)
        u = words.view(np.uint32).astype(np.int64)
        for slot in range(8):
            out[:, order[slot]::8] = (u >> (4 * slot)) & 15
        return out

    codes, zeros = unpack(qweight), unpack(qzeros)  # [K, N], [K/G, N]
    group = qweight.shape[0] // scales.shape[0]
    w = (codes - np.repeat(zeros, group, axis=0)) * np.repeat(scales.astype(np.float64), group, axis=0)
    return w.T.astype(np.float32)


def check_nvfp4(name, out, source, model, reference, weights_args):
    """NVFP4 exports (see the module doc); returns transformers' largest difference in bf16 steps."""
    t = load_torch(os.path.join(out, "model.safetensors"))
    src = load_torch(os.path.join(source, "model.safetensors"))
    inputs = json.load(open(os.path.join(source, "config.json")))["quantization_config"]["lowbit"].get("input_quant", {})
    args = QuantizationArgs(**weights_args)
    worst_steps, worst_fp32 = 0.0, 0.0
    for prefix, ref in reference.items():
        g = t[prefix + ".weight_global_scale"].float()
        check(np.float32(1) / g.numpy()[0] == src[prefix + ".weight_global_scale"].numpy()[0],
              f"{name}: {prefix}: 1 / weight_global_scale is not lowbit's tensor scale")
        fused = prefix.replace("k_proj", "q_proj").replace("v_proj", "q_proj").replace("up_proj", "gate_proj")
        check(torch.equal(g, t[fused + ".weight_global_scale"].float()),
              f"{name}: {prefix} and {fused} have different global scales, but vLLM fuses them")
        if prefix in inputs:  # W4A4: the static input scale travels the same way, and fused inputs share it
            gi = t[prefix + ".input_global_scale"].float()
            check(np.float32(1) / gi.numpy()[0] == np.float32(inputs[prefix]["static_scale"]),
                  f"{name}: {prefix}: 1 / input_global_scale is not lowbit's static input tensor scale")
            check(torch.equal(gi, t[fused + ".input_global_scale"].float()),
                  f"{name}: {prefix} and {fused} have different input global scales, but vLLM fuses them")
        else:
            check(prefix + ".input_global_scale" not in t, f"{name}: {prefix}: an input_global_scale on W4A16")
        packed = t[prefix + ".weight_packed"]
        codes = unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2, dtype=torch.float32)
        fp32 = dequantize(codes, t[prefix + ".weight_scale"].float(), args=args, global_scale=g,
                          dtype=torch.float32).numpy()
        # One fp32 step of the block scale, and the product's own rounding: |dW| <= |W| * 2^-22.
        bound = np.abs(ref).astype(np.float64) * 2.0 ** -22
        worst_fp32 = max(worst_fp32, float(np.max(np.abs(fp32.astype(np.float64) - ref) - bound)))
        module = model.get_submodule(prefix)
        got = module.weight.detach().float().numpy().astype(np.float64)
        rounded = torch.from_numpy(ref).bfloat16().float().numpy().astype(np.float64)
        step = np.abs(rounded) * 2.0 ** -7  # one bf16 step (8 significant bits) at the rounded value
        steps = np.abs(got - rounded) / np.where(step > 0, step, 1)
        worst_steps = max(worst_steps, float(np.max(steps)))
        # The logits are compared on compressed-tensors' fp32 decompression: with NVFP4 inputs, the bf16
        # weights' rounding moved inputs of later layers across FP4 steps (KL 4.5e-4 against lowbit, 2.6e-3 with
        # the inputs unquantized on one side).
        module.weight.data = torch.from_numpy(fp32)
    check(worst_fp32 <= 0, f"{name}: compressed-tensors' fp32 decompression is more than one fp32 step of the block "
                           f"scale from lowbit's")
    check(worst_steps <= 1, f"{name}: transformers' bf16 weights are {worst_steps} bf16 steps from lowbit's rounded")
    return worst_steps


def fp8_block_folder(model_dir, out, block=128):
    """A DeepSeek-V3-style FP8 checkpoint (quant_method fp8) written here by its definition, independent of
    lowbit: each linear's 128 x 128 block scaled by amax / 448, W / scale rounded to E4M3 by torch (F8_E4M3
    `weight`), the scale stored as `weight_scale_inv` (W = code * scale_inv); lm_head left in 16 bits.
    Returns each linear's fp32 weights as decoded by that definition."""
    from safetensors.torch import save_file
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tensors, decoded = {}, {}
    for name, t in model.state_dict().items():
        prefix = name[:-len(".weight")]
        if not name.endswith(".weight") or prefix.rsplit(".", 1)[-1] not in [l.split(".")[-1] for l in LINEARS]:
            tensors[name] = t.contiguous()
            continue
        n, k = t.shape
        cells = t.reshape(n // block, block, k // block, block)
        scale = cells.abs().amax(dim=(1, 3)) / 448.0
        codes = (cells / scale[:, None, :, None]).to(torch.float8_e4m3fn)
        tensors[name] = codes.reshape(n, k).contiguous()
        tensors[prefix + ".weight_scale_inv"] = scale.contiguous()
        decoded[prefix] = (codes.float() * scale[:, None, :, None]).reshape(n, k).numpy()
    os.makedirs(out)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(model_dir, "config.json")))
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                     "weight_block_size": [block, block]}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    for side in ("tokenizer.model", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model_dir, side)):
            shutil.copy(os.path.join(model_dir, side), out)
    return decoded


def check_fp8_method(lowbit, model_dir, tmp, ids, bos, window_text):
    """quant_method fp8 (see fp8_block_folder): transformers loads the folder (FineGrainedFP8, dequantized to
    bf16 on a CPU) to every linear's definition rounded to bf16, within one bf16 step; lowbit reads every
    linear exactly (its `convert --to compressed-tensors` is an exact repack, and compressed-tensors decompresses
    that to the definition with max |dW| 0); and lowbit's
    logits, which quantize each linear's input to FP8 per group of 128 per call as vLLM's block kernels do,
    agree with torch doing the same on the definition's fp32 weights: KL < 1e-4. Returns a table row."""
    out = os.path.join(tmp, "fp8-method-block128")
    decoded = fp8_block_folder(model_dir, out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    worst_steps = 0.0
    for prefix, ref in decoded.items():
        module = model.get_submodule(prefix)
        got = module.weight.detach().float().numpy().astype(np.float64)
        rounded = torch.from_numpy(ref).bfloat16().float().numpy().astype(np.float64)
        step = np.abs(rounded) * 2.0 ** -7
        worst_steps = max(worst_steps, float(np.max(np.abs(got - rounded) / np.where(step > 0, step, 1))))
    check(worst_steps <= 1, f"fp8-method: transformers' weights are {worst_steps} bf16 steps from the definition's")
    model = model.float()
    for prefix, ref in decoded.items():  # the exact weights, and vLLM's per-group FP8 inputs
        module = model.get_submodule(prefix)
        module.weight.data = torch.from_numpy(ref)

        def fp8_groups(m, inp):
            x = inp[0]
            g = x.reshape(*x.shape[:-1], -1, 128)
            scale = g.abs().amax(dim=-1, keepdim=True) / 448.0
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            return ((g / scale).to(torch.float8_e4m3fn).float() * scale).reshape(x.shape),
        module.register_forward_pre_hook(fp8_groups)
    converted = os.path.join(tmp, "fp8-method-as-ct")
    repack = lowbit_json(lowbit, "convert", out, "-o", converted, "--to", "compressed-tensors")
    check(repack["exact"] and repack["max_abs_diff"] == 0, "fp8-method: lowbit's repack to compressed-tensors is not exact")
    ct = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32,
                                              quantization_config=CompressedTensorsConfig(dequantize=True))
    worst = max(max_diff(ct.get_submodule(p).weight.detach().float().numpy(), ref) for p, ref in decoded.items())
    check(worst == 0.0, f"fp8-method: lowbit reads a linear differently from the definition: max |dW| {worst}")
    base = os.path.join(tmp, "fp8-method.klbase")

    def logits(chunk):
        with torch.no_grad():
            return model(torch.tensor([chunk])).logits[0].double().numpy()

    write_kl_base(base, ids, bos, CTX, TOP_K, model.config.vocab_size, logits)
    agree = lowbit_json(lowbit, "ppl", "--model", out, "--text", window_text, "--ctx", CTX, "--kl-base", base)
    kl, top1 = agree["kl"]["kld_mean"], agree["kl"]["top1_agreement"]
    check(kl < 1e-4, f"fp8-method: KL(torch || lowbit) = {kl:.3g}, must be < 1e-4")
    check(top1 >= 0.99, f"fp8-method: top-1 agreement {top1:.4f} < 0.99")
    info = lowbit_json(lowbit, "inspect", out)
    return ("fp8-method-block128", "fp8", "block 128x128", f"{info['linear_bits_per_weight']:.4f}",
            f"{info['bytes'] / 2**20:.2f}", f"{agree['ppl']:.4f}", "transformers (bf16 steps) + torch inputs",
            f"{worst_steps:g} steps", f"{kl:.2e}", f"{top1:.4f}")


def max_diff(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.shape == b.shape else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lowbit", default=os.path.join(ROOT, "build", "lowbit"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-llama-7m"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "kjv-test.txt"))
    ap.add_argument("--only", default="", help="run only the exports whose name contains this")
    args = ap.parse_args()
    lowbit = args.lowbit
    torch.set_num_threads(2)
    tmp = tempfile.mkdtemp(prefix="lowbit-engine-interop-")
    window_text = os.path.join(tmp, "windows.txt")
    ids = window_token_ids(lowbit, args.model, args.text, window_text, CTX, WINDOWS)
    bos = json.load(open(os.path.join(args.model, "config.json"))).get("bos_token_id", 1)
    rows = []
    for name, quantize_args, export_args, *via in EXPORTS:
        if args.only not in name:
            continue
        source = os.path.join(tmp, f"lowbit-{name}")
        out = os.path.join(tmp, name)
        # lm_head kept as it is: the engines (AWQ, vLLM's compressed-tensors) run it unquantized.
        if not isinstance(quantize_args, dict):
            run(lowbit, "quantize", args.model, "-o", source, "--lm-head", "none", *quantize_args)
        kv = name.endswith("-fp8-kv")
        if kv:
            run(lowbit, "calibrate-kv", "--model", source, "--calib", CALIB[1], "--samples", "8")
        if isinstance(quantize_args, dict):
            calib_ids = window_token_ids(lowbit, args.model, CALIB[1], os.path.join(tmp, "calib.txt"), CTX, 16) \
                if quantize_args.get("preset") == "NVFP4" else []  # the preset with static input scales
            write_with_compressed_tensors(args.model, out, quantize_args, calib_ids)
            read = lowbit_json(lowbit, "convert", out, "-o", source, "--to", "lowbit")
            check(read["exact"] and read["max_abs_diff"] == 0,
                  f"{name}: lowbit reads {read['exact_matrices']} of {read['matrices']} matrices exactly")
            info = lowbit_json(lowbit, "inspect", out)
            exported = {"format": info["format"].split()[-1], "bits_per_weight": info["linear_bits_per_weight"],
                        "file_bytes": info["bytes"]}
        elif via:
            engine = os.path.join(tmp, f"{name}-via" + (".gguf" if "--type" in via[0] else ""))
            lowbit_json(lowbit, "export", source, "-o", engine, *via[0])
            exported = lowbit_json(lowbit, "convert", engine, "-o", out, *export_args)
            check(exported["exact"] and exported["max_abs_diff"] == 0,
                  f"{name}: convert reports {exported['exact_matrices']} of {len(exported['matrices'])} matrices exact")
        else:
            exported = lowbit_json(lowbit, "export", source, "-o", out, *export_args)
        config = json.load(open(os.path.join(out, "config.json")))
        q = config["quantization_config"]
        reference = lowbit_reference(source, json.load(open(os.path.join(source, "config.json"))))
        ppl_source = lowbit_json(lowbit, "ppl", "--model", source, "--text", window_text, "--ctx", CTX)["ppl"]
        ppl_export = lowbit_json(lowbit, "ppl", "--model", out, "--text", window_text, "--ctx", CTX)["ppl"]
        check(ppl_export == ppl_source, f"{name}: lowbit reads the export to PPL {ppl_export}, the source folder to {ppl_source}")
        worst, consumer, kl, top1, nvfp4 = 0.0, "", float("nan"), float("nan"), False
        if q["quant_method"] == "compressed-tensors":
            consumer = "transformers + compressed-tensors"
            model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                         quantization_config=CompressedTensorsConfig(dequantize=True))
            nvfp4 = q["format"] == "nvfp4-pack-quantized"
            if "fp4" in q["format"] or "fp6" in q["format"] or "mxfp8" in q["format"]:
                model = model.float()  # the microscaled formats decompress to bf16 (exactly, but for NVFP4)
            if nvfp4:
                consumer += " (bf16 steps)"
                bf16_steps = check_nvfp4(name, out, source, model, reference, q["config_groups"]["group_0"]["weights"])
            else:
                for prefix, ref in reference.items():
                    module = model.get_submodule(prefix)
                    worst = max(worst, max_diff(module.weight.detach().float().numpy(), ref))
            if kv:  # the calibrated FP8 KV scales arrive as each attention's k_scale / v_scale
                scales = json.load(open(os.path.join(source, "kv_cache_scales.json")))
                for i, layer in enumerate(model.model.layers):
                    for which in ("k", "v"):
                        got = float(getattr(layer.self_attn, f"{which}_scale").detach().float().reshape(-1)[0])
                        check(got == float(np.float32(scales[f"{which}_scales"][i])),
                              f"{name}: layer {i} {which}_scale is {got} in transformers, "
                              f"{scales[f'{which}_scales'][i]} in kv_cache_scales.json")
            base = os.path.join(tmp, f"{name}.klbase")

            def logits(chunk):
                with torch.no_grad():
                    return model(torch.tensor([chunk])).logits[0].double().numpy()

            write_kl_base(base, ids, bos, CTX, TOP_K, model.config.vocab_size, logits)
            # With a kv_cache_scheme transformers runs an FP8 KV cache on the calibrated scales: so does lowbit.
            kv_args = ["--kv-cache-dtype", "fp8_e4m3"] if kv else []
            agree = lowbit_json(lowbit, "ppl", "--model", out, "--text", window_text, "--ctx", CTX, "--kl-base", base,
                                *kv_args)["kl"]
            kl, top1 = agree["kld_mean"], agree["top1_agreement"]
            # Quantized inputs: the engines' last-bit differences (summation order, scale / g against
            # scale * (1 / g)) move a few inputs across a rounding step, and each such step moves every
            # later layer (NVFP4 W4A4: 2.5e-6 to 9.4e-6; 2.6e-3 with the inputs of one side unquantized). NVFP4 runs
            # compressed-tensors' fp32 weights (check_nvfp4) and its own input quantization.
            bound = 1e-4 if any(g.get("input_activations") for g in q["config_groups"].values()) else 1e-6
            check(kl < bound, f"{name}: KL(transformers || lowbit) = {kl:.3g}, must be < {bound:g}")
            check(top1 >= 0.99, f"{name}: top-1 agreement {top1:.4f} < 0.99")
            del model
        else:
            consumer = "formats.md decode"
            t = load_file(os.path.join(out, "model.safetensors"))
            decode = decode_gptq if q["quant_method"] == "gptq" else decode_awq
            for prefix, ref in reference.items():
                worst = max(worst, max_diff(decode(t, prefix, q), ref))
        check(worst == 0.0, f"{name}: {consumer} decodes a linear differently from lowbit: max abs difference {worst}")
        if "desc-act" in name:
            t = load_file(os.path.join(out, "model.safetensors"))
            permuted = sum(not np.array_equal(t[p + ".g_idx"], np.arange(len(t[p + ".g_idx"])) // q["group_size"])
                           for p in reference)
            check(q["desc_act"] is True and permuted == len(reference),
                  f"{name}: desc_act {q['desc_act']}, {permuted} of {len(reference)} g_idx out of column order")
        rows.append((name, q["quant_method"], exported["format"], f"{exported['bits_per_weight']:.4f}",
                     f"{exported['file_bytes'] / 2**20:.2f}", f"{ppl_export:.4f}", consumer,
                     f"{bf16_steps:g} steps" if nvfp4 else f"{worst:g}",
                     f"{kl:.2e}" if kl == kl else "-", f"{top1:.4f}" if top1 == top1 else "-"))
        print(f"{name}: done", flush=True)

    if args.only in "fp8-method-block128":
        rows.append(check_fp8_method(lowbit, args.model, tmp, ids, bos, window_text))
        print("fp8-method-block128: done", flush=True)

    # quantize --save-as writes the same tensors as quantize + export.
    if os.path.isdir(os.path.join(tmp, "ct-w4a16-g128")):
        direct = os.path.join(tmp, "direct-ct")
        run(lowbit, "quantize", args.model, "-o", direct, "--format", "int4:g128", "--save-as", "compressed-tensors")
        a = load_file(os.path.join(direct, "model.safetensors"))
        b = load_file(os.path.join(tmp, "ct-w4a16-g128", "model.safetensors"))
        check(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a),
              "quantize --save-as compressed-tensors differs from quantize + export --to compressed-tensors")

    header = ("export", "quant_method", "format", "bits/w", "MiB", "lowbit PPL", "checked by", "max |dW|",
              "KL", "top-1")
    print_table(header, rows)
    print(f"({len(ids) // CTX} windows of {CTX} tokens of {args.text})")
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("engine exports: all checks passed")


if __name__ == "__main__":
    main()
