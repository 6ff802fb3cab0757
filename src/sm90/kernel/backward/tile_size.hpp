// Backward tile sizes per head_dim: the one place that trades registers against shared memory.
//
// Each consumer warpgroup owns 64 keys and holds, per thread, dK and dV for them
// (2 x 64 x head_dim / 128 floats) for the CTA's whole life, plus per step S^T and dP^T
// (2 x 64 x kBlockM / 128 floats), P and dS as 16-bit pairs, and its half of dQ
// (64 x head_dim / 256 floats), under the 240 registers setmaxnreg gives each of two consumer
// warpgroups. Shared memory holds K and V (kBlockN x head_dim each), kStages buffers of Q and of
// dO (kBlockM x head_dim each) and two of dS (kBlockN x kBlockM).
//
//   head_dim  kBlockM x kBlockN  stages  registers: dK + dV + S + dP   shared memory: K+V + Q+dO + dS
//   64         64 x 128          2        32 + 32 + 32 + 32            32 + 32 + 32 =  96 KB
//   96         64 x 128          2        48 + 48 + 32 + 32            48 + 48 + 32 = 128 KB
//   128        64 x 128          2        64 + 64 + 32 + 32            64 + 64 + 32 = 160 KB
//
// head_dim 192 and 256 do not fit this design (dK + dV alone would take 192 or 256 registers per
// thread): they need dK and dV split across warpgroups by head_dim, with P and dS going through
// shared memory (FlashAttention-3's swapped dK/dV products). generate.py lists only these three.
#pragma once

namespace hopattn::sm90 {

template <int kHeadDim>
struct BackwardTileSize {
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128, "no backward tile size for this head_dim");
  static constexpr int kBlockM = 64, kBlockN = 128, kStages = 2;
};

}  // namespace hopattn::sm90
