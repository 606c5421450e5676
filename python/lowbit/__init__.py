"""lowbit from Python: number formats, tensor quantization, whole-model PTQ, evaluation and running.

The calls mirror the ``lowbit`` command's concepts and return what its ``--json`` prints::

    import lowbit
    q = lowbit.quantize_tensor(weights, lowbit.Scheme("int4:g128"))
    card = lowbit.quantize("model/", "model-int4/", recipe={"method": "gptq", "format": "int4:g128",
                                                             "calibration": {"file": "calib.txt"}})
    print(lowbit.compare("model/", "model-int4/", text="wiki.test.raw")["kld_mean"])

Errors raise ``lowbit.Error`` with the library's message (which names the file and field).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ._lowbit import (  # noqa: F401  (the public names)
    Error,
    Generation,
    Model,
    QuantizedTensor,
    Scheme,
    Token,
    Tokenizer,
    __version__,
    _compare,
    _convert,
    _calibrate_kv,
    _default_format_for,
    _export,
    _imatrix,
    _formats_json,
    _inspect,
    _plan,
    _ppl,
    _quantize,
    _bench_attention,
    _bench_gemv,
    _bench_memory,
    _bench_speed,
    _synth,
    _scheme_text_from_flags,
    quantize_tensor,
)
from ._progress import progress_or_bar

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[int, int, str], Any]]

__all__ = [
    "Error", "Generation", "Model", "QuantizedTensor", "Scheme", "Token", "Tokenizer", "__version__",
    "bench_attention", "bench_decode", "bench_gemv", "bench_memory", "bench_prefill", "calibrate_kv", "compare", "convert", "dequantize", "export", "formats", "imatrix", "inspect",
    "plan", "ppl", "quantize", "quantize_tensor", "synth",
]


def _path(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def formats() -> list[dict]:
    """Every number format with its numeric facts (``lowbit formats --json``)."""
    return json.loads(_formats_json())


def dequantize(tensor: QuantizedTensor):
    """float32 [rows, cols] NumPy array of a QuantizedTensor (a new array)."""
    return tensor.dequantize()


def quantize(
    model: PathLike,
    out: PathLike,
    recipe: Union[Mapping[str, Any], PathLike, None] = None,
    *,
    format: Optional[str] = None,
    method: str = "rtn",
    group: int = 0,
    asym: bool = False,
    save_as: str = "lowbit",
    token_embedding_type: Optional[str] = None,
    output_tensor_type: Optional[str] = None,
    eval: Optional[PathLike] = None,
    eval_ctx: int = 256,
    threads: int = 0,
    max_ram: Optional[str] = None,
    resume: bool = False,
    stop_after: int = 0,
    checkpoint_every: float = 60.0,
    allow_nonfinite: bool = False,
    progress: Progress = None,
) -> Optional[dict]:
    """Quantizes a whole model into ``out`` and returns its recipe card (what ``lowbit quantize --json`` prints).

    ``recipe`` is what ``--recipe`` reads: a dict or the path of a JSON file. Without one, ``format`` (with
    ``method``, ``group``, ``asym``) makes a one-line recipe, as the command's flags do. ``save_as`` is
    ``lowbit``, ``gguf:TYPE``, ``gptq``, ``gptq_v2``, ``awq`` or ``compressed-tensors``; with ``gguf:TYPE``,
    ``token_embedding_type`` and ``output_tensor_type`` are llama-quantize's options of those names. ``progress(block,
    blocks, tensor)`` is called before each tensor; without it a bar is drawn when stderr is a terminal.
    Ctrl-C stops the run with KeyboardInterrupt and writes no output. Returns None when ``stop_after``
    stopped the run (its state is in ``out + '.partial'``; continue with ``resume=True``).
    """
    model, out = os.fspath(model), os.fspath(out)
    recipe_path = ""
    recipe_json = ""
    if recipe is None:
        if format is None:
            format = _default_format_for(save_as, out)
            if not format:
                raise Error("quantize: give recipe= (a dict or a file) or format= (e.g. 'int4:g128')")
        recipe_json = json.dumps({"method": method, "format": _scheme_text_from_flags(format, group, asym)})
    elif isinstance(recipe, Mapping):
        if format is not None:
            raise Error("quantize: give recipe= or format=, not both")
        recipe_json = json.dumps(recipe)
    else:
        recipe_path = os.fspath(recipe)
    with progress_or_bar(progress, "quantize") as report:
        result = json.loads(
            _quantize(model, out, recipe_json, recipe_path, save_as, token_embedding_type or "",
                      output_tensor_type or "", _path(eval), eval_ctx, threads, max_ram, resume,
                      stop_after, checkpoint_every, allow_nonfinite, report))
    return result["card"]


def export(
    model: PathLike,
    out: PathLike,
    *,
    to: str = "gguf",
    type: str = "Q8_0",
    pure: bool = False,
    token_embedding_type: str = "",
    output_tensor_type: str = "",
    imatrix: Optional[PathLike] = None,
    calib: Optional[PathLike] = None,
    calib_samples: int = 128,
    calib_len: int = 256,
    seed: int = 0,
    damp: float = 0.01,
    tokenizer: Optional[PathLike] = None,
    name: str = "",
    format: str = "",
    scheme: str = "",
    max_shard_size: str = "5G",
    threads: int = 0,
    allow_nonfinite: bool = False,
    progress: Progress = None,
) -> dict:
    """Writes ``model`` for another engine and returns what ``lowbit export --json`` prints.

    ``to="gguf"`` (the default) writes the ``.gguf`` file ``out`` for llama.cpp: ``type`` is a GGUF type or
    llama-quantize mix (``Q4_K_M``, ``IQ4_XS``, ...), with an importance matrix (``imatrix``) or a calibration
    text (``calib``: GPTQ onto each tensor's grid); ``token_embedding_type`` / ``output_tensor_type`` set those two
    tables' ggml types past the mix, as llama-quantize's options do. ``to`` = ``gptq``, ``awq`` or ``compressed-tensors`` writes a
    folder vLLM and transformers load, repacking a lowbit quantized folder's codes (or quantizing a float one with
    ``scheme``, e.g. ``int4:g128``); ``format="gptq_v2"`` writes true zero points. ``progress(done, total,
    tensor)`` is called as it goes; without it a bar is drawn when stderr is a terminal.
    """
    with progress_or_bar(progress, "export") as report:
        return json.loads(
            _export(os.fspath(model), os.fspath(out), to, type, pure, token_embedding_type, output_tensor_type,
                    _path(imatrix) or "", _path(calib) or "",
                    calib_samples, calib_len, seed, damp, _path(tokenizer) or "", name, format, scheme,
                    max_shard_size, threads, allow_nonfinite, report))


def convert(
    model: PathLike,
    out: PathLike,
    *,
    to: str,
    format: str = "",
    type: str = "Q8_0",
    scheme: str = "",
    text: Optional[PathLike] = None,
    tokenizer: Optional[PathLike] = None,
    ctx: int = 256,
    max_shard_size: str = "5G",
    threads: int = 0,
    allow_nonfinite: bool = False,
    progress: Progress = None,
) -> dict:
    """Repacks the quantized ``model`` as ``to`` (``lowbit``, ``gptq``, ``awq``, ``compressed-tensors`` or
    ``gguf``) and returns what ``lowbit convert --json`` prints.

    The codes go over unchanged wherever the format holds them; a linear it cannot hold is an Error naming the
    field, unless ``scheme`` asks to quantize such linears again (engine folders; GGUF encodes them with
    ``type``'s mix). The output is read back and every matrix compared with the input's (``matrices``,
    ``exact``, ``max_abs_diff``); with ``text``, ``compare`` holds KL(model || out) and both perplexities.
    ``progress(done, total, stage)`` is called as it goes.
    """
    with progress_or_bar(progress, "convert") as report:
        return json.loads(
            _convert(os.fspath(model), os.fspath(out), to, format, type, scheme, _path(text) or "",
                     _path(tokenizer) or "", ctx, max_shard_size, threads, allow_nonfinite, report))


def imatrix(
    model: PathLike,
    calib: PathLike,
    out: PathLike,
    *,
    ctx: int = 512,
    chunks: int = 0,
    tokenizer: Optional[PathLike] = None,
    threads: int = 0,
    progress: Progress = None,
) -> dict:
    """Writes the importance matrix of every decoder linear to ``out`` in llama.cpp's imatrix GGUF format (for
    ``export(imatrix=...)`` or ``llama-quantize --imatrix``), from ``calib`` cut into chunks of ``ctx`` tokens as
    llama-imatrix cuts it (``chunks``: at most this many); the fields of ``lowbit imatrix --json``."""
    with progress_or_bar(progress, "imatrix") as report:
        return json.loads(_imatrix(os.fspath(model), os.fspath(calib), os.fspath(out), ctx, chunks,
                                   _path(tokenizer) or "", threads, report))


def calibrate_kv(
    model: PathLike,
    calib: PathLike,
    *,
    out: Optional[PathLike] = None,
    dtype: str = "fp8_e4m3",
    samples: int = 32,
    length: int = 256,
    seed: int = 0,
    threads: int = 0,
) -> dict:
    """Static FP8 KV-cache scales per layer from ``calib``, written to ``out`` (default: the model's
    ``kv_cache_scales.json``, which ``ppl``, ``compare`` and the exports pick up); the fields of
    ``lowbit calibrate-kv --json``."""
    return json.loads(_calibrate_kv(os.fspath(model), os.fspath(calib), _path(out) or "", dtype, samples, length, seed,
                                    threads))


def ppl(
    model: PathLike,
    text: PathLike,
    *,
    ctx: int = 256,
    threads: int = 0,
    tokenizer: Optional[PathLike] = None,
    quantize: Optional[str] = None,
    kv_cache_dtype: str = "fp32",
    kv_scales: Optional[PathLike] = None,
    save_base: Optional[PathLike] = None,
    kl_base: Optional[PathLike] = None,
    top_k: int = 32,
    allow_nonfinite: bool = False,
    progress: Progress = None,
) -> dict:
    """Perplexity with llama-perplexity's protocol; the fields of ``lowbit ppl --json``."""
    with progress_or_bar(progress, "ppl") as report:
        return json.loads(
            _ppl(os.fspath(model), os.fspath(text), ctx, threads, _path(tokenizer), quantize, kv_cache_dtype,
                 _path(kv_scales), _path(save_base), _path(kl_base), top_k, allow_nonfinite, report))


def compare(
    base: PathLike,
    model: PathLike,
    text: PathLike,
    *,
    ctx: int = 256,
    threads: int = 0,
    tokenizer: Optional[PathLike] = None,
    quantize: Optional[str] = None,
    kv_cache_dtype: str = "fp32",
    kv_scales: Optional[PathLike] = None,
    allow_nonfinite: bool = False,
    progress: Progress = None,
) -> dict:
    """KL divergence, top-1 agreement and perplexities of ``model`` against ``base``; the fields of
    ``lowbit compare --json``."""
    with progress_or_bar(progress, "compare") as report:
        return json.loads(
            _compare(os.fspath(base), os.fspath(model), os.fspath(text), ctx, threads, _path(tokenizer), quantize,
                     kv_cache_dtype, _path(kv_scales), allow_nonfinite, report))


def inspect(path: PathLike, *, gpus: Sequence[str] = (), engine_flags: Sequence[str] = ()) -> dict:
    """A checkpoint's quantization, layer by layer, with vLLM's kernel path per GPU (``lowbit inspect --json``)."""
    return json.loads(_inspect(os.fspath(path), list(gpus), list(engine_flags)))


def plan(
    model: Union[PathLike, str],
    formats: Iterable[str] = ("bf16", "int4:g128"),
    *,
    hardware: str = "H100-SXM",
    ctx: int = 4096,
    batch: int = 1,
    kv_cache_dtype: str = "fp16",
    quantize_embeddings: bool = False,
) -> dict:
    """Memory and decode roofline of a model (a folder, or a preset name such as 'llama-3-8b') in each format on
    the given hardware (``lowbit plan --json``)."""
    return json.loads(_plan(os.fspath(model), list(formats), hardware, ctx, batch, kv_cache_dtype,
                            quantize_embeddings))


def synth(
    preset: str,
    out: PathLike,
    *,
    layers: int = 0,
    dtype: str = "BF16",
    seed: int = 0,
    threads: int = 0,
) -> dict:
    """Writes a checkpoint with a preset's real shapes and deterministic random weights (config.json and
    model.safetensors in ``out``), for speed and memory measurements (``lowbit synth --json``). ``layers`` 0
    keeps the preset's; ``dtype`` is F32, BF16 or F16."""
    return json.loads(_synth(preset, os.fspath(out), layers, dtype, seed, threads))


def _bench(model, decode, formats, batch, ctx, steps, rounds, threads, kv_cache_dtype):
    if isinstance(formats, str):
        formats = [formats]
    if isinstance(batch, int):
        batch = [batch]
    return json.loads(_bench_speed(os.fspath(model), decode, list(formats), list(batch), ctx, steps, rounds, threads,
                                   kv_cache_dtype))


def bench_decode(
    model: PathLike,
    formats: Union[str, Sequence[str]] = ("loaded",),
    *,
    batch: Union[int, Sequence[int]] = (1,),
    ctx: int = 512,
    steps: int = 8,
    rounds: int = 1,
    threads: int = 0,
    kv_cache_dtype: str = "fp32",
) -> list[dict]:
    """Decode tokens/s of a model per format and batch size, one row each (``lowbit bench decode --json``).

    ``formats``: ``loaded`` (as the file holds it), ``fp32``, or schemes such as ``int4:g128`` (RTN of every
    linear in memory). Every format is measured in the same run; ``rounds`` > 1 measures them round-robin and
    keeps each one's best, so the ratios survive a noisy machine."""
    return _bench(model, True, formats, batch, ctx, steps, rounds, threads, kv_cache_dtype)


def bench_prefill(
    model: PathLike,
    formats: Union[str, Sequence[str]] = ("loaded",),
    *,
    batch: Union[int, Sequence[int]] = (1,),
    ctx: int = 256,
    rounds: int = 1,
    threads: int = 0,
    kv_cache_dtype: str = "fp32",
) -> list[dict]:
    """Prefill tokens/s of a model per format and batch size (``lowbit bench prefill --json``); the arguments
    are bench_decode's, ``ctx`` being the prompt length."""
    return _bench(model, False, formats, batch, ctx, 0, rounds, threads, kv_cache_dtype)


def bench_memory(*, size_mib: int = 1536, threads: int = 0) -> dict:
    """The machine's memory bandwidth, STREAM-like copy and triad, best of 5 passes (``lowbit bench memory
    --json``): the bound every other benchmark is a fraction of."""
    return json.loads(_bench_memory(size_mib, threads))


def bench_gemv(
    format: str = "int4:g128",
    *,
    rows: int = 4096,
    cols: int = 4096,
    tokens: int = 1,
    working_set_mib: int = 512,
    seconds: float = 1.0,
    rounds: int = 3,
    size_mib: int = 1536,
    threads: int = 0,
) -> dict:
    """Matrix-vector speed of one weight format (a scheme, ``fp32``, ``bf16`` or a GGUF block type) against the
    triad measured before each round, fastest of ``rounds`` (``lowbit bench gemv --json``)."""
    return json.loads(_bench_gemv(format, rows, cols, working_set_mib, tokens, seconds, rounds, size_mib, threads))


def bench_attention(
    *,
    ctx: int = 4096,
    kv_cache_dtype: str = "fp32",
    kv_heads: int = 8,
    seconds: float = 1.0,
    size_mib: int = 1536,
    threads: int = 0,
) -> dict:
    """One decode step's attention over ``ctx`` cached positions: the engine's blocked kernel against the
    two-pass reference and the KV bytes' bandwidth bound (``lowbit bench attention --json``)."""
    return json.loads(_bench_attention(ctx, kv_cache_dtype, kv_heads, seconds, size_mib, threads))
