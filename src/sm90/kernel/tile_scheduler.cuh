// Persistent tile schedulers: a grid of one CTA per SM, each CTA working through tiles of the
// linear list of (query block, head, batch) tiles until the list is exhausted.
//
// The list's order (TileOrder) is chosen for L2. Equal tiles (no mask): the query block is the fast
// index, so the CTAs resident at once cover the fewest (batch, head) pairs and stream each pair's K
// and V in lockstep, from DRAM once (FlashAttention-3's grid order; sections of several heads had
// twice the DRAM reads and 4-7% less speed, performance log v11). Tiles of unequal length (causal):
// pairs are grouped into sections whose K and V fit in L2 together, and inside a section the query
// block is the slow index and the head the fast one, so that later query blocks, which see more
// keys, come first (longest-processing-time first).
//
// Equal tiles (fixed lengths, no mask) are dealt out statically: CTA c takes tiles c, c + grid, ...
// Tiles of unequal length (causal, and variable-length batches) are taken dynamically from a global
// counter in the workspace, so a CTA that drew short tiles takes more of them; the producer warp
// draws the next tile and hands it to the consumer warpgroups through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90 {

struct TileCoord {
  int m_block, head, batch;
};

struct TileOrder {
  int num_m_blocks, heads, batch;
  int heads_per_section;  // (batch, head) pairs per section: 1 for equal tiles
  int total_tiles;
  bool longest_first;

  // `kv_bytes_per_head`: the K and V bytes one (batch, head) streams; `l2_bytes`: the cache to fit;
  // `longest_first`: tiles of unequal length, the later query blocks the longer.
  static TileOrder make(int num_m_blocks, int heads, int batch, int64_t kv_bytes_per_head,
                        int64_t l2_bytes, bool longest_first) {
    const int64_t pairs = int64_t(heads) * batch;
    const int64_t fit = !longest_first ? 1 : (kv_bytes_per_head > 0 ? l2_bytes / kv_bytes_per_head : pairs);
    const int per_section = int(fit < 1 ? 1 : (fit > pairs ? pairs : fit));
    return {num_m_blocks, heads, batch, per_section, num_m_blocks * heads * batch, longest_first};
  }

  __device__ TileCoord coord(int tile) const {
    const int section_tiles = num_m_blocks * heads_per_section;
    const int section = tile / section_tiles;
    const int first_pair = section * heads_per_section;
    const int pairs = min(heads_per_section, heads * batch - first_pair);  // the last may be short
    const int in_section = tile - section * section_tiles;
    const int m_rank = in_section / pairs;
    const int pair = first_pair + in_section % pairs;
    return {longest_first ? num_m_blocks - 1 - m_rank : m_rank, pair % heads, pair / heads};
  }
};

inline dim3 persistent_grid(TileOrder const& order, int sm_count) {
  return dim3(unsigned(order.total_tiles < sm_count ? order.total_tiles : sm_count));
}

// CTA c takes tiles c, c + grid, ...: no communication, no workspace.
struct StaticTileScheduler {
  struct Params {
    TileOrder order;
  };
  struct SharedStorage {};
  static constexpr size_t kWorkspaceBytes = 0;

  static Params to_params(TileOrder const& order, void* /*workspace*/) { return {order}; }

  template <int kConsumerThreads>
  __device__ static void init(SharedStorage&) {}

  template <int kConsumerThreads>
  struct Cursor {
    int tile = int(blockIdx.x);
    __device__ Cursor(Params const&, SharedStorage&) {}
    __device__ bool valid(Params const& p) const { return tile < p.order.total_tiles; }
    __device__ void producer_advance(Params const&) { tile += int(gridDim.x); }
    __device__ void consumer_advance(Params const&) { tile += int(gridDim.x); }
  };
};

// Each CTA starts at tile blockIdx.x; every further tile comes from atomicAdd on a counter that
// the host zeroes before the launch.
struct DynamicTileScheduler {
  struct Params {
    TileOrder order;
    int* counter;
  };
  // The producer warp publishes each drawn tile in next_tile; two mbarriers hand the slot over
  // (full: published; empty: every consumer thread has read it).
  struct SharedStorage {
    int next_tile;
    cutlass::arch::ClusterBarrier tile_full;
    cutlass::arch::ClusterBarrier tile_empty;
  };
  static constexpr size_t kWorkspaceBytes = sizeof(int);

  static Params to_params(TileOrder const& order, void* workspace) {
    return {order, static_cast<int*>(workspace)};
  }

  // One thread, before the kernel's __syncthreads.
  template <int kConsumerThreads>
  __device__ static void init(SharedStorage& shared) {
    shared.tile_full.init(1);
    shared.tile_empty.init(kConsumerThreads);
  }

  template <int kConsumerThreads>
  struct Cursor {
    int tile = int(blockIdx.x);
    SharedStorage* shared;
    uint32_t phase = 0;  // parity of the handoffs so far

    __device__ Cursor(Params const&, SharedStorage& storage) : shared(&storage) {}
    __device__ bool valid(Params const& p) const { return tile < p.order.total_tiles; }

    // Producer warp, after issuing the tile's loads: draw the next tile and publish it. The slot is
    // free at the start: waiting on the parity before a fresh barrier's first phase returns at once.
    __device__ void producer_advance(Params const& p) {
      int next = 0;
      if (threadIdx.x % 32 == 0) next = atomicAdd(p.counter, 1) + int(gridDim.x);
      next = __shfl_sync(0xffffffff, next, 0);
      shared->tile_empty.wait(phase ^ 1);
      if (threadIdx.x % 32 == 0) {
        shared->next_tile = next;
        shared->tile_full.arrive();
      }
      phase ^= 1;
      tile = next;
    }
    // Consumers, after the tile's epilogue.
    __device__ void consumer_advance(Params const&) {
      shared->tile_full.wait(phase);
      tile = shared->next_tile;
      shared->tile_empty.arrive();
      phase ^= 1;
    }
  };
};

}  // namespace hopattn::sm90
