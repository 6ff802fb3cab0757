// The persistent tile scheduler: a grid of one CTA per SM, each walking the linear list of
// (query block, head, batch) tiles with a stride of the grid size. The producer warp and the
// consumer warpgroups walk the same list independently, so no tile index is exchanged.
//
// Order of the list: (batch, head) pairs are grouped into L2 sections whose K and V fit in L2
// together, so that the CTAs resident at once stream the same keys; inside a section the query
// block is the slow index and the head the fast one. Under the causal mask later query blocks see
// more keys, so they come first (longest-processing-time first) and short tiles fill the tail.
#pragma once

#include <cuda_runtime.h>

namespace hopattn::sm90 {

struct TileCoord {
  int m_block, head, batch;
};

template <bool kCausal>
struct PersistentTileScheduler {
  struct Params {
    int num_m_blocks, heads, batch;
    int heads_per_section;  // (batch, head) pairs per L2 section
    int total_tiles;
  };

  // `kv_bytes_per_head`: the K and V bytes one (batch, head) streams; `l2_bytes`: the cache to fit.
  static Params to_params(int num_m_blocks, int heads, int batch, int64_t kv_bytes_per_head,
                          int64_t l2_bytes) {
    Params p;
    p.num_m_blocks = num_m_blocks;
    p.heads = heads;
    p.batch = batch;
    const int64_t fit = kv_bytes_per_head > 0 ? l2_bytes / kv_bytes_per_head : heads * batch;
    p.heads_per_section = int(fit < 1 ? 1 : (fit > int64_t(heads) * batch ? int64_t(heads) * batch : fit));
    p.total_tiles = num_m_blocks * heads * batch;
    return p;
  }

  static dim3 grid(Params const& p, int sm_count) {
    return dim3(unsigned(p.total_tiles < sm_count ? p.total_tiles : sm_count));
  }

  __device__ static TileCoord coord(Params const& p, int tile) {
    const int section_tiles = p.num_m_blocks * p.heads_per_section;
    const int section = tile / section_tiles;
    const int first_pair = section * p.heads_per_section;
    const int pairs = min(p.heads_per_section, p.heads * p.batch - first_pair);  // the last may be short
    const int in_section = tile - section * section_tiles;
    const int m_rank = in_section / pairs;
    const int pair = first_pair + in_section % pairs;
    const int m_block = kCausal ? p.num_m_blocks - 1 - m_rank : m_rank;
    return {m_block, pair % p.heads, pair / p.heads};
  }
};

}  // namespace hopattn::sm90
