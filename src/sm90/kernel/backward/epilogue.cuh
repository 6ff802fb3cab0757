// The backward epilogue collective: dK (scaled by the softmax scale, which the mainloop leaves out
// of dS) and dV converted to the element type and stored from registers, two adjacent elements per
// store, keys of the sequence only (a varlen key block's tail belongs to the next sequence), and
// zeros for the keys past seqused_k. It runs once per CTA, after every step, so it owns parameters
// only.
#pragma once

#include <cute/tensor.hpp>

#include "core/problem.hpp"
#include "core/seqlen.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <class Config>
struct BackwardEpilogue {
  using Element = typename Config::Element;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;

  struct Params {
    Element* dk;
    Element* dv;
    Strides dk_stride, dv_stride;
    float softmax_scale;
  };

  static Params to_params(BackwardProblem const& p) {
    return {static_cast<Element*>(p.dk), static_cast<Element*>(p.dv), p.dk_stride, p.dv_stride, p.softmax_scale};
  }

  // A key block that no query sees (a sequence without queries) stores dK = dV = 0 the same way.
  template <class Work, class FragdK, class FragdV>
  __device__ static void store(Params const& params, Work const& work, int thread_idx, FragdK& dk, FragdV const& dv) {
    typename Config::TiledMmadKV mma_dkv;
    Tensor coords = mma_dkv.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    CUTE_UNROLL
    for (int i = 0; i < size(dk); ++i) dk(i) *= params.softmax_scale;
    store_one(params.dk, params.dk_stride, work, convert_fragment<Element>(dk), coords);
    store_one(params.dv, params.dv_stride, work, convert_fragment<Element>(dv), coords);
  }

 private:
  template <class Work, class Frag, class Coords>
  __device__ static void store_one(Element* out, Strides const& stride, Work const& work, Frag const& values,
                                   Coords const& coords) {
    Tensor v = make_tensor(values.data(), accumulator_rows_cols(values.layout()));
    Tensor c = make_tensor(coords.data(), accumulator_rows_cols(coords.layout()));
    const int64_t first_key = int64_t(work.n_block) * kBlockN;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(v); ++r) {
      const int64_t key = first_key + get<0>(c(r, 0));
      if (key >= work.key_rows) continue;
      const bool has_gradient = key < work.seq.seqlen_k;
      Element* row = out + row_offset(stride, work.seq.tensor_batch, work.seq.k_begin + key, work.head_kv);
      CUTE_UNROLL
      for (int col = 0; col < size<1>(v); col += 2) {
        // Columns col and col + 1 of a row are adjacent registers and adjacent elements.
        cutlass::Array<Element, 2> pair;
        pair[0] = has_gradient ? v(r, col) : Element(0.f);
        pair[1] = has_gradient ? v(r, col + 1) : Element(0.f);
        *reinterpret_cast<cutlass::Array<Element, 2>*>(row + get<1>(c(r, col))) = pair;
      }
    }
  }
};

}  // namespace hopattn::sm90
