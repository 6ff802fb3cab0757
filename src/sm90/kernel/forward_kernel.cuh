// The forward kernel, composed from a mainloop, an epilogue and a tile scheduler, each owning its
// parameters (and, for the mainloop, the shared storage the epilogue stages O in). Persistent: one CTA
// per SM walks its share of the tiles. Warp-specialised: one producer warp (of a warpgroup that
// gives most of its registers away) loads, kNumConsumerWarpgroups WGMMA warpgroups compute; for
// FP8 inputs with V in rows the producer warpgroup's other three warps transpose V between the two.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "core/seqlen.hpp"
#include "sm90/kernel/softmax.cuh"
#include "sm90/kernel/tile_scheduler.cuh"
#include "sm90/kernel/timeline.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

template <class Mainloop, class Epilogue, class Scheduler>
struct ForwardKernel {
  using Config = typename Mainloop::Config;
  // The epilogue stages O in the mainloop's shared storage (Mainloop::output_buffer) and owns none.
  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    typename Scheduler::SharedStorage scheduler;
  };
  using Pipeline = typename Config::Pipeline;
  using TransposePipeline = typename Config::TransposePipeline;
  static constexpr bool kFp8 = Config::kFp8;
  // Every thread that follows the tile sequence besides the producer warp, which draws it.
  static constexpr int kTileReaders = Config::kNumMmaThreads + Config::kNumTransposeThreads;
  static constexpr int kNumThreads = Config::kNumThreads;
  static constexpr int kSharedMemoryBytes = sizeof(SharedStorage);
  static_assert(kSharedMemoryBytes <= 227 * 1024, "over Hopper's 227 KB of shared memory per CTA");

  struct Params : Timeline::Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    typename Scheduler::Params scheduler;
  };

  // The rows and key blocks of one tile. A tile past its sequence's end (variable-length batches
  // size the grid by the longest sequence) has no rows and is skipped by every role alike.
  struct TileWork {
    PairBlock coord;  // a query block
    Sequence seq;
    typename Mainloop::Mask mask;
    int key_block_end;

    __device__ TileWork(Params const& params, int tile) {
      coord = params.scheduler.order.coord(tile);
      seq = sequence_of(params.mainloop.seqlens, coord.batch);
      mask = {int(seq.seqlen_q), int(seq.seqlen_k), Mainloop::key_shift(params.mainloop, seq)};
      key_block_end = has_rows() ? mask.key_block_end(coord.block) : 0;
    }
    __device__ bool has_rows() const { return coord.block * Config::kBlockM < seq.seqlen_q; }
  };

  __device__ __forceinline__ void operator()(Params const& params, char* shared_memory) {
    auto& storage = *reinterpret_cast<SharedStorage*>(shared_memory);
    auto& shared = storage.mainloop;
    const int warpgroup = cutlass::canonical_warp_group_idx();
    const bool is_producer = warpgroup == 0;

    if (threadIdx.x == 0) {
      Mainloop::prefetch_descriptors(params.mainloop);
      Epilogue::prefetch_descriptors(params.epilogue);
      shared.q_full.init(1);
      if constexpr (!Config::kOwnOutputBuffer) shared.output_drained.init(Config::kNumMmaThreads);
      Scheduler::template init<kTileReaders>(storage.scheduler);
    }
    const int producer_warp = is_producer ? int(threadIdx.x) / 32 : -1;
    typename Pipeline::Params pipeline_params;
    pipeline_params.transaction_bytes = Config::kKVTileBytes;
    pipeline_params.role = is_producer ? Pipeline::ThreadCategory::Producer
                                       : Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = threadIdx.x == 0;
    pipeline_params.num_consumers = Config::kNumMmaThreads;
    Pipeline k_pipeline(shared.k_pipeline, pipeline_params, Shape<_1, _1, _1>{});
    // FP8 with V in rows: V's consumers are the transposing warps, and V^T's the consumer warpgroups.
    typename Pipeline::Params v_pipeline_params = pipeline_params;
    if constexpr (Config::kTransposeV) {
      v_pipeline_params.role = producer_warp == 0 ? Pipeline::ThreadCategory::Producer
                                                  : Pipeline::ThreadCategory::Consumer;
      v_pipeline_params.num_consumers = Config::kNumTransposeThreads;
    }
    Pipeline v_pipeline(shared.v_pipeline, v_pipeline_params, Shape<_1, _1, _1>{});
    auto vt_pipeline = make_transpose_pipeline(shared, producer_warp);
    __syncthreads();  // barrier initialisation is visible to every role

    using Cursor = typename Scheduler::template Cursor<kTileReaders>;
    Cursor cursor(params.scheduler, storage.scheduler);
    TimelineRole timeline(params, warpgroup, threadIdx.x % 128 == 0,
                          {Config::kBlockM, Config::kBlockN, Config::kHeadDim, Config::kNumConsumerWarpgroups});
    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
      if constexpr (Config::kTransposeV) {
        if (producer_warp != 0) {
          transpose_tiles(params, shared, v_pipeline, vt_pipeline, cursor, int(threadIdx.x) - 32);
          return;
        }
      }
      if (producer_warp != 0) return;  // one warp loads; the named barriers count it
      auto write_state = cutlass::make_producer_start_state<Pipeline>();
      const bool leader = threadIdx.x == 0;
      int work_idx = 0;
      for (; cursor.valid(params.scheduler); cursor.producer_advance(params.scheduler)) {
        const TileWork work(params, cursor.tile);
        if (work.key_block_end == 0) continue;  // nothing to load (see the consumers' branch)
        timeline.stamp(TimelineEvent::kTileBegin, cursor.tile);
        Mainloop::load(params.mainloop, shared, k_pipeline, v_pipeline, write_state, work.coord,
                       work.seq, work.key_block_end, work_idx, leader, timeline);
        ++work_idx;
      }
      timeline.finish();
    } else {
      cutlass::arch::warpgroup_reg_alloc<Config::kConsumerRegisters>();
      const int thread_idx = int(threadIdx.x) - 128;
      typename Config::PipelineState read_state;
      Mainloop::consumer_init();
      int work_idx = 0;
      for (; cursor.valid(params.scheduler); cursor.consumer_advance(params.scheduler)) {
        const TileWork work(params, cursor.tile);
        if (!work.has_rows()) continue;
        if (work.key_block_end == 0) {  // every row of this tile sees no key: O = 0, LSE = -inf
          Epilogue::store_empty(params.epilogue, work.coord, work.seq, thread_idx);
          continue;
        }
        timeline.stamp(TimelineEvent::kTileBegin, cursor.tile);
        typename Config::TiledMmaPV mma_pv;
        Tensor output = partition_fragment_C(mma_pv, Shape<Int<Config::kBlockM>, Int<Config::kHeadDim>>{});
        constexpr int kRows = decltype(size<0>(accumulator_rows_cols(output.layout())))::value;
        RowVector<kRows> lse;
        const bool in_range =
            Mainloop::mma(params.mainloop, shared, k_pipeline, pv_operand_pipeline(v_pipeline, vt_pipeline),
                          read_state, work.coord, work.seq, work.mask, work.key_block_end, work_idx, thread_idx,
                          output, lse, timeline);
        if (!__all_sync(0xffffffff, in_range)) {
          Mainloop::recompute_exact_rows(params.mainloop, work.coord, work.seq, thread_idx, output, lse);
        }
        timeline.stamp(TimelineEvent::kMainloopDone);
        Epilogue::store(params.epilogue, Mainloop::output_buffer(shared), shared.output_drained, work.coord,
                        work.seq, thread_idx, output, lse);
        timeline.stamp(TimelineEvent::kEpilogueDone);
        ++work_idx;
      }
      Epilogue::finish(thread_idx);
      timeline.finish();
    }
  }

  struct NoPipeline {};

  // FP8 with V in rows: the pipeline of V^T blocks, from the three transposing warps to the
  // consumer warpgroups.
  __device__ static auto make_transpose_pipeline(typename Mainloop::SharedStorage& shared, int producer_warp) {
    if constexpr (Config::kTransposeV) {
      typename TransposePipeline::Params params;
      params.role = producer_warp > 0    ? TransposePipeline::ThreadCategory::Producer
                    : producer_warp == 0 ? TransposePipeline::ThreadCategory::NonParticipant
                                         : TransposePipeline::ThreadCategory::Consumer;
      params.producer_arv_count = Config::kNumTransposeThreads;
      params.consumer_arv_count = Config::kNumMmaThreads;
      return TransposePipeline(shared.transpose.pipeline, params);
    } else {
      return NoPipeline{};
    }
  }

  // The pipeline that hands the consumers P V's B operand: V^T's where the kernel transposes V,
  // else V's (16-bit, and FP8 V given transposed).
  template <class VtPipeline>
  __device__ static auto& pv_operand_pipeline(Pipeline& v_pipeline, VtPipeline& vt_pipeline) {
    if constexpr (Config::kTransposeV) {
      return vt_pipeline;
    } else {
      return v_pipeline;
    }
  }

  // FP8 with V in rows, the transposing warps: the tiles the producer warp loads, in its order.
  template <class VtPipeline, class Cursor>
  __device__ static void transpose_tiles(Params const& params, typename Mainloop::SharedStorage& shared,
                                         Pipeline& v_pipeline, VtPipeline& vt_pipeline, Cursor& cursor, int thread) {
    typename Config::PipelineState v_state;
    auto vt_state = cutlass::make_producer_start_state<TransposePipeline>();
    int work_idx = 0;
    for (; cursor.valid(params.scheduler); cursor.consumer_advance(params.scheduler)) {
      const TileWork work(params, cursor.tile);
      if (work.key_block_end == 0) continue;
      Mainloop::transpose_v(shared, v_pipeline, v_state, vt_pipeline, vt_state, work.key_block_end, work_idx, thread);
      ++work_idx;
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kNumThreads, 1)
    device_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ __align__(1024) char shared_memory[];
  Kernel{}(params, shared_memory);
}

}  // namespace hopattn::sm90
