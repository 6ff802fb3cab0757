// The forward kernel: one CTA per (query block, head, batch) tile, warp-specialised into a TMA
// producer warpgroup and kNumConsumerWarpgroups WGMMA consumer warpgroups.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/kernel/epilogue.cuh"
#include "sm90/kernel/mainloop.cuh"

namespace hopattn::sm90 {

template <class Config, bool kCausal>
__global__ void __launch_bounds__(Config::kNumThreads, 1)
    forward_kernel(CUTE_GRID_CONSTANT ForwardParams<Config> const params) {
  using Mainloop = Mainloop<Config, kCausal>;
  using Pipeline = typename Config::Pipeline;
  extern __shared__ __align__(1024) char shared_memory[];
  auto& shared = *reinterpret_cast<typename Config::SharedStorage*>(shared_memory);

  const int warpgroup = cutlass::canonical_warp_group_idx();
  const bool is_producer = warpgroup == 0;
  const TileCoord tile = LinearTileScheduler<kCausal>::tile(params.num_m_blocks, params.heads_q);
  const typename Mainloop::Mask mask{params.seqlen_q, params.seqlen_k};
  const int key_block_end = mask.key_block_end(tile.m_block);

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(params.tma_load_q.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_k.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_v.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_store_o.get_tma_descriptor());
    shared.q_full.init(1);
  }
  typename Pipeline::Params pipeline_params;
  pipeline_params.transaction_bytes = Config::kKVTileBytes;
  pipeline_params.role = is_producer ? Pipeline::ThreadCategory::Producer
                                     : Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x == 0;
  pipeline_params.num_consumers = Config::kNumMmaThreads;
  Pipeline k_pipeline(shared.k_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  Pipeline v_pipeline(shared.v_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  __syncthreads();  // barrier initialisation is visible to every role

  if (is_producer) {
    cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
    if (threadIdx.x == 0 && key_block_end > 0) {
      auto write_state = cutlass::make_producer_start_state<Pipeline>();
      Mainloop::load(params, shared, k_pipeline, v_pipeline, write_state, tile, key_block_end);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Config::kConsumerRegisters>();
    const int thread_idx = int(threadIdx.x) - 128;
    typename Config::TiledMmaPV mma_pv;
    Tensor output = partition_fragment_C(mma_pv, Shape<Int<Config::kBlockM>, Int<Config::kHeadDim>>{});
    constexpr int kRows = decltype(size<0>(accumulator_rows_cols(output.layout())))::value;
    RowVector<kRows> lse;
    if (key_block_end > 0) {
      typename Config::PipelineState read_state;
      Mainloop::compute(params, shared, k_pipeline, v_pipeline, read_state, tile, mask,
                        key_block_end, thread_idx, output, lse);
    } else {  // every row of this block sees no key: O = 0, LSE = -inf
      clear(output);
      fill(lse, -INFINITY);
    }
    Epilogue<Config>::store(params, shared, tile, thread_idx, output, lse);
  }
}

}  // namespace hopattn::sm90
