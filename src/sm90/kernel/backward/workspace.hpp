// The backward's workspace: the float32 dQ accumulator, the LSE in base 2 and D = rowsum(dO * O)
// per query row, and (deterministic runs) one semaphore per query block, in one allocation whose
// layout host and device compute alike.
//
// Rows are padded per (batch entry, head) so that every query block of kBlockM rows starts on a
// multiple of kBlockM: the mainloop then moves whole blocks of LSE and D with 16-byte bulk copies
// and adds whole dQ blocks, rows past a sequence's end landing in its own padding. A varlen
// sequence b starts at round_up(q_begin, kBlockM) + b * kBlockM, which keeps sequences apart
// (round_up(a) + round_up(l) <= round_up(a + l) + kBlockM) and inside
// round_up(total_q, kBlockM) + batch * kBlockM rows, whatever the clamped cu_seqlens hold.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.hpp"
#include "core/problem.hpp"
#include "core/seqlen.hpp"

namespace hopattn::sm90 {

// sequence_of, with the lengths also clamped to max_seqlen_q/k for varlen: the grids of the three
// backward kernels are sized by them, so every row a step reads was prepared by the preprocess
// (only metadata that breaks the API's rules is affected).
HOPATTN_HOST_DEVICE Sequence backward_sequence_of(const SeqlenLayout& layout, int64_t b) {
  Sequence s = sequence_of(layout, b);
  if (layout.varlen()) {
    s.seqlen_q = s.seqlen_q < layout.seqlen_q ? s.seqlen_q : layout.seqlen_q;
    s.seqlen_k = s.seqlen_k < layout.seqlen_k ? s.seqlen_k : layout.seqlen_k;
  }
  return s;
}

// The key rows of sequence b whose dK and dV the backward stores: its cu_seqlens_k rows, of which
// the first seqlen_k (seqused_k) have gradients and the rest get zeros (dk and dv are written whole).
HOPATTN_HOST_DEVICE int64_t backward_key_rows(const SeqlenLayout& layout, const Sequence& s, int64_t b) {
  if (!layout.varlen() || layout.seqused_k == nullptr) return s.seqlen_k;
  const int64_t rows = clamp_to(layout.cu_seqlens_k[b + 1], s.k_begin, layout.total_k) - s.k_begin;
  return rows < layout.seqlen_k ? rows : layout.seqlen_k;
}

struct BackwardWorkspace {
  // (entries, heads_q, padded_rows, head_dim), each query block's block_m x head_dim floats in the
  // order of the main kernel's dQ registers (BackwardConfig::dq_accum_offset), not row-major.
  float* dq_accum = nullptr;
  float* lse_log2 = nullptr;   // (entries, heads_q, padded_rows): LSE * log2(e); +inf: no gradient
  float* dpsum = nullptr;      // (entries, heads_q, padded_rows): D = rowsum(dO * O)
  int* semaphores = nullptr;   // (entries, heads_q, padded_rows / block_m), or null
  int64_t padded_rows = 0;
  int heads_q = 0, head_dim = 0, block_m = 0;
  bool varlen = false;

  static constexpr size_t kAlignment = 256;
  HOPATTN_HOST_DEVICE static size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  // The layout of `problem`'s workspace at `base` (null: sizes only); `bytes` receives its size.
  static BackwardWorkspace make(const BackwardProblem& p, int block_m, void* base, size_t* bytes) {
    BackwardWorkspace w;
    w.heads_q = int(p.heads_q);
    w.head_dim = int(p.head_dim);
    w.block_m = block_m;
    w.varlen = p.seqlens.varlen();
    const int64_t entries = w.varlen ? 1 : p.seqlens.batch;
    const int64_t rows = w.varlen ? p.seqlens.total_q : p.seqlens.seqlen_q;
    w.padded_rows = (rows + block_m - 1) / block_m * block_m + (w.varlen ? p.seqlens.batch * block_m : 0);
    const size_t row_count = size_t(entries * p.heads_q * w.padded_rows);
    const size_t accum_bytes = aligned(row_count * size_t(p.head_dim) * sizeof(float));
    const size_t vector_bytes = aligned(row_count * sizeof(float));
    const size_t semaphore_bytes = p.deterministic ? aligned(row_count / size_t(block_m) * sizeof(int)) : 0;
    *bytes = accum_bytes + 2 * vector_bytes + semaphore_bytes;
    if (base != nullptr) {
      char* next = static_cast<char*>(base);
      w.dq_accum = reinterpret_cast<float*>(next);
      w.lse_log2 = reinterpret_cast<float*>(next += accum_bytes);
      w.dpsum = reinterpret_cast<float*>(next += vector_bytes);
      w.semaphores = p.deterministic ? reinterpret_cast<int*>(next += vector_bytes) : nullptr;
    }
    return w;
  }

  // Padded index of row `row` (counted within the sequence, may lie in the last block's padding)
  // of `head` of sequence b.
  HOPATTN_HOST_DEVICE int64_t row_index(const Sequence& s, int64_t b, int64_t head, int64_t row) const {
    const int64_t begin = varlen ? (s.q_begin + block_m - 1) / block_m * block_m + b * block_m : 0;
    return (s.tensor_batch * heads_q + head) * padded_rows + begin + row;
  }
  // The semaphore of the query block that starts at row `first_row` (a multiple of block_m).
  HOPATTN_HOST_DEVICE int64_t block_index(const Sequence& s, int64_t b, int64_t head, int64_t first_row) const {
    return row_index(s, b, head, first_row) / block_m;
  }
};

}  // namespace hopattn::sm90
