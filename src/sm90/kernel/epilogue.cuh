// The epilogue: O converted to the output type, staged in shared memory (Q's buffer, free once every
// consumer's last Q K^T has retired) with stmatrix, and written by one TMA store that clips the
// rows past seqlen_q. The log-sum-exp goes straight from registers, one thread per row.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel/params.hpp"
#include "sm90/kernel/scheduler.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// Ids of our named barriers; cutlass::arch::NamedBarrier adds the offset past CUTLASS's reserved ones.
enum class NamedBarrier : uint32_t { kOutputStaged = 2, kQueryTileFree = 3 };

template <class Config>
struct Epilogue {
  using Element = typename Config::Element;
  using Params = ForwardParams<Config>;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kHeadDim = Config::kHeadDim;

  template <class TensorO, class RowStats>
  __device__ static void store(Params const& params, typename Config::SharedStorage& shared,
                               TileCoord const& tile, int thread_idx, TensorO const& output,
                               RowStats const& lse) {
    typename Config::TiledMmaPV mma_pv;
    Tensor sO = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutO{});
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
    auto thread_copy = smem_copy.get_thread_slice(thread_idx);
    Tensor converted = convert_fragment<Element>(output);
    Tensor tOrO = thread_copy.retile_S(converted);
    Tensor tOsO = thread_copy.partition_D(sO);

    cutlass::arch::NamedBarrier::sync(Config::kNumMmaThreads, uint32_t(NamedBarrier::kQueryTileFree));
    copy(smem_copy, tOrO, tOsO);
    // The TMA engine reads shared memory through the async proxy: publish the stores to it.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(Config::kNumMmaThreads, uint32_t(NamedBarrier::kOutputStaged));

    if (thread_idx == 0) {
      Tensor mO = params.tma_store_o.get_tma_tensor(params.shape_q);
      Tensor gO = local_tile(mO(_, _, tile.head, tile.batch), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                             make_coord(tile.m_block, _0{}));
      auto [tOgO_tma, tOsO_tma] = tma_partition(params.tma_store_o, _0{}, Layout<_1>{},
                                                group_modes<0, 2>(sO), group_modes<0, 2>(gO));
      copy(params.tma_store_o, tOsO_tma, tOgO_tma);
      tma_store_arrive();
    }

    if (params.lse != nullptr) {
      typename Config::TiledMmaQK mma_qk;  // same row ownership as the P V accumulator
      Tensor rows = mma_qk.get_thread_slice(thread_idx).partition_C(
          make_identity_tensor(Shape<Int<kBlockM>, Int<Config::kBlockN>>{}));
      Tensor rows_cols = make_tensor(rows.data(), accumulator_rows_cols(rows.layout()));
      if (thread_idx % 4 == 0) {  // the quad's first thread holds column 0 of its rows
        float* lse_rows = params.lse + (int64_t(tile.batch) * params.heads_q + tile.head) * params.seqlen_q;
        CUTE_UNROLL
        for (int r = 0; r < size(lse); ++r) {
          const int row = tile.m_block * kBlockM + get<0>(rows_cols(r, 0));
          if (row < params.seqlen_q) lse_rows[row] = lse(r);
        }
      }
    }
    if (thread_idx == 0) tma_store_wait<0>();
  }
};

}  // namespace hopattn::sm90
