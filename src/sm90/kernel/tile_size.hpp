// Tile sizes per head_dim and input size: the one place that trades registers against shared memory.
//
// Each consumer warpgroup holds, per thread, the output accumulator (64 x head_dim / 128 floats),
// the scores (64 x kBlockN / 128 floats) and P (16-bit pairs: half of the scores' registers; FP8:
// a quarter), under the 240 registers that setmaxnreg gives each of two consumer warpgroups (160 for
// three). Shared memory holds Q (kBlockM x head_dim) and kStages buffers of K and of V (kBlockN x
// head_dim each; FP8 a transposed copy of V as well), under 227 KB.
//
// 16-bit inputs:
//   head_dim  kBlockM x kBlockN  stages  registers: O + S + P   shared memory: Q + K + V
//   64        192 x 128          2       32 + 64 + 32           24 + 32 + 32 =  88 KB
//   96        128 x 128          2       48 + 64 + 32           24 + 48 + 48 = 120 KB
//   128       128 x 128          2       64 + 64 + 32           32 + 64 + 64 = 160 KB
//   192       128 x  96          2       96 + 48 + 24           48 + 72 + 72 = 192 KB
//   256       128 x  80          2      128 + 40 + 20           64 + 80 + 80 = 224 KB
//
// Two consumer warpgroups at 16-bit up to head_dim 128 also hold their Q rows (64 x head_dim / 256:
// 16-32 registers; config.hpp's kQInRegisters), and in shared memory O in a buffer of its own
// (config.hpp's kOwnOutputBuffer: head_dim 96 and 128 then take 147 and 195 KB, head_dim 64's short
// tile 99 KB); elsewhere O is staged in V's buffer.
//
// head_dim 64 has the least GEMM work per score, so it takes three consumer warpgroups (kBlockM 192)
// to keep more softmax in flight; its registers fit the smaller per-thread budget of three.
// The softmax of one block overlaps the P V of the previous one (mainloop.cuh), so a second score
// tile is live as well: head_dim 192 keeps kBlockN at 96 for that register headroom. head_dim 256
// is bound by shared memory: kBlockN = 80 is the largest multiple of 16 for which two stages of K
// and V fit beside Q.
//
// FP8 inputs (e4m3). Consumers get 232 registers beside the transposing warps' 40 (152 for three
// warpgroups), or 240 beside 24 where their fragments need it (config.hpp: head_dim 256); the K
// scales, per multiple of 128 keys, apply per chunk of gcd(kBlockN, 128) keys. V in rows is
// transposed by the kernel into a buffer of its own (Vt); V given transposed is loaded as it is.
// head_dim 128's 128-key tiles hold their Q rows in registers too (16 more; kQInRegisters).
//   head_dim  kBlockM x kBlockN  stages  registers: O + S + P   shared memory: Q + K + V (+ Vt)
//   64        192 x 128          2       32 + 64 + 16           12 + 16 + 16 + 24 (O) =  68 KB
//   128 rows  128 x 128          2       64 + 64 + 16           16 + 32 + 32 + 32     = 112 KB
//   128 Vt    128 x 192          2       64 + 96 + 24           16 + 48 + 48          = 112 KB
//   256       128 x 128          2      128 + 64 + 16           32 + 64 + 64 + 64     = 224 KB
// Longer key blocks than 16-bit's halve the per-block costs per key (the row maxima's shuffles, the
// O rescale, the pipeline handshakes), as FlashAttention-3's FP8 tiles (192 x 160, 128 x 224,
// 128 x 128) do, as far as ptxas fits them: 192 x 160 spills 200 bytes at 152 registers; 128 x 224
// at head_dim 128 spills in the key loop and ran 13-19% slower than 128 x 192; head_dim 256's
// 128 x 128 ran 8-12% faster than 128 x 96 (performance log, FP8 f7). Where the kernel transposes
// V, its transposing warps turn over each key block beside the consumers, and a longer block is not
// cheaper per key for them: head_dim 128 with V in rows ran 2-8% faster from 2k to 8k keys on
// 128 x 128 than on 128 x 192, and 12-14% faster at 512 and 1k (performance log, 2026-12-07
// twenty-fourth). V given transposed keeps 128 x 192, with 128 x 128 as its short tile.
//
// head_dim 64, 16-bit and FP8, has a second, shorter tile (ShortTileSize: 128 x 128, two consumer
// warpgroups, in pingpong at 16-bit) for the problems where 192 rows waste most: 192 does not
// divide the usual sequence lengths, and its causal diagonal blocks are half masked. At 512 tokens,
// causal, the 192 x 128 tile computes 1.35x the cells 128 x 128 does, at 1k 1.33x, at 2k 1.11x, at
// 8k 1.03x; non-causal 1.125x up to 1k. FP8 head_dim 128 with V given transposed has one too, for
// its 192 keys (128 x 128: the 192-key blocks compute 1.125x its cells up to 1k, 1.06x at 2k
// causal, 1.03x at 2k non-causal and 4k). Where that waste outweighs the longer tile's advantage
// per computed cell (ShortTileSize's kLongTileAdvantage), the launch takes the short one
// (takes_short_tile).
#pragma once

#include <cstdint>

#include "core/causal_mask.hpp"
#include "sm90/kernel/kernel_form.hpp"

namespace hopattn::sm90 {

// kTransposesV: kernel_transposes_v's answer, which only FP8 head_dim 128's tile depends on.
template <int kHeadDim, int kElementBytes, bool kTransposesV = false>
struct TileSize;

template <>
struct TileSize<64, 2> {
  static constexpr int kBlockM = 192, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<96, 2> {
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<128, 2> {
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<192, 2> {
  static constexpr int kBlockM = 128, kBlockN = 96, kStages = 2;
};
template <>
struct TileSize<256, 2> {
  static constexpr int kBlockM = 128, kBlockN = 80, kStages = 2;
};

template <bool kTransposesV>
struct TileSize<64, 1, kTransposesV> {
  static constexpr int kBlockM = 192, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<128, 1, /*kTransposesV=*/true> {
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<128, 1, /*kTransposesV=*/false> {
  static constexpr int kBlockM = 128, kBlockN = 192, kStages = 2;
};
template <bool kTransposesV>
struct TileSize<256, 1, kTransposesV> {
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
};

// The shorter tile of a head_dim that has one; kExists false elsewhere.
template <int kHeadDim, int kElementBytes, bool kTransposesV = false>
struct ShortTileSize {
  static constexpr bool kExists = false;
};
// kLongTileAdvantage: computed cells per unit of time, the long tile over the short one, calibrated
// by A/Bs of both tiles (performance log, "The short tile's threshold, calibrated", and 2026-12-05
// eighth). Any value between the waste ratios where the short tile won and where it lost holds
// every measured choice:
// - 16-bit: it won where the long tile computes 1.33-1.35x its cells (causal 512 and 1k: +15-18%)
//   and, since its epilogue stores per warp, at 1.125x (non-causal 512: +3.3%; 1k even); it lost at
//   1.11x (causal 2k: -4%; its ratio, 1.114, bounds the value from below);
// - FP8: it won at 1.33x (causal 1k: +9%) and lost at 1.11-1.125x (causal 2k: -9%; non-causal 1k:
//   -15%).
// Always taking the short tile lost 15-20% (16-bit) and 20-30% (FP8) at 8k.
template <int kElementBytes, bool kTransposesV>
struct ShortTileSize<64, kElementBytes, kTransposesV> {
  static constexpr bool kExists = true;
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr double kLongTileAdvantage = kElementBytes == 2 ? 1.12 : 1.25;
};
// FP8 head_dim 128, V given transposed (128 x 192): 128 x 128 won where the long tile computes
// 1.125x its cells (512 and 1k: +7-13%) and 1.06x (causal 2k: +5%), and lost or tied at 1.03x
// (non-causal 2k: even; non-causal 4k: -2%) and 1.01x (8k: -2..-4%); causal 4k (1.03x) won 2%,
// the one choice this value misses (performance log, 2026-12-07 twenty-fourth).
template <>
struct ShortTileSize<128, 1, /*kTransposesV=*/false> {
  static constexpr bool kExists = true;
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr double kLongTileAdvantage = 1.04;
};

// Past this many query rows the long tile wastes under 3% anyway; the host loop stays short.
constexpr int64_t kShortTileMaxRows = 16384;

// Whether a problem runs on the short tile: one exists, the lengths are fixed (variable-length
// batches keep the long tile: their lengths are on the device), and the long tile's computed cells,
// discounted by its advantage per cell, exceed the short tile's.
template <class Long, class Short>
bool takes_short_tile(bool varlen, bool causal, int64_t seqlen_q, int64_t seqlen_k) {
  if constexpr (!Short::kExists) {
    return false;
  } else {
    if (varlen || seqlen_q > kShortTileMaxRows) return false;
    const double long_cells = double(computed_score_cells(causal, seqlen_q, seqlen_k, Long::kBlockM, Long::kBlockN));
    const double short_cells =
        double(computed_score_cells(causal, seqlen_q, seqlen_k, Short::kBlockM, Short::kBlockN));
    return long_cells > Short::kLongTileAdvantage * short_cells;
  }
}

}  // namespace hopattn::sm90
