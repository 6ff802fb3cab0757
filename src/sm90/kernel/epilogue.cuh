// The forward epilogue collective: O converted to the output type and staged in shared memory with
// stmatrix, then stored, in slabs of Config::kStoreRows rows. Where O has a buffer of its own
// (Config::kOwnOutputBuffer), each consumer warp stages and stores its own 16 rows, so no warp
// waits for another: a warpgroup that finishes its tile first goes on to the next one while the
// others finish theirs, and the pingpong's stagger between warpgroups survives the tile boundary.
// Otherwise O goes to the buffer P V read V from, free once every consumer's last P V has retired,
// and the tile is one slab, staged by all consumers and stored at once.
// Fixed lengths use TMA stores that clip the rows past seqlen_q; a variable-length batch stores
// row by row instead, since a TMA store would clip only at the packed tensor's end and overwrite
// the next sequence's rows. The log-sum-exp goes straight from registers, one thread per row. Its
// shared storage is the mainloop's, so it owns parameters only. `Element` is the output's type
// (Config::ElementOut), which FP8 inputs do not share.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "core/problem.hpp"
#include "sm90/kernel/named_barriers.hpp"
#include "sm90/kernel/tile_scheduler.cuh"
#include "sm90/kernel/tma.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <class Config>
struct ForwardEpilogue {
  using Element = typename Config::ElementOut;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kNumMmaThreads = Config::kNumMmaThreads;
  // 16-byte chunks of a row: a swizzle permutes whole chunks, so each is contiguous in shared memory.
  static constexpr int kChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static constexpr bool kPerWarp = Config::kOwnOutputBuffer;
  static constexpr int kStoreRows = Config::kStoreRows;
  // The threads that stage a slab: its warp, or every consumer.
  static constexpr int kSlabThreads = kPerWarp ? 32 : kNumMmaThreads;
  using SmemLayoutOSlab = typename Config::SmemLayoutOSlab;

  using TmaO = TmaStore<Element, SmemLayoutOSlab, Shape<Int<kStoreRows>, Int<kHeadDim>>>;

  struct Params {
    GmemShape shape_o;
    typename TmaO::Copy tma_store_o;
    Element* o;
    Strides o_stride;
    float* lse;  // lse_index() addresses it, or null
    SeqlenLayout seqlens;
    int heads_q;
  };

  static Params to_params(ForwardProblem const& p) {
    Params params;
    params.shape_o = GmemShape{int32_t(p.seqlens.total_q), int32_t(p.head_dim), int32_t(p.heads_q),
                               p.seqlens.varlen() ? 1 : int32_t(p.seqlens.batch)};
    params.tma_store_o = TmaO::make(static_cast<Element*>(p.o), params.shape_o, p.o_stride);
    params.o = static_cast<Element*>(p.o);
    params.o_stride = p.o_stride;
    params.lse = p.lse;
    params.seqlens = p.seqlens;
    params.heads_q = int(p.heads_q);
    return params;
  }

  static bool descriptors_encoded(Params const& params) { return encoded(params.tma_store_o.get_tma_descriptor()); }

  __device__ static void prefetch_descriptors(Params const& params) {
    prefetch_tma_descriptor(params.tma_store_o.get_tma_descriptor());
  }

  // `buffer`: O's own (Config::kOwnOutputBuffer), or the mainloop's P V operand buffer, free once
  // every consumer's last P V has retired; then `output_drained` (kNumMmaThreads arrivals) signals
  // when the loads may overwrite it.
  template <class TensorO, class RowStats>
  __device__ static void store(Params const& params, void* buffer,
                               cutlass::arch::ClusterBarrier& output_drained, PairBlock const& tile,
                               Sequence const& seq, int thread_idx, TensorO const& output,
                               RowStats const& lse) {
    typename Config::TiledMmaPV mma_pv;
    Tensor sO = make_tensor(make_smem_ptr(static_cast<Element*>(buffer)), typename Config::SmemLayoutO{});
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
    auto thread_copy = smem_copy.get_thread_slice(thread_idx);
    Tensor converted = convert_fragment<Element>(output);
    Tensor tOrO = thread_copy.retile_S(converted);
    Tensor tOsO = thread_copy.partition_D(sO);  // the thread's own accumulator rows, in its slab

    const int slab = thread_idx / kSlabThreads, slab_thread = thread_idx % kSlabThreads;
    if constexpr (kPerWarp) {
      // The warp's previous store (a tile ago) has read its slab.
      if (slab_thread == 0) tma_store_wait<0>();
      __syncwarp();
    } else {
      barrier_sync(kNumMmaThreads, ForwardBarrier::kOutputBufferFree);
    }
    copy(smem_copy, tOrO, tOsO);
    // The TMA engine reads shared memory through the async proxy: publish the stores to it.
    cutlass::arch::fence_view_async_shared();
    if constexpr (kPerWarp) {
      __syncwarp();
    } else {
      barrier_sync(kNumMmaThreads, ForwardBarrier::kOutputStaged);
    }

    Tensor sOSlab = make_tensor(make_smem_ptr(static_cast<Element*>(buffer) + slab * cosize_v<SmemLayoutOSlab>),
                                SmemLayoutOSlab{});
    const int first_row = tile.block * kBlockM + slab * kStoreRows;
    const int rows = min(kStoreRows, int(seq.seqlen_q) - first_row);
    if (!params.seqlens.varlen()) {
      if (slab_thread == 0 && rows > 0) {
        Tensor mO = params.tma_store_o.get_tma_tensor(params.shape_o);
        Tensor gO = local_tile(mO(_, _, tile.head, tile.batch), Shape<Int<kStoreRows>, Int<kHeadDim>>{},
                               make_coord(first_row / kStoreRows, _0{}));
        auto [tOgO_tma, tOsO_tma] = tma_partition(params.tma_store_o, _0{}, Layout<_1>{},
                                                  group_modes<0, 2>(sOSlab), group_modes<0, 2>(gO));
        copy(params.tma_store_o, tOsO_tma, tOgO_tma);
        tma_store_arrive();
        // In V's (or V^T's) buffer, O must be read before the next tile's V loads: wait here.
        if constexpr (!kPerWarp) tma_store_wait<0>();
      }
    } else {
      for (int chunk = slab_thread; chunk < rows * kChunksPerRow; chunk += kSlabThreads) {
        const int row = chunk / kChunksPerRow, column = chunk % kChunksPerRow * kChunk;
        const uint4 value = *reinterpret_cast<uint4 const*>(&sOSlab(row, column));
        const int64_t offset =
            row_offset(params.o_stride, seq.tensor_batch, seq.q_begin + first_row + row, tile.head);
        *reinterpret_cast<uint4*>(params.o + offset + column) = value;
      }
    }
    // Completes once every consumer thread has arrived, thread 0 after the store's read.
    if constexpr (!kPerWarp) output_drained.arrive();

    if (params.lse != nullptr) store_lse(params, tile, seq, thread_idx, lse);
  }

  // After the last tile: each warp's store has read O's own buffer before the CTA's shared memory goes.
  __device__ static void finish(int thread_idx) {
    if constexpr (kPerWarp) {
      if (thread_idx % kSlabThreads == 0) tma_store_wait<0>();
    }
  }

  // A tile whose rows see no key: O = 0 and LSE = -inf, written from registers (shared memory and
  // the pipelines are not involved, so the producer skips such tiles).
  __device__ static void store_empty(Params const& params, PairBlock const& tile, Sequence const& seq,
                                     int thread_idx) {
    const int first_row = tile.block * kBlockM;
    const int rows = min(kBlockM, int(seq.seqlen_q) - first_row);
    for (int chunk = thread_idx; chunk < rows * kChunksPerRow; chunk += kNumMmaThreads) {
      const int row = chunk / kChunksPerRow, column = chunk % kChunksPerRow * kChunk;
      const int64_t offset =
          row_offset(params.o_stride, seq.tensor_batch, seq.q_begin + first_row + row, tile.head);
      *reinterpret_cast<uint4*>(params.o + offset + column) = make_uint4(0, 0, 0, 0);
    }
    if (params.lse != nullptr) {
      for (int row = thread_idx; row < rows; row += kNumMmaThreads) {
        params.lse[lse_index(params.seqlens, seq, params.heads_q, tile.head, first_row + row)] = -INFINITY;
      }
    }
  }

 private:
  template <class RowStats>
  __device__ static void store_lse(Params const& params, PairBlock const& tile, Sequence const& seq,
                                   int thread_idx, RowStats const& lse) {
    typename Config::TiledMmaQK mma_qk;  // same row ownership as the P V accumulator
    Tensor rows = mma_qk.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<kBlockM>, Int<Config::kBlockN>>{}));
    Tensor rows_cols = make_tensor(rows.data(), accumulator_rows_cols(rows.layout()));
    if (thread_idx % 4 != 0) return;  // the quad's first thread holds column 0 of its rows
    CUTE_UNROLL
    for (int r = 0; r < size(lse); ++r) {
      const int row = tile.block * kBlockM + get<0>(rows_cols(r, 0));
      if (row < seq.seqlen_q) params.lse[lse_index(params.seqlens, seq, params.heads_q, tile.head, row)] = lse(r);
    }
  }
};

}  // namespace hopattn::sm90
