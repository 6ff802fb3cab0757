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
// head_dim 64 has the least GEMM work per score, so it takes three consumer warpgroups (kBlockM 192)
// to keep more softmax in flight; its registers fit the smaller per-thread budget of three.
// The softmax of one block overlaps the P V of the previous one (mainloop.cuh), so a second score
// tile is live as well: head_dim 192 keeps kBlockN at 96 for that register headroom. head_dim 256
// is bound by shared memory: kBlockN = 80 is the largest multiple of 16 for which two stages of K
// and V fit beside Q.
//
// FP8 inputs (e4m3). Consumers get 232 registers beside the transposing warps' 40 (152 for three
// warpgroups); the K scales, per multiple of 128 keys, apply per chunk of gcd(kBlockN, 128) keys.
//   head_dim  kBlockM x kBlockN  stages  registers: O + S + P   shared memory: Q + K + V + Vt
//   64        192 x 128          2       32 + 64 + 16           12 + 16 + 16 + 24 (O) =  68 KB
//   128       128 x 192          2       64 + 96 + 24           16 + 48 + 48 + 48     = 160 KB
//   256       128 x  96          2      128 + 48 + 12           32 + 48 + 48 + 64 (O) = 192 KB
// Longer key blocks than 16-bit's halve the per-block costs per key (the row maxima's shuffles, the
// O rescale, the pipeline handshakes), as FlashAttention-3's FP8 tiles (192 x 160, 128 x 224,
// 128 x 128) do; as far as ptxas fits them without spills in the key loop: 192 x 160 spills 200 bytes
// at 152 registers, and head_dim 256's 128 keys 240 bytes.
#pragma once

namespace hopattn::sm90 {

template <int kHeadDim, int kElementBytes>
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

template <>
struct TileSize<64, 1> {
  static constexpr int kBlockM = 192, kBlockN = 128, kStages = 2;
};
template <>
struct TileSize<128, 1> {
  static constexpr int kBlockM = 128, kBlockN = 192, kStages = 2;
};
template <>
struct TileSize<256, 1> {
  static constexpr int kBlockM = 128, kBlockN = 96, kStages = 2;
};

}  // namespace hopattn::sm90
