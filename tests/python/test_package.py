"""What `pip install .` put in place: the module's type stubs, the py.typed marker and the command."""

import pathlib
import subprocess
import sys

import lowbit
from conftest import lowbit_cli


def test_stubs_describe_the_module():
    package = pathlib.Path(lowbit.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_lowbit.pyi").read_text()
    for name in ("class Scheme", "class QuantizedTensor", "class Model", "def quantize_tensor", "def generate"):
        assert name in stub, name


def test_the_command_beside_the_package_is_the_same_build():
    out = subprocess.run([lowbit_cli(), "--version"], capture_output=True, text=True, check=True).stdout
    assert lowbit.__version__ in out
