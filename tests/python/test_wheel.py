"""The wheel as a user gets it: `pip wheel .` at the repository root (scikit-build-core compiles
the library, CPU-only), installed with --no-index into a fresh virtual environment, imported from
there with its bundled library, and run.

About 15 s on 2 cores; pip fetches the pinned scikit-build-core from PyPI for the isolated build.
Set HOPATTN_SKIP_WHEEL_TEST=1 to skip it locally (or deselect with -m "not wheel"); under CI=true
it always runs.
"""

import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _skip_reason():
    if os.environ.get("CI", "").lower() == "true":
        return None
    if os.environ.get("HOPATTN_SKIP_WHEEL_TEST", "") not in ("", "0"):
        return "HOPATTN_SKIP_WHEEL_TEST is set"
    return None


pytestmark = [pytest.mark.wheel,
              pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def run(command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} exited {result.returncode}\n"
        f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}")
    return result


def tree_listing():
    """What a build could leave in the tree: the root's entries (but the developers' own CMake
    folders, build-*) and everything under python/."""
    python = {str(p.relative_to(REPO)) for p in (REPO / "python").rglob("*")
              if "__pycache__" not in p.parts}
    return python | {p.name for p in REPO.iterdir() if not p.name.startswith("build-")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    before = tree_listing()
    env = {k: v for k, v in os.environ.items() if k != "HOPATTN_ENABLE_CUDA"}  # CPU-only
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "--wheel-dir", out, REPO], env=env, timeout=900)
    left = sorted(tree_listing() - before)
    assert not left, f"the wheel build left files in the tree: {left}"
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv_python(wheel, tmp_path_factory):
    """A fresh environment with the wheel installed from the file alone (--no-index). NumPy, the
    one dependency, is this interpreter's, made visible through a folder of links to it."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root / "env", with_pip=True)
    python = root / "env" / "bin" / "python"
    numpy_home = Path(np.__file__).resolve().parent.parent
    deps = root / "deps"
    deps.mkdir()
    for pattern in ("numpy", "numpy.libs", "numpy-*.dist-info"):
        for entry in numpy_home.glob(pattern):
            (deps / entry.name).symlink_to(entry)
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout
    Path(site.strip(), "numpy_from_the_test.pth").write_text(f"{deps}\n")
    run([python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", wheel])
    return python


def test_wheel_is_platform_specific(wheel):
    name, version, python_tag, abi_tag, platform_tag = wheel.stem.split("-")
    assert name == "hopattn"
    assert (python_tag, abi_tag) == ("py3", "none"), "a ctypes package fits any Python 3"
    assert platform_tag != "any"
    assert platform_tag == sysconfig.get_platform().replace("-", "_").replace(".", "_")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"hopattn-{version}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in metadata


def test_wheel_holds_the_package_and_one_library_only(wheel):
    import hopattn

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert f"-{hopattn.__version__}-" in wheel.name
    libraries = [n for n in names if n.startswith("hopattn/lib/")]
    assert len(libraries) == 1 and libraries[0].startswith("hopattn/lib/libhopattn.so"), libraries
    assert {"hopattn/__init__.py", "hopattn/__main__.py", "hopattn/attention.py"} <= set(names)
    # The headers, CMake package and tools of `cmake --install` have no place in site-packages.
    assert all(n.startswith(("hopattn/", f"hopattn-{hopattn.__version__}.dist-info/"))
               for n in names), names


def test_installed_wheel_runs_attention_with_its_bundled_library(venv_python, tmp_path):
    script = textwrap.dedent("""
        import numpy as np
        import hopattn
        from hopattn import _lib

        package = hopattn.__file__
        library = _lib.find_library()
        assert "site-packages" in package, package
        assert str(library).startswith(str(_lib._PACKAGE_DIR / "lib")), library
        rng = np.random.default_rng(0)
        q = rng.standard_normal((1, 5, 2, 16), dtype=np.float32)
        k = rng.standard_normal((1, 7, 1, 16), dtype=np.float32)
        v = rng.standard_normal((1, 7, 1, 16), dtype=np.float32)
        out = hopattn.attention(q, k, v, causal=True)
        s = np.einsum("bqhd,bkhd->bhqk", q, np.repeat(k, 2, axis=2)) / 4.0
        s = np.where(np.arange(7)[None, :] <= np.arange(5)[:, None] + 2, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), np.repeat(v, 2, axis=2))
        assert np.abs(out - ref).max() < 1e-5, np.abs(out - ref).max()
        try:
            hopattn.attention(q, k, v, causal="no")
        except hopattn.InvalidArgumentError as error:
            assert isinstance(error, TypeError)
        else:
            raise AssertionError("causal='no' was accepted")
        print(hopattn.__version__, package)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("HOPATTN_LIBRARY", "PYTHONPATH")}
    # Run outside the repository, so that nothing but the installed wheel can be imported.
    result = run([venv_python, "-c", script], cwd=tmp_path, env=env)
    assert str(REPO) not in result.stdout


def test_installed_wheel_python_m_hopattn(venv_python, tmp_path):
    import hopattn

    env = {k: v for k, v in os.environ.items() if k not in ("HOPATTN_LIBRARY", "PYTHONPATH")}
    lines = run([venv_python, "-m", "hopattn"], cwd=tmp_path, env=env).stdout.splitlines()
    assert lines[0] == f"hopattn {hopattn.__version__}"
    assert lines[1].startswith("library: ") and "site-packages/hopattn/lib/libhopattn.so" in lines[1]
    assert "  cpu: available" in lines
    assert "  sm90: not available" in lines  # the wheel is CPU-only by default
