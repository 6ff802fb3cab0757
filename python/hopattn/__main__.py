"""`python -m hopattn`: what is installed, and which backends can run here."""

import sys


def main() -> int:
    import hopattn
    from hopattn import _lib

    print(f"hopattn {hopattn.__version__}")
    try:
        path = _lib.find_library()
        hopattn.library()
    except OSError as error:
        print(f"library: not loaded: {error}", file=sys.stderr)
        return 1
    print(f"library: {path} (version {hopattn.version()})")
    print("build:")
    for line in hopattn.build_info().splitlines():
        print(f"  {line}")
    print("backends:")
    for name in ("cpu", "sm90"):
        state = "available" if hopattn.backend_available(name) else "not available"
        print(f"  {name}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
