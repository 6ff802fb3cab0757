# The package's version: the same as the library's (project(hopattn VERSION ...) in the root
# CMakeLists.txt). The wheel's metadata reads it from here; tests/python/test_package.py and the
# wheel's CMake step check that the two agree.
__version__ = "0.1.0"
