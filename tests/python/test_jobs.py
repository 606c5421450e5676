"""quantize, export, convert, imatrix, calibrate_kv, ppl, compare, inspect, plan and synth: the same numbers as the CLI's --json, to
the last digit (bench: the same rows);
Ctrl-C and errors leave no output."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

import lowbit
from conftest import ROOT, run_cli_json

RECIPE = {"method": "gptq", "format": "int4:g64", "calibration": {"samples": 16, "length": 128}}


def test_ppl_matches_the_cli(model_path, eval_text):
    py = lowbit.ppl(model_path, eval_text, ctx=128, threads=2)
    cli = run_cli_json("ppl", "--model", model_path, "--text", eval_text, "--ctx", "128", "--threads", "2")
    for key in ("ppl", "ppl_stderr", "tokens", "ctx", "chunks"):
        assert py[key] == cli[key], key
    assert py.keys() == cli.keys()


def test_compare_matches_the_cli(model_path, eval_text):
    calls = []
    py = lowbit.compare(model_path, model_path, eval_text, ctx=128, threads=2, quantize="int4:g32",
                        progress=lambda done, total, _: calls.append((done, total)))
    cli = run_cli_json("compare", "--base", model_path, "--model", model_path, "--quantize", "int4:g32", "--text",
                       eval_text, "--ctx", "128", "--threads", "2")
    assert py == cli
    assert py["kld_mean"] > 0 and calls[-1][0] == calls[-1][1] == py["tokens"] // 63


def test_gptq_quantize_matches_the_cli(model_path, calib_text, eval_text, tmp_path):
    recipe = dict(RECIPE, calibration=dict(RECIPE["calibration"], file=calib_text))
    seen = []
    card = lowbit.quantize(model_path, tmp_path / "py", recipe=recipe, eval=eval_text, eval_ctx=128, threads=2,
                           progress=lambda block, blocks, tensor: seen.append((block, blocks, tensor)))
    recipe_file = tmp_path / "recipe.json"
    recipe_file.write_text(__import__("json").dumps(recipe))
    cli = run_cli_json("quantize", model_path, "-o", str(tmp_path / "cli"), "--recipe", str(recipe_file), "--eval",
                       eval_text, "--eval-ctx", "128", "--threads", "2")
    assert card["eval"] == cli["eval"]  # the same KL, PPL and top-1, to the last digit
    assert card["bits_per_weight"] == cli["bits_per_weight"] and card["recipe"] == cli["recipe"]
    assert [t["weight_mse"] for t in card["tensors"]] == [t["weight_mse"] for t in cli["tensors"]]
    files = sorted(p.name for p in (tmp_path / "py").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "cli").iterdir())
    for name in files:
        if name.endswith(".safetensors"):
            assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert seen[0][:2] == (0, 6) and seen[-1] == (6, 6, "") and any("q_proj" in t for _, _, t in seen)
    # the folder it wrote loads and runs
    assert lowbit.ppl(tmp_path / "py", eval_text, ctx=128)["ppl"] == pytest.approx(card["eval"]["ppl"], rel=1e-9)


def test_quantize_with_format_keywords(model_path, tmp_path):
    card = lowbit.quantize(model_path, tmp_path / "out", format="int8", group=-1)
    assert card["scheme"] == "int8:channel:scale=f16" and card["recipe"]["method"] == "rtn"


def test_quantize_to_gguf_with_table_types(model_path, tmp_path):
    card = lowbit.quantize(model_path, tmp_path / "t.gguf", save_as="gguf:Q4_0", token_embedding_type="Q8_0",
                           output_tensor_type="q5_k")
    assert card["gguf"]["type"] == "Q4_0"
    types = {t["name"]: t["type"] for t in lowbit.inspect(tmp_path / "t.gguf")["layers"]}
    assert types["token_embd"] == "Q8_0" and types["output"] == "Q5_K" and types["blk.0.ffn_down"] == "Q4_0"
    with pytest.raises(lowbit.Error, match="apply to --save-as gguf:TYPE"):
        lowbit.quantize(model_path, tmp_path / "bad", format="int4", output_tensor_type="Q5_K")


def test_quantize_errors_name_the_field_and_write_nothing(model_path, tmp_path):
    with pytest.raises(lowbit.Error, match="bogus"):
        lowbit.quantize(model_path, tmp_path / "a", recipe={"method": "rtn", "format": "int4", "bogus": 1})
    with pytest.raises(lowbit.Error, match="int9"):
        lowbit.quantize(model_path, tmp_path / "b", format="int9")
    with pytest.raises(lowbit.Error, match="no-such-model"):
        lowbit.quantize(tmp_path / "no-such-model", tmp_path / "c", format="int4")
    with pytest.raises(ValueError, match="from the callback"):
        def fail(*_):
            raise ValueError("from the callback")
        lowbit.quantize(model_path, tmp_path / "d", format="int4", progress=fail)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_quantize_leaves_no_output(model_path, calib_text, tmp_path):
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import sys, time, lowbit
        def progress(block, blocks, tensor):
            print("tensor", block, tensor, flush=True)
            time.sleep(0.2)
        try:
            lowbit.quantize({model_path!r}, {str(out)!r}, recipe={{"method": "gptq", "format": "int4:g64",
                            "calibration": {{"file": {calib_text!r}, "samples": 8, "length": 64}}}},
                            checkpoint_every=1e9, progress=progress)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    first = child.stdout.readline()
    assert first.startswith("tensor"), first
    child.send_signal(signal.SIGINT)
    rest = child.stdout.read()
    assert child.wait(timeout=120) == 3, rest
    assert "interrupted" in rest and not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_export_matches_the_cli_byte_for_byte(model_path, tmp_path):
    seen = []
    py = lowbit.export(model_path, tmp_path / "py.gguf", type="Q4_K_M", threads=2,
                       progress=lambda done, total, tensor: seen.append((done, total, tensor)))
    cli = run_cli_json("export", model_path, "-o", str(tmp_path / "cli.gguf"), "--type", "q4_k_m", "--threads", "2")
    assert {k: v for k, v in py.items() if k != "out"} == {k: v for k, v in cli.items() if k != "out"}
    assert py["type"] == "Q4_K_M" and {t["type"] for t in py["tensors"]} >= {"Q4_K", "Q6_K"}
    assert (tmp_path / "py.gguf").read_bytes() == (tmp_path / "cli.gguf").read_bytes()
    assert seen and seen[-1][0] == seen[-1][1] == len(py["tensors"])
    # an engine folder from a float model, quantized on the way (RTN)
    gptq = lowbit.export(model_path, tmp_path / "gptq", to="gptq", scheme="int4:g64")
    assert gptq["quant_method"] == "gptq" and gptq["quantized_linears"] == 42
    assert lowbit.inspect(tmp_path / "gptq")["quant_method"] == "gptq"
    # llama-quantize's table-type options, past the mix
    tables = lowbit.export(model_path, tmp_path / "tables.gguf", type="Q4_K_M", token_embedding_type="q5_k",
                           output_tensor_type="Q5_K")
    types = {t["name"]: t["type"] for t in tables["tensors"]}
    assert types["token_embd.weight"] == types["output.weight"] == "Q5_K" and types["blk.0.attn_q.weight"] == "Q4_K"
    with pytest.raises(lowbit.Error, match="Q9_K"):
        lowbit.export(model_path, tmp_path / "bad.gguf", type="Q9_K")
    with pytest.raises(lowbit.Error, match="--type, --token-embedding-type and --output-tensor-type apply to GGUF"):
        lowbit.export(model_path, tmp_path / "bad", to="awq", type="Q4_0")
    with pytest.raises(lowbit.Error, match="--output-tensor-type 'Q9_K'"):
        lowbit.export(model_path, tmp_path / "bad.gguf", type="Q4_K_M", output_tensor_type="Q9_K")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.gguf", "gptq", "py.gguf", "tables.gguf"]


def test_convert_matches_the_cli(model_path, eval_text, tmp_path):
    lowbit.quantize(model_path, tmp_path / "int3", recipe={"method": "rtn", "format": "int3:g128"})
    lowbit.export(model_path, tmp_path / "gptq", to="gptq", scheme="int4:g64")
    # an exact repack, measured: every matrix read back identical
    stages = []
    py = lowbit.convert(tmp_path / "gptq", tmp_path / "py-ct", to="compressed-tensors", threads=2,
                        progress=lambda done, total, stage: stages.append(stage))
    cli = run_cli_json("convert", str(tmp_path / "gptq"), "-o", str(tmp_path / "cli-ct"), "--to",
                       "compressed-tensors", "--threads", "2")
    assert {k: v for k, v in py.items() if k != "out"} == {k: v for k, v in cli.items() if k != "out"}
    assert py["exact"] and py["max_abs_diff"] == 0 and len(py["matrices"]) == 44
    assert {"convert", "measure"} <= set(stages)
    # 3-bit codes have no AWQ form: an error, unless a scheme asks for the change, which is then measured (the
    # 42 block linears quantized again, the int8 lm_head stored dense)
    with pytest.raises(lowbit.Error, match="AWQ checkpoints keep lm_head in full precision.*\n.*--scheme"):
        lowbit.convert(tmp_path / "int3", tmp_path / "bad", to="awq")
    lossy = lowbit.convert(tmp_path / "int3", tmp_path / "awq", to="awq", scheme="int4:g128:asym:scale=f16",
                           text=eval_text, ctx=128)
    assert not lossy["exact"] and len(lossy["changed"]) == 43 and lossy["compare"]["kld_mean"] > 0
    assert "bad" not in {p.name for p in tmp_path.iterdir()}


def test_imatrix_and_calibrate_kv_match_the_cli(model_path, calib_text, tmp_path):
    chunks = []
    py = lowbit.imatrix(model_path, calib_text, tmp_path / "py.imatrix.gguf", ctx=128, chunks=4, threads=2,
                        progress=lambda done, total, _: chunks.append((done, total)))
    cli = run_cli_json("imatrix", model_path, "--calib", calib_text, "-o", str(tmp_path / "cli.imatrix.gguf"),
                       "--ctx", "128", "--chunks", "4", "--threads", "2")
    assert {k: v for k, v in py.items() if k != "out"} == {k: v for k, v in cli.items() if k != "out"}
    assert py["entries"] == 42 and py["tokens"] == 512 and chunks[-1] == (4, 4)
    assert (tmp_path / "py.imatrix.gguf").read_bytes() == (tmp_path / "cli.imatrix.gguf").read_bytes()
    # the file it wrote feeds a GGUF export
    assert lowbit.export(model_path, tmp_path / "iq4.gguf", type="IQ4_XS", imatrix=tmp_path / "py.imatrix.gguf")[
        "type"] == "IQ4_XS"

    kv = lowbit.calibrate_kv(model_path, calib_text, out=tmp_path / "py-kv.json", samples=4, length=64, threads=2)
    cli = run_cli_json("calibrate-kv", "--model", model_path, "--calib", calib_text, "-o", str(tmp_path / "cli-kv.json"),
                       "--samples", "4", "--len", "64", "--threads", "2")
    assert {k: v for k, v in kv.items() if k != "out"} == {k: v for k, v in cli.items() if k != "out"}
    assert len(kv["k_scales"]) == 6 and all(s > 0 for s in kv["k_scales"] + kv["v_scales"]) and kv["windows"] == 4
    assert (tmp_path / "py-kv.json").read_bytes() == (tmp_path / "cli-kv.json").read_bytes()
    with pytest.raises(lowbit.Error, match="fp8_e4m3"):
        lowbit.calibrate_kv(model_path, calib_text, out=tmp_path / "bad.json", dtype="fp9")
    assert not (tmp_path / "bad.json").exists()


def test_inspect_and_plan_match_the_cli(model_path):
    assert lowbit.inspect(model_path) == run_cli_json("inspect", model_path)
    py = lowbit.plan("llama-3-8b", ["bf16", "int4:g128"], hardware="H100-SXM", ctx=8192)
    cli = run_cli_json("plan", "--preset", "llama-3-8b", "--formats", "bf16,int4:g128", "--hw", "H100-SXM", "--ctx",
                       "8192")
    assert py == cli


def test_example_script_runs(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "quantize_and_compare.py"), "--out",
                        str(tmp_path / "out"), "--ctx", "128"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "KL" in r.stdout


def test_synth_and_bench_match_the_cli(tmp_path):
    py = lowbit.synth("llama-2-7b", tmp_path / "py", layers=1, dtype="F16", seed=3)
    cli = run_cli_json("synth", "--preset", "llama-2-7b", "--layers", "1", "--dtype", "F16", "--seed", "3", "-o",
                       str(tmp_path / "cli"))
    assert {k: v for k, v in py.items() if k != "out"} == {k: v for k, v in cli.items() if k != "out"}
    assert py["layers"] == 1 and py["bytes"] == 2 * py["parameters"]  # F16 tensors; the file adds its header
    assert 0 < (tmp_path / "py" / "model.safetensors").stat().st_size - py["bytes"] < 4096
    assert (tmp_path / "py" / "config.json").read_bytes() == (tmp_path / "cli" / "config.json").read_bytes()
    with pytest.raises(lowbit.Error, match="F32, BF16, F16"):
        lowbit.synth("llama-2-7b", tmp_path / "bad", dtype="int4")
    with pytest.raises(lowbit.Error, match="no-such-model"):
        lowbit.synth("no-such-model", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()

    # Speeds differ run to run; what was measured must not.
    rows = lowbit.bench_decode(tmp_path / "py", ["loaded", "int8"], batch=[1, 2], ctx=8, steps=2)
    cli_rows = run_cli_json("bench", "decode", "--model", str(tmp_path / "cli"), "--quantize", "loaded,int8",
                            "--batch", "1,2", "--ctx", "8", "--steps", "2")
    shape = lambda rs: [(r["format"], r["batch"], r["weight_bytes"]) for r in rs]  # noqa: E731
    assert shape(rows) == shape(cli_rows)
    f16_linears = 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 32000 * 4096)  # q k v o, gate up down, lm_head
    assert [r["weight_bytes"] for r in rows if r["format"] == "loaded"] == [f16_linears] * 2
    assert all(r["tokens_per_second"] > 0 for r in rows)
    prefill = lowbit.bench_prefill(tmp_path / "py", "loaded", batch=1, ctx=16)
    assert [(r["format"], r["batch"]) for r in prefill] == [("loaded", 1)] and prefill[0]["tokens_per_second"] > 0


def test_memory_gemv_and_attention_benches_match_the_cli():
    small = ("--size-mib", "64", "--threads", "2")
    memory = lowbit.bench_memory(size_mib=64, threads=2)
    assert memory.keys() == run_cli_json("bench", "memory", *small).keys()
    assert abs(memory["bytes"] - (64 << 20)) < 64 and memory["triad_gbps"] > 0 and memory["threads"] == 2  # 3 float arrays

    gemv = lowbit.bench_gemv("int4:g128", rows=512, cols=1024, working_set_mib=8, seconds=0.05, rounds=1,
                             size_mib=64, threads=2)
    cli = run_cli_json("bench", "gemv", "--format", "int4", "--group", "128", "--rows", "512", "--cols", "1024",
                       "--working-set-mib", "8", "--seconds", "0.05", "--rounds", "1", *small)
    measured = ("gbps", "fraction_of_bandwidth", "triad_gbps")
    assert {k: v for k, v in gemv.items() if k not in measured} == {k: v for k, v in cli.items() if k not in measured}
    assert gemv["bits_per_weight"] == 4 + 16 / 128  # int4 codes and one fp16 scale per 128 weights
    assert gemv["working_set_bytes"] == gemv["matrices"] * 512 * 1024 * gemv["bits_per_weight"] / 8 >= 8 << 20
    with pytest.raises(lowbit.Error, match="int9"):
        lowbit.bench_gemv("int9")

    attention = lowbit.bench_attention(ctx=256, kv_heads=4, seconds=0.05, size_mib=64, threads=2)
    cli = run_cli_json("bench", "attention", "--ctx", "256", "--kv-heads", "4", "--seconds", "0.05", *small)
    measured = ("blocked_us", "two_pass_us", "speedup", "triad_gbps", "bandwidth_bound_us", "blocked_over_bound")
    assert {k: v for k, v in attention.items() if k not in measured} == \
        {k: v for k, v in cli.items() if k not in measured}
    assert attention["kv_bytes"] == 2 * 256 * 4 * 128 * 4  # K and V, positions x KV heads x head_dim, fp32
    with pytest.raises(lowbit.Error, match="--kv-heads 5"):
        lowbit.bench_attention(kv_heads=5)
