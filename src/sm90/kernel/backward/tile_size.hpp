// Backward tile sizes per head_dim and mask: the one place that trades registers against shared memory.
//
// Up to head_dim 128 each consumer warpgroup owns 64 keys (kBlockN = 128) and holds, per thread,
// dK and dV for them (2 x 64 x head_dim / 128 floats) for the CTA's whole life, plus per step S^T
// and dP^T (2 x 64 x kBlockM / 128 floats), P and dS as 16-bit pairs, and its half of dQ
// (kBlockM x head_dim / 256 floats), under the 240 registers setmaxnreg gives each of two
// consumer warpgroups. Past 128 (config.hpp's kSplitHeadDim) the warpgroups share 64 keys and
// each holds half of their dK and dV by head_dim (2 x 64 x head_dim / 256 floats), S^T and dP^T
// for half of the queries (2 x 64 x kBlockM / 256). Shared memory holds K and V (kBlockN x
// head_dim each), kStages buffers of Q and of dO (kBlockM x head_dim each), two of dS (kBlockN x
// kBlockM; and two of P with kSplitHeadDim) and one query block's float32 dQ, under 227 KB.
//
//   head_dim  kBlockM x kBlockN  stages  registers: dK + dV + S + dP  dQ   shared memory: K+V + Q+dO + dS(+P) + dQ
//   64        128 x 128          2        32 + 32 + 64 + 64          32    32 + 64 + 64 + 32 = 192 KB
//   96         64 x 128          2        48 + 48 + 32 + 32          24    48 + 48 + 32 + 24 = 152 KB
//   128        80 x 128          2        64 + 64 + 40 + 40          40    64 + 80 + 40 + 40 = 224 KB
//   128 causal 64 x 128          2        64 + 64 + 32 + 32          32    64 + 64 + 32 + 32 = 192 KB
//   192        64 x  64          2        48 + 48 + 16 + 16      2 x 24    48 + 96 + 32 + 48 = 224 KB
//   256        64 x  64          1        64 + 64 + 16 + 16      2 x 32    64 + 64 + 32 + 64 = 224 KB
//
// At head_dim 64 a step takes 128 queries (FA3's tile): every product is twice as wide as at 64,
// and dQ splits by query rows (config.hpp's kdQSplitRows).
// At head_dim 128 without the mask a step takes 80 queries (FA3's tile): a quarter more rows per
// step's fixed costs (the handshakes, the waits, dQ's reduce). 80 cannot be WGMMA's M, so dQ is
// computed transposed (config.hpp's kdQTransposed). With the causal mask the step keeps 64 rows,
// as FA3's does.
// dV's product goes in only after dS's stores (the mainloop's "late dV" says why).
// head_dim 256 has room for one stage of Q and dO only: the next step's loads wait for this
// step's products to release them. Past head_dim 128, dQ takes two passes of half the columns,
// one after the other: with all of a warpgroup's dQ live beside dK and dV, ptxas spills dK and
// serialises every WGMMA (at 192 as at 256).
#pragma once

namespace hopattn::sm90 {

template <int kHeadDim, bool kCausal>
struct BackwardTileSize {
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "no backward tile size for this head_dim");
  static constexpr int kBlockM = kHeadDim == 64 ? 128 : kHeadDim == 128 && !kCausal ? 80 : 64;
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64, kStages = kHeadDim <= 192 ? 2 : 1;
  static constexpr int kdQPasses = kHeadDim > 128 ? 2 : 1;
};

}  // namespace hopattn::sm90
