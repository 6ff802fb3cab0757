// Where the sequences of a batch lie in the rows of the tensors, for fixed-length batches and for
// variable-length ones packed FlashAttention-style (cu_seqlens). The one definition of a
// sequence's rows, of a row's address and of an LSE entry's address, read by the CPU backend, the
// SM90 kernels, the float64 reference and the tests.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn {

// Strides in elements of a (batch, seqlen, heads, head_dim) tensor; head_dim is unit-stride.
struct Strides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct SeqlenLayout {
  int64_t batch = 0;                 // sequences
  int64_t seqlen_q = 0, seqlen_k = 0;  // fixed: every sequence's length; varlen: max_seqlen_q/k
  int64_t total_q = 0, total_k = 0;    // rows of q/o and of k/v: fixed: seqlen_q/k; varlen: totals
  // Varlen: batch + 1 prefix sums over the rows (null for fixed lengths), and optionally the
  // number of keys each sequence uses. Device pointers on the SM90 backend.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_k = nullptr;

  HOPATTN_HOST_DEVICE bool varlen() const { return cu_seqlens_q != nullptr; }
};

// One sequence: rows [q_begin, q_begin + seqlen_q) of q and o and [k_begin, k_begin + seqlen_k)
// of k and v in batch entry `tensor_batch` of the tensors.
struct Sequence {
  int64_t tensor_batch = 0;
  int64_t q_begin = 0, seqlen_q = 0;
  int64_t k_begin = 0, seqlen_k = 0;
};

HOPATTN_HOST_DEVICE int64_t clamp_to(int64_t value, int64_t low, int64_t high) {
  return value < low ? low : (value > high ? high : value);
}

// Sequence b. Varlen metadata is clamped to the tensors, so that whatever cu_seqlens and
// seqused_k hold, no row outside [0, total) is ever addressed (metadata the SM90 backend cannot
// check without a device sync).
HOPATTN_HOST_DEVICE Sequence sequence_of(const SeqlenLayout& layout, int64_t b) {
  Sequence s;
  if (!layout.varlen()) {
    s.tensor_batch = b;
    s.seqlen_q = layout.seqlen_q;
    s.seqlen_k = layout.seqlen_k;
    return s;
  }
  s.q_begin = clamp_to(layout.cu_seqlens_q[b], 0, layout.total_q);
  s.seqlen_q = clamp_to(layout.cu_seqlens_q[b + 1], s.q_begin, layout.total_q) - s.q_begin;
  s.k_begin = clamp_to(layout.cu_seqlens_k[b], 0, layout.total_k);
  s.seqlen_k = clamp_to(layout.cu_seqlens_k[b + 1], s.k_begin, layout.total_k) - s.k_begin;
  if (layout.seqused_k != nullptr) s.seqlen_k = clamp_to(layout.seqused_k[b], 0, s.seqlen_k);
  return s;
}

// Element offset of row `row` (a row of the tensor: a sequence's q_begin or k_begin plus the
// row within it) of `head` in batch entry `tensor_batch` of a tensor with strides `s`.
HOPATTN_HOST_DEVICE int64_t row_offset(const Strides& s, int64_t tensor_batch, int64_t row,
                                       int64_t head) {
  return tensor_batch * s.batch + row * s.seq + head * s.head;
}

// Index of the LSE of query `row` (counted within the sequence) of `head`: the LSE is
// (batch, heads_q, seqlen_q) for fixed lengths and (heads_q, total_q) for varlen, both contiguous.
HOPATTN_HOST_DEVICE int64_t lse_index(const SeqlenLayout& layout, const Sequence& s,
                                      int64_t heads_q, int64_t head, int64_t row) {
  return (s.tensor_batch * heads_q + head) * layout.total_q + s.q_begin + row;
}

}  // namespace hopattn
