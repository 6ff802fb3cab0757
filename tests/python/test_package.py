"""The package's own face: __version__, the public names, `python -m hopattn`."""

import os
import re
import subprocess
import sys
from pathlib import Path

import hopattn
from hopattn import _lib

REPO = Path(__file__).resolve().parents[2]


def test_version_is_the_library_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", hopattn.__version__)
    assert hopattn.__version__ == hopattn.version()


def test_version_is_the_cmake_project_version():
    # The wheel's CMake step checks this too; here it fails before anyone builds a wheel.
    cmake = (REPO / "CMakeLists.txt").read_text()
    project = re.search(r"project\(\s*hopattn\s+VERSION\s+([0-9.]+)", cmake)
    assert project, "project(hopattn VERSION ...) not found in CMakeLists.txt"
    assert hopattn.__version__ == project.group(1)


def test_public_names():
    for name in hopattn.__all__:
        assert hasattr(hopattn, name), name
    assert issubclass(hopattn.InvalidArgumentError, (hopattn.HopattnError, ValueError))
    assert issubclass(hopattn.InvalidTypeError, (hopattn.InvalidArgumentError, TypeError))
    assert issubclass(hopattn.HopattnError, RuntimeError)


def run_module(env_overrides):
    env = {**os.environ, **env_overrides}
    return subprocess.run([sys.executable, "-m", "hopattn"], capture_output=True, text=True,
                          env=env, timeout=60)


def test_python_m_hopattn_reports_version_build_and_backends():
    result = run_module({"HOPATTN_LIBRARY": str(_lib.find_library())})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"hopattn {hopattn.__version__}"
    assert lines[1] == f"library: {_lib.find_library()} (version {hopattn.version()})"
    assert "build:" in lines
    for info_line in hopattn.build_info().splitlines():
        assert f"  {info_line}" in lines
    cpu = "available" if hopattn.backend_available("cpu") else "not available"
    sm90 = "available" if hopattn.backend_available("sm90") else "not available"
    assert lines[-3:] == ["backends:", f"  cpu: {cpu}", f"  sm90: {sm90}"]


def test_python_m_hopattn_without_a_library_says_why(tmp_path):
    result = run_module({"HOPATTN_LIBRARY": str(tmp_path / "missing.so")})
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"hopattn {hopattn.__version__}"]
    assert "library: not loaded: HOPATTN_LIBRARY=" in result.stderr


def test_import_hopattn_does_not_import_torch():
    # torch is optional: a NumPy call must not import it, installed or not.
    code = ("import sys, numpy as np, hopattn\n"
            "q = np.ones((1, 4, 2, 8), np.float32)\n"
            "hopattn.attention(q, q, q)\n"
            "hopattn.attention_varlen(q[0], q[0], q[0], np.array([0, 4], np.int32),\n"
            "                         np.array([0, 4], np.int32), 4, 4)\n"
            "assert 'torch' not in sys.modules, 'hopattn imported torch'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "HOPATTN_LIBRARY": str(_lib.find_library())},
                            timeout=60)
    assert result.returncode == 0, result.stderr
