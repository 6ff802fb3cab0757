// Persistent tile schedulers: a grid of one CTA per SM, each CTA working through tiles of the
// linear list of (query block, head, batch) tiles (tile_order.hpp) until the list is exhausted.
//
// Equal tiles (fixed lengths, no mask) are dealt out statically: CTA c takes tiles c, c + grid, ...
// Tiles of unequal length (causal, and variable-length batches) are taken dynamically from a global
// counter in the workspace, so a CTA that drew short tiles takes more of them; the producer warp
// draws the next tile and hands it to the consumer warpgroups through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cutlass/arch/barrier.h>

#include "sm90/kernel/tile_order.hpp"

namespace hopattn::sm90 {

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
