#!/usr/bin/env python3
"""Emulates the SM90 kernel's online-softmax numerics on the CPU, to weigh a softmax change's
accuracy and its rescale savings before spending GPU time on it.

The kernel's arithmetic as NumPy sees it: float32 scores, key blocks of 128 visited last to first,
a running row max, P = exp2(S * c - max * c) rounded to bfloat16 for P V, float32 row sums and
accumulators, O rounded to bfloat16. Variants:
  exact        the running max is the true max (FA3, and hopattn since v8);
  stale T      the max moves only when a block's max exceeds it by more than T in log2 units, so
               P <= 2^T and the output rescale is skipped meanwhile (FlashAttention-4's rule);
  ... +sum     the row sum taken over the bfloat16-rounded P that P V uses.
Reports the RMSE against float64 on the outlier inputs of bench_forward.py's accuracy check (N(0,1)
with 0.1% of entries x10, bfloat16), and the share of warp steps (16 rows) that still rescale.

Usage: python3 bench/softmax_numerics.py [--seqlen 2048] [--heads 4]
"""
import argparse

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
BLOCK_N = 128
ROWS_PER_WARP = 16  # a warp holds 16 rows of a 64-row WGMMA accumulator


def outlier_inputs(rng, heads, seqlen, head_dim):
    def make():
        x = rng.standard_normal((heads, seqlen, head_dim))
        x = np.where(rng.random(x.shape) < 1e-3, x * 10, x)
        return x.astype(BF16).astype(np.float64)
    return make(), make(), make()


def reference(q, k, v, scale):
    out = np.empty_like(q)
    for h in range(q.shape[0]):
        scores = q[h] @ k[h].T * scale
        p = np.exp(scores - scores.max(1, keepdims=True))
        out[h] = (p / p.sum(1, keepdims=True)) @ v[h]
    return out


def emulate(q, k, v, scale, threshold, rounded_sum):
    """threshold None: the exact running max; else the stale-max threshold in log2 units."""
    c = np.float32(scale * 1.4426950408889634)
    heads, seqlen, head_dim = q.shape
    out = np.empty_like(q)
    warp_steps = rescaling_steps = 0
    for h in range(heads):
        scores = (q[h] @ k[h].T).astype(np.float32)
        row_max = np.full(seqlen, -np.inf, np.float32)
        row_sum = np.zeros(seqlen, np.float32)
        acc = np.zeros((seqlen, head_dim), np.float32)
        for j0 in range(seqlen - BLOCK_N, -1, -BLOCK_N):
            block = scores[:, j0:j0 + BLOCK_N]
            block_max = block.max(1)
            seen = row_max != -np.inf
            if threshold is None:
                keep = seen & (block_max <= row_max)
            else:
                keep = seen & ((block_max - row_max) * c <= threshold)
            new_max = np.where(keep, row_max, np.maximum(row_max, block_max))
            rescale = np.where(seen, np.exp2(row_max * c - new_max * c), 0).astype(np.float32)
            rescale[keep] = 1
            if seen.any():
                warp_steps += seqlen // ROWS_PER_WARP
                rescaling_steps += int((rescale != 1).reshape(-1, ROWS_PER_WARP).any(1).sum())
            p = np.exp2(block * c - (new_max * c)[:, None]).astype(np.float32)
            p_rounded = p.astype(BF16).astype(np.float32)
            row_sum = row_sum * rescale + (p_rounded if rounded_sum else p).sum(1, dtype=np.float32)
            acc = acc * rescale[:, None] + (p_rounded.astype(np.float64) @ v[h][j0:j0 + BLOCK_N]).astype(np.float32)
            row_max = new_max
        out[h] = (acc / row_sum[:, None]).astype(BF16).astype(np.float64)
    return out, rescaling_steps / max(warp_steps, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args()
    q, k, v = outlier_inputs(np.random.default_rng(1234), args.heads, args.seqlen, args.head_dim)
    scale = 1 / np.sqrt(args.head_dim)
    ref = reference(q, k, v, scale)
    exact_rmse = None
    print(f"{'variant':24} {'rmse':>10} {'vs exact':>9} {'warp steps rescaling':>21}")
    for threshold in (None, 1, 2, 4, 8):
        for rounded_sum in (False, True):
            out, rescaling = emulate(q, k, v, scale, threshold, rounded_sum)
            rmse = float(np.sqrt(((out - ref) ** 2).mean()))
            exact_rmse = exact_rmse or rmse
            name = ("exact" if threshold is None else f"stale {threshold}") + (" +sum" if rounded_sum else "")
            print(f"{name:24} {rmse:10.4e} {rmse / exact_rmse - 1:+9.2%} {rescaling:21.3f}")


if __name__ == "__main__":
    main()
