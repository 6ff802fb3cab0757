// TMA descriptors over the (batch, seqlen, heads, head_dim) tensors of the API, built on the host.
// Global tensors are viewed (rows, head_dim, heads, batch): head_dim contiguous, the rest strided,
// so one descriptor serves any stride order the caller hands in; a variable-length batch is one
// batch entry of total rows.
#pragma once

#include <algorithm>

#include <cute/tensor.hpp>

#include "core/seqlen.hpp"

namespace hopattn::sm90 {

using namespace cute;

using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;

inline GmemStride gmem_stride_of(Strides const& s) { return GmemStride{s.seq, _1{}, s.head, s.batch}; }

template <class Element>
__host__ __device__ auto make_gmem_tensor(Element* data, GmemShape const& shape, GmemStride const& stride) {
  return make_tensor(make_gmem_ptr(data), shape, stride);
}

template <class CopyOp, class Element, class SmemLayout, class TileShape>
struct TmaCopy {
  using Copy = decltype(make_tma_copy(CopyOp{},
                                      make_gmem_tensor(static_cast<Element*>(nullptr), GmemShape{}, GmemStride{}),
                                      SmemLayout{}, TileShape{}, _1{}));

  static Copy make(Element* data, GmemShape const& shape, Strides const& strides) {
    return make_tma_copy(CopyOp{}, make_gmem_tensor(data, shape, gmem_stride_of(strides)), SmemLayout{},
                         TileShape{}, _1{});
  }
};

// Whether the driver encoded the descriptor. CuTe zero-initialises it and, when
// cuTensorMapEncodeTiled refuses the arguments, only prints (and asserts in debug builds), leaving
// it all zero bytes. sm90_rules.cpp makes a refusal impossible for a validated call; the launches
// check this as the backstop, so that a refused descriptor is an error rather than a launch.
inline bool encoded(TmaDescriptor const* descriptor) {
  auto const* bytes = reinterpret_cast<unsigned char const*>(descriptor);
  return std::any_of(bytes, bytes + sizeof(TmaDescriptor), [](unsigned char b) { return b != 0; });
}

template <class Element, class SmemLayout, class TileShape>
using TmaLoad = TmaCopy<SM90_TMA_LOAD, Element const, SmemLayout, TileShape>;
template <class Element, class SmemLayout, class TileShape>
using TmaStore = TmaCopy<SM90_TMA_STORE, Element, SmemLayout, TileShape>;

}  // namespace hopattn::sm90
