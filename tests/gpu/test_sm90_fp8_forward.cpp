// FP8 forward GPU tests: written next.
