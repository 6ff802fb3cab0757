// FP8 GPU quantisation tests: written next.
