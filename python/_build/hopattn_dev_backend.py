"""The build backend of python/pyproject.toml: setuptools' editable install, and nothing else.

`pip install -e python/` links the sources into an environment, where hopattn/_lib.py finds the
library in the repository's build*/ folders. A wheel built from here would hold no library (and
one with a library copied in would be mislabelled as pure Python), so building one stops with a
pointer to the real wheel at the repository root.
"""

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517/660 hooks, editable ones included)

_USE_THE_ROOT = (
    "python/ is the development install only (pip install -e python/, next to a CMake build). "
    "For a wheel with the library inside, build from the repository root: pip install . "
    "(or pip wheel . -w DIR).")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError(_USE_THE_ROOT)


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError(_USE_THE_ROOT)


# PEP 660: only the editable hooks build anything.
build_editable = _setuptools.build_editable
