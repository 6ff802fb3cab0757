// Which form of the forward kernel an input format gets, decided at compile time and read by the
// kernel's configuration (config.hpp), its tile (tile_size.hpp) and the tests that compare forms.
#pragma once

namespace hopattn::sm90 {

// Whether the forward kernel transposes V in shared memory: FP8 with V in rows, since FP8 WGMMA
// reads both operands K-major. 16-bit V, and FP8 V given transposed, are read as TMA brings them in.
constexpr bool kernel_transposes_v(int element_bytes, bool v_transposed_input) {
  return element_bytes == 1 && !v_transposed_input;
}

// The softmax's exponent scheme (softmax.cuh): row offsets, with no vote in the key loop and the
// rare rows out of range computed again after it (exact_rows.cuh), or a per-step vote between the
// fused and the exact exponent (FP8 rows past fp8_scores_hold are computed again in both).
// Measured (performance log): offsets at 16-bit +2-4% (bf16 head_dim 128) and FP8 head_dim 64
// +4-13%; in the FP8 kernels that transpose V, head_dim 128 +1-7% up to 8k keys and -4..+5% at
// 16k, 256 +5-12% (twenty-fifth session, two runs of this rule); with V given transposed +2-4.5%
// on head_dim 128's 128-key tile (its short tile: 512 and 1k keys, causal 2k), but they lost 1-6%
// on its 192-key tile from 4k keys and 2-10% at head_dim 256 non-causal, so those keep the vote.
// Why the forms differ is not known; the transposing kernels' consumers hold 232 registers rather
// than 240.
constexpr bool kernel_uses_row_offsets(int element_bytes, int head_dim, int block_n, bool transposes_v) {
  return element_bytes == 2 || head_dim == 64 || transposes_v || (head_dim == 128 && block_n == 128);
}

}  // namespace hopattn::sm90
