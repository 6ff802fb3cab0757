// Maps CTAs to (query block, head, batch) tiles. Query blocks of one head are adjacent in launch
// order so that the CTAs resident together stream the same K and V through L2. Under the causal
// mask later query blocks see more keys, so they are launched first and the short ones fill the tail.
#pragma once

#include <cuda_runtime.h>

namespace hopattn::sm90 {

struct TileCoord {
  int m_block, head, batch;
};

template <bool kCausal>
struct LinearTileScheduler {
  static dim3 grid(int num_m_blocks, int heads, int batch) {
    return dim3(unsigned(num_m_blocks) * unsigned(heads) * unsigned(batch));
  }

  __device__ static TileCoord tile(int num_m_blocks, int heads) {
    const int linear = int(blockIdx.x);
    int m_block = linear % num_m_blocks;
    const int head_batch = linear / num_m_blocks;
    if constexpr (kCausal) m_block = num_m_blocks - 1 - m_block;
    return {m_block, head_batch % heads, head_batch / heads};
  }
};

}  // namespace hopattn::sm90
