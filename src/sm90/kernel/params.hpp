// Kernel parameters: TMA descriptors for Q, K, V (loads) and O (store), built on the host and passed
// as one __grid_constant__ struct, plus the scalars the mainloop and epilogue need.
#pragma once

#include <cute/tensor.hpp>

#include "core/problem.hpp"
#include "core/softmax_math.hpp"

namespace hopattn::sm90 {

using namespace cute;

// Global tensors are viewed (seqlen, head_dim, heads, batch): head_dim contiguous, the rest strided,
// so one descriptor serves any (batch, seqlen, heads) stride order the caller hands in.
using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;

template <class Element>
__host__ __device__ auto make_gmem_tensor(Element* data, GmemShape const& shape,
                                          GmemStride const& stride) {
  return make_tensor(make_gmem_ptr(data), shape, stride);
}

template <class Config>
struct ForwardParams {
  using Element = typename Config::Element;
  using QTile = Shape<Int<Config::kBlockM>, Int<Config::kHeadDim>>;
  using KVTile = Shape<Int<Config::kBlockN>, Int<Config::kHeadDim>>;

  using TmaLoadQ = decltype(make_tma_copy(
      SM90_TMA_LOAD{}, make_gmem_tensor(static_cast<Element const*>(nullptr), GmemShape{}, GmemStride{}),
      typename Config::SmemLayoutQ{}, QTile{}, _1{}));
  using TmaLoadKV = decltype(make_tma_copy(
      SM90_TMA_LOAD{}, make_gmem_tensor(static_cast<Element const*>(nullptr), GmemShape{}, GmemStride{}),
      take<0, 2>(typename Config::SmemLayoutKV{}), KVTile{}, _1{}));
  using TmaStoreO = decltype(make_tma_copy(
      SM90_TMA_STORE{}, make_gmem_tensor(static_cast<Element*>(nullptr), GmemShape{}, GmemStride{}),
      typename Config::SmemLayoutO{}, QTile{}, _1{}));

  GmemShape shape_q;  // O has Q's shape
  GmemShape shape_kv;
  TmaLoadQ tma_load_q;
  TmaLoadKV tma_load_k, tma_load_v;
  TmaStoreO tma_store_o;
  float* lse;  // (batch, heads_q, seqlen_q), or null
  int seqlen_q, seqlen_k, heads_q, heads_per_kv_head, batch;
  int num_m_blocks;
  float softmax_scale;
};

inline GmemStride gmem_stride_of(Strides const& s) { return GmemStride{s.seq, _1{}, s.head, s.batch}; }

template <class Config>
ForwardParams<Config> make_forward_params(AttentionProblem const& p) {
  using Element = typename Config::Element;
  using Params = ForwardParams<Config>;
  const GmemShape shape_q{int32_t(p.seqlen_q), int32_t(p.head_dim), int32_t(p.heads_q), int32_t(p.batch)};
  const GmemShape shape_kv{int32_t(p.seqlen_k), int32_t(p.head_dim), int32_t(p.heads_kv),
                           int32_t(p.batch)};
  auto q = make_gmem_tensor(static_cast<Element const*>(p.q), shape_q, gmem_stride_of(p.q_stride));
  auto k = make_gmem_tensor(static_cast<Element const*>(p.k), shape_kv, gmem_stride_of(p.k_stride));
  auto v = make_gmem_tensor(static_cast<Element const*>(p.v), shape_kv, gmem_stride_of(p.v_stride));
  auto o = make_gmem_tensor(static_cast<Element*>(p.o), shape_q, gmem_stride_of(p.o_stride));

  Params params{};
  params.shape_q = shape_q;
  params.shape_kv = shape_kv;
  params.tma_load_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename Config::SmemLayoutQ{},
                                    typename Params::QTile{}, _1{});
  params.tma_load_k = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename Config::SmemLayoutKV{}),
                                    typename Params::KVTile{}, _1{});
  params.tma_load_v = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename Config::SmemLayoutKV{}),
                                    typename Params::KVTile{}, _1{});
  params.tma_store_o = make_tma_copy(SM90_TMA_STORE{}, o, typename Config::SmemLayoutO{},
                                     typename Params::QTile{}, _1{});
  params.lse = p.lse;
  params.seqlen_q = int(p.seqlen_q);
  params.seqlen_k = int(p.seqlen_k);
  params.heads_q = int(p.heads_q);
  params.heads_per_kv_head = int(p.heads_per_kv_head());
  params.batch = int(p.batch);
  params.num_m_blocks = int(ceil_div(p.seqlen_q, int64_t(Config::kBlockM)));
  params.softmax_scale = p.softmax_scale;
  return params;
}

}  // namespace hopattn::sm90
