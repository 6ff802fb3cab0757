// The backward main kernel, composed from the backward mainloop and epilogue: one CTA per
// (key block, kv head, sequence), not persistent. Warp-specialised like the forward: in a warpgroup
// that gives most of its registers away, one producer warp loads and one thread of the next warp
// adds each step's dQ to the workspace with bulk reduce-adds; two WGMMA warpgroups compute and keep
// dK and dV in registers until the epilogue.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>

namespace hopattn::sm90 {

template <class Mainloop, class Epilogue>
struct BackwardKernel {
  using Config = typename Mainloop::Config;
  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
  };
  using Pipeline = typename Config::Pipeline;
  static constexpr int kNumThreads = Config::kNumThreads;
  static constexpr int kSharedMemoryBytes = sizeof(SharedStorage);
  static_assert(kSharedMemoryBytes <= 227 * 1024, "over Hopper's 227 KB of shared memory per CTA");

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
  };

  __device__ void operator()(Params const& params, char* shared_memory) {
    auto& shared = reinterpret_cast<SharedStorage*>(shared_memory)->mainloop;
    const typename Mainloop::Work work = Mainloop::work_of(params.mainloop);
    if (!work.has_rows()) return;  // past the sequence's keys: nothing to compute or store
    const int warpgroup = cutlass::canonical_warp_group_idx();
    const bool is_producer = warpgroup == 0;

    if (threadIdx.x == 0) {
      Mainloop::prefetch_descriptors(params.mainloop);
      Mainloop::init_barriers(shared);
    }
    // Q travels with its LSE, dO with its D: one transaction per stage each.
    typename Pipeline::Params pipeline_params;
    pipeline_params.transaction_bytes = Config::kQTileBytes + Config::kRowVectorBytes;
    pipeline_params.role = is_producer ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = threadIdx.x == 0;
    pipeline_params.num_consumers = Config::kNumMmaThreads;
    Pipeline q_pipeline(shared.q_pipeline, pipeline_params, Shape<_1, _1, _1>{});
    Pipeline do_pipeline(shared.do_pipeline, pipeline_params, Shape<_1, _1, _1>{});
    __syncthreads();  // barrier initialisation is visible to every role

    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
      if (work.steps() == 0) return;
      if (threadIdx.x / 32 == 0) {
        Mainloop::load(params.mainloop, shared, q_pipeline, do_pipeline, work, threadIdx.x == 0);
      } else if (threadIdx.x == 32) {
        Mainloop::store_dq(params.mainloop, shared, work);
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<Config::kConsumerRegisters>();
      const int thread_idx = int(threadIdx.x) - 128;
      // No path may carry dK and dV around the mainloop into the epilogue: their zeros would be
      // set before setmaxnreg raised the register limit, and ptxas then keeps them below the
      // launch's 168 registers for their whole life (at head_dim 64 with 128 queries a step it
      // spills them and serialises every WGMMA).
      if (work.steps() == 0) {
        Epilogue::store_zeros(params.epilogue, work, thread_idx);
        return;
      }
      typename Config::TiledMmadKV mma_dkv;
      Tensor dk = partition_fragment_C(mma_dkv, Shape<Int<Config::kBlockN>, Int<Config::kHeadDim>>{});
      Tensor dv = partition_fragment_C(mma_dkv, Shape<Int<Config::kBlockN>, Int<Config::kHeadDim>>{});
      clear(dk);
      clear(dv);
      Mainloop::mma(params.mainloop, shared, q_pipeline, do_pipeline, work, thread_idx, dk, dv);
      // Q's and dO's buffers stage dK and dV: every load into them has landed (the consumers waited
      // for each), and the epilogue waits until both warpgroups' products that read them retired.
      Epilogue::store(params.epilogue, work, thread_idx, dk, dv, shared.q.data(), shared.d_o.data());
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kNumThreads, 1)
    backward_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ __align__(1024) char shared_memory[];
  Kernel{}(params, shared_memory);
}

}  // namespace hopattn::sm90
