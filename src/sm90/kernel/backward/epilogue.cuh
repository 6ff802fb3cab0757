// The backward epilogue collective: dK (scaled by the softmax scale, which the mainloop leaves out
// of dS) and dV converted to the element type, staged in shared memory (the Q and dO buffers, free
// by then) and stored from there in whole 16-byte chunks of rows, keys of the sequence only (a
// varlen key block's tail belongs to the next sequence), and zeros for the keys past seqused_k. It
// runs once per CTA, after every step, so it owns parameters only.
#pragma once

#include <cute/tensor.hpp>

#include "core/problem.hpp"
#include "core/seqlen.hpp"
#include "sm90/kernel/backward/barriers.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <class Config>
struct BackwardEpilogue {
  using Element = typename Config::Element;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kNumMmaThreads = Config::kNumMmaThreads;
  // A staged tile is (kBlockN keys, kHeadDim) row-major in 16-byte chunks; chunk c of row r lies at
  // c ^ (r & kSwizzle), within an aligned group of kSwizzle + 1 chunks, so that the 8 rows a warp
  // writes per store land in different banks.
  static constexpr int kChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static constexpr int kSwizzle = kChunksPerRow % 8 == 0 ? 7 : 3;
  static_assert(kChunksPerRow % (kSwizzle + 1) == 0);
  static_assert(kBlockN * kChunksPerRow % kNumMmaThreads == 0);
  static_assert(Config::kBlockM * Config::kStages >= kBlockN, "a Q or dO buffer holds one staged tile");

  struct Params {
    Element* dk;
    Element* dv;
    Strides dk_stride, dv_stride;
    float softmax_scale;
  };

  static Params to_params(BackwardProblem const& p) {
    return {static_cast<Element*>(p.dk), static_cast<Element*>(p.dv), p.dk_stride, p.dv_stride, p.softmax_scale};
  }

  // Run by every consumer thread after the mainloop. `staging_dk` and `staging_dv`: kBlockN x
  // kHeadDim elements of shared memory each, which the mainloop's products read until this waits
  // for them.
  template <class Work, class FragdK, class FragdV>
  __device__ static void store(Params const& params, Work const& work, int thread_idx, FragdK& dk, FragdV const& dv,
                               Element* staging_dk, Element* staging_dv) {
    typename Config::TiledMmadKV mma_dkv;
    Tensor coords = mma_dkv.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    CUTE_UNROLL
    for (int i = 0; i < size(dk); ++i) dk(i) *= params.softmax_scale;
    asm volatile("" ::: "memory");
    barrier_sync(kNumMmaThreads, BackwardBarrier::kdKVStaging);  // both warpgroups' products retired
    asm volatile("" ::: "memory");
    stage(staging_dk, convert_fragment<Element>(dk), coords);
    stage(staging_dv, convert_fragment<Element>(dv), coords);
    asm volatile("" ::: "memory");
    barrier_sync(kNumMmaThreads, BackwardBarrier::kdKVStaging);  // every thread's rows are staged
    asm volatile("" ::: "memory");
    store_rows(params.dk, params.dk_stride, work, staging_dk, thread_idx);
    store_rows(params.dv, params.dv_stride, work, staging_dv, thread_idx);
  }

  // Run by every consumer thread, instead of the mainloop and store(), for a key block that no
  // query sees (a sequence without queries): dK = dV = 0 for its rows.
  template <class Work>
  __device__ static void store_zeros(Params const& params, Work const& work, int thread_idx) {
    store_rows(params.dk, params.dk_stride, work, nullptr, thread_idx);
    store_rows(params.dv, params.dv_stride, work, nullptr, thread_idx);
  }

 private:
  __device__ static int staged_index(int row, int column) {
    return row * kHeadDim + ((column / kChunk) ^ (row & kSwizzle)) * kChunk + column % kChunk;
  }

  template <class Frag, class Coords>
  __device__ static void stage(Element* staging, Frag const& values, Coords const& coords) {
    Tensor v = make_tensor(values.data(), accumulator_rows_cols(values.layout()));
    Tensor c = make_tensor(coords.data(), accumulator_rows_cols(coords.layout()));
    CUTE_UNROLL
    for (int r = 0; r < size<0>(v); ++r) {
      const int row = get<0>(c(r, 0));
      CUTE_UNROLL
      for (int col = 0; col < size<1>(v); col += 2) {
        // Columns col and col + 1 of a row are adjacent registers and adjacent elements, and an even
        // column's pair never straddles a 16-byte chunk.
        cutlass::Array<Element, 2> pair;
        pair[0] = v(r, col);
        pair[1] = v(r, col + 1);
        *reinterpret_cast<cutlass::Array<Element, 2>*>(staging + staged_index(row, get<1>(c(r, col)))) = pair;
      }
    }
  }

  // Consecutive threads store consecutive 16-byte chunks of the tile's rows: from `staging`, or
  // zeros where it is null.
  template <class Work>
  __device__ static void store_rows(Element* out, Strides const& stride, Work const& work, Element const* staging,
                                    int thread_idx) {
    const int64_t first_key = int64_t(work.n_block) * kBlockN;
    CUTE_UNROLL
    for (int k = 0; k < kBlockN * kChunksPerRow / kNumMmaThreads; ++k) {
      const int i = thread_idx + k * kNumMmaThreads;
      const int row = i / kChunksPerRow, chunk = i % kChunksPerRow;
      const int64_t key = first_key + row;
      if (key >= work.key_rows) break;  // rows only grow with i
      uint4 bits = make_uint4(0, 0, 0, 0);
      if (staging != nullptr && key < work.seq.seqlen_k) {
        bits = *reinterpret_cast<uint4 const*>(staging + row * kHeadDim + (chunk ^ (row & kSwizzle)) * kChunk);
      }
      Element* row_out = out + row_offset(stride, work.seq.tensor_batch, work.seq.k_begin + key, work.head_kv);
      *reinterpret_cast<uint4*>(row_out + chunk * kChunk) = bits;
    }
  }
};

}  // namespace hopattn::sm90
