"""The Python package's tests (make test-python): run against the package installed into the venv by
`pip install .`, with the `lowbit` command the same install put beside it as the CLI reference."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "kjv-llama-7m"


def lowbit_cli() -> str:
    exe = pathlib.Path(sys.executable).parent / "lowbit"
    assert exe.exists(), f"{exe}: pip install . puts the lowbit command beside the package"
    return str(exe)


def run_cli_json(*args: str) -> dict:
    r = subprocess.run([lowbit_cli(), *args, "--json"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="session")
def model_path() -> str:
    return str(MODEL)


@pytest.fixture(scope="session")
def eval_text(tmp_path_factory) -> str:
    """The first 24 KB of the bundled model's test text: a few chunks of 128 tokens."""
    path = tmp_path_factory.mktemp("text") / "kjv-24k.txt"
    path.write_bytes((ROOT / "data" / "kjv-test.txt").read_bytes()[:24_000])
    return str(path)


@pytest.fixture(scope="session")
def calib_text() -> str:
    return str(ROOT / "data" / "kjv-train.txt")
