// The CPU backward pass, FlashAttention's algorithm on float32 tiles. For a query block and a key
// block it recomputes the scores S = Q K^T, the probabilities P = exp(scale S - LSE) from the
// forward's LSE, dP = dO V^T and dS = P * (dP - D) with D = rowsum(dO * O); then
// dV += P^T dO, dK += dS^T Q (first pass) or dQ += dS K (second pass), dK and dQ scaled at the end.
//
// Determinism without atomics: the first pass runs one task per (sequence, kv head, block of
// kBlockN keys), which owns those rows of dK and dV and walks the query heads of its group and
// their query blocks in order; the second runs one task per (sequence, query head, block of kBlockM
// queries), which owns those rows of dQ and walks the key blocks in order. No two tasks write one
// row, and no task's arithmetic depends on which thread runs it. S and dP are computed in both
// passes (7 matrix products instead of 5), the price of that.
//
// The tiles are kept transposed (keys x queries) as in forward.cpp, so that the per-query-row
// LSE and D are lane-wise vectors. Masked entries (the causal mask, keys past the block, rows whose
// LSE is -inf, which see no key) get P = dS = 0 exactly; where a tile has masked entries and an
// operand of a product holds inf or NaN, that product runs row by row over the visible entries
// only, so that 0 * NaN never reaches a gradient that does not depend on the NaN.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/seqlen.hpp"
#include "core/softmax_math.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/tiles.hpp"

namespace hopattn::cpu {
namespace {

constexpr int64_t kBlockM = 48;  // query rows of a tile
constexpr int64_t kBlockN = 48;  // keys of a tile
// Register tiles: S^T = K Q^T and dP^T = V dO^T in 4 keys x 24 queries; dV, dK (keys x head_dim)
// and dQ (queries x head_dim) in 6 rows x 16 head dims.
constexpr int kScoreRows = 4, kScoreVecs = 3;
constexpr int kOutputRows = 6, kOutputVecs = 2;
constexpr int64_t kScorePanel = kScoreVecs * kLanes;
// Key rows of a tile are padded to a multiple of both register tiles' rows.
constexpr int64_t kKeyRowMultiple = 12;
static_assert(kKeyRowMultiple % kScoreRows == 0 && kKeyRowMultiple % kOutputRows == 0);
static_assert(kBlockN % kKeyRowMultiple == 0 && kBlockM % kScorePanel == 0);
static_assert(kScorePanel % kOutputRows == 0 && kPadFloats % (kOutputVecs * kLanes) == 0);

// One thread's tiles, kept across tasks and calls.
struct Workspace {
  AlignedFloats q_t, d_o_t;   // head_dim x kBlockM: the query block's Q and dO, transposed
  AlignedFloats q, d_o;       // kBlockM x padded head_dim: the same, row-major (first pass)
  AlignedFloats k, v;         // kBlockN x padded head_dim
  AlignedFloats s_t, dp_t;    // kBlockN x kBlockM: S^T then P^T; dP^T then dS^T
  AlignedFloats acc, acc_v;   // kBlockN (= kBlockM) x padded head_dim: dK or dQ; dV
  AlignedFloats lse_log2, delta;  // kBlockM each
  std::vector<int64_t> key_end;   // kBlockM: keys [0, key_end) of the sequence each row sees

  void reserve(int64_t head_dim, int64_t padded_head_dim) {
    for (AlignedFloats* t : {&q_t, &d_o_t}) t->reserve(head_dim * kBlockM);
    for (AlignedFloats* t : {&q, &d_o, &k, &v, &acc, &acc_v}) {
      t->reserve(std::max(kBlockM, kBlockN) * padded_head_dim);
    }
    for (AlignedFloats* t : {&s_t, &dp_t}) t->reserve(kBlockN * kBlockM);
    for (AlignedFloats* t : {&lse_log2, &delta}) t->reserve(kBlockM);
    key_end.resize(static_cast<size_t>(kBlockM));
  }
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// x * 0 is 0 for finite x and NaN for inf or NaN; `count` a multiple of kLanes.
HOPATTN_ALWAYS_INLINE bool all_finite(const float* x, int64_t count) {
  Vec probe = Vec{};
  for (int64_t i = 0; i < count; i += kLanes) probe += load(x + i) * 0.f;
  float any = 0.f;
  for (int l = 0; l < kLanes; ++l) any += probe[l];
  return any == 0.f;
}

template <class Element>
HOPATTN_ALWAYS_INLINE const Element* row_of(const void* base, const Strides& s, int64_t batch,
                                            int64_t row, int64_t head) {
  return static_cast<const Element*>(base) + row_offset(s, batch, row, head);
}

struct QueryBlock {
  int64_t m0 = 0, rows = 0, columns = 0;  // columns: rows rounded up to the score panel
  int64_t min_key_end = 0, max_key_end = 0;
  bool q_finite = true, d_o_finite = true;  // of the row-major copies (first pass only)
};

// Query rows [m0, m0 + rows) of `head`: Q and dO transposed (and row-major when `row_major`),
// each row's LSE in base 2, D = rowsum(dO * O) and visible key end (0 for a row whose LSE is
// -inf: it saw no key in the forward). Columns past `rows` are zero and see no key.
template <class Element>
HOPATTN_ALWAYS_INLINE QueryBlock load_query_block(const BackwardProblem& p, const Sequence& seq,
                                                  int64_t head, int64_t m0, int64_t rows,
                                                  bool row_major, Workspace& ws) {
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  QueryBlock block;
  block.m0 = m0;
  block.rows = rows;
  block.columns = round_up(rows, kScorePanel);
  block.min_key_end = INT64_MAX;
  float* q_t = ws.q_t.data();
  float* d_o_t = ws.d_o_t.data();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = seq.q_begin + m0 + i;
    const Element* q = row_of<Element>(p.q, p.q_stride, seq.tensor_batch, row, head);
    const Element* d_o = row_of<Element>(p.d_o, p.d_o_stride, seq.tensor_batch, row, head);
    const Element* o = row_of<Element>(p.o, p.o_stride, seq.tensor_batch, row, head);
    float delta = 0.f;
    for (int64_t c = 0; c < d; ++c) {
      const float q_c = to_float(q[c]), d_o_c = to_float(d_o[c]);
      q_t[c * kBlockM + i] = q_c;
      d_o_t[c * kBlockM + i] = d_o_c;
      delta += d_o_c * to_float(o[c]);
    }
    if (row_major) {
      float* q_row = ws.q.data() + i * padded_d;
      float* d_o_row = ws.d_o.data() + i * padded_d;
      for (int64_t c = 0; c < d; ++c) q_row[c] = q_t[c * kBlockM + i];
      for (int64_t c = 0; c < d; ++c) d_o_row[c] = d_o_t[c * kBlockM + i];
      std::fill(q_row + d, q_row + padded_d, 0.f);
      std::fill(d_o_row + d, d_o_row + padded_d, 0.f);
    }
    const float lse = p.lse[lse_index(p.seqlens, seq, p.heads_q, head, m0 + i)];
    const bool sees_no_key = lse == -INFINITY;
    const int64_t end =
        sees_no_key ? 0 : visible_key_end(p.causal, m0 + i, seq.seqlen_q, seq.seqlen_k);
    ws.key_end[i] = end;
    ws.lse_log2.data()[i] = sees_no_key ? 0.f : lse * kLog2e;
    ws.delta.data()[i] = delta;
    block.min_key_end = std::min(block.min_key_end, ws.key_end[i]);
    block.max_key_end = std::max(block.max_key_end, ws.key_end[i]);
  }
  for (int64_t i = rows; i < block.columns; ++i) {
    ws.key_end[i] = 0;
    ws.lse_log2.data()[i] = 0.f;
    ws.delta.data()[i] = 0.f;
  }
  for (int64_t c = 0; c < d; ++c) {
    std::fill(q_t + c * kBlockM + rows, q_t + c * kBlockM + block.columns, 0.f);
    std::fill(d_o_t + c * kBlockM + rows, d_o_t + c * kBlockM + block.columns, 0.f);
  }
  if (row_major) {
    block.q_finite = all_finite(ws.q.data(), rows * padded_d);
    block.d_o_finite = all_finite(ws.d_o.data(), rows * padded_d);
  }
  return block;
}

// Keys [n0, n0 + keys) of K and V into rows padded to padded_d columns, zero rows up to
// round_up(keys, kKeyRowMultiple). Returns whether K's rows are all finite.
template <class Element>
HOPATTN_ALWAYS_INLINE bool load_key_block(const BackwardProblem& p, const Sequence& seq,
                                          int64_t kv_head, int64_t n0, int64_t keys,
                                          Workspace& ws) {
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  float* k = ws.k.data();
  float* v = ws.v.data();
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t row = seq.k_begin + n0 + j;
    const Element* k_src = row_of<Element>(p.k, p.k_stride, seq.tensor_batch, row, kv_head);
    const Element* v_src = row_of<Element>(p.v, p.v_stride, seq.tensor_batch, row, kv_head);
    for (int64_t c = 0; c < d; ++c) k[j * padded_d + c] = to_float(k_src[c]);
    for (int64_t c = 0; c < d; ++c) v[j * padded_d + c] = to_float(v_src[c]);
    std::fill(k + j * padded_d + d, k + (j + 1) * padded_d, 0.f);
    std::fill(v + j * padded_d + d, v + (j + 1) * padded_d, 0.f);
  }
  const int64_t key_rows = round_up(keys, kKeyRowMultiple);
  std::fill(k + keys * padded_d, k + key_rows * padded_d, 0.f);
  std::fill(v + keys * padded_d, v + key_rows * padded_d, 0.f);
  return all_finite(k, keys * padded_d);
}

// S^T = K Q^T and dP^T = V dO^T for the loaded blocks, then in place P^T and dS^T: every
// (key j, query i) with j < key_end[i] - n0 (and j < keys) gets P = exp2(S scale_log2 - LSE log2)
// with the exponent clamped to <= 0 (as softmax_exponent: P never exceeds 1; NaN stays NaN) and
// dS = P (dP - D); every other entry P = dS = 0.
HOPATTN_ALWAYS_INLINE void probabilities_and_score_gradients(const BackwardProblem& p,
                                                             const QueryBlock& block, int64_t n0,
                                                             int64_t keys, Workspace& ws) {
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  const int64_t key_rows = round_up(keys, kKeyRowMultiple);
  float* s_t = ws.s_t.data();
  float* dp_t = ws.dp_t.data();
  gemm<kScoreRows, kScoreVecs, false>(ws.k.data(), padded_d, 1, ws.q_t.data(), kBlockM, s_t,
                                      kBlockM, key_rows, block.columns, d);
  gemm<kScoreRows, kScoreVecs, false>(ws.v.data(), padded_d, 1, ws.d_o_t.data(), kBlockM, dp_t,
                                      kBlockM, key_rows, block.columns, d);
  const float scale_log2 = finite_scale_log2(p.softmax_scale);
  for (int64_t c = 0; c < block.columns; c += kLanes) {
    VecInt key_end;  // visible keys of each lane's row, relative to this block
    for (int l = 0; l < kLanes; ++l) {
      key_end[l] = static_cast<int32_t>(std::clamp<int64_t>(ws.key_end[c + l] - n0, 0, keys));
    }
    const Vec lse_log2 = load(ws.lse_log2.data() + c);
    const Vec delta = load(ws.delta.data() + c);
    for (int64_t j = 0; j < key_rows; ++j) {
      float* s = s_t + j * kBlockM + c;
      float* ds = dp_t + j * kBlockM + c;
      const Vec exponent = load(s) * scale_log2 - lse_log2;
      const Vec probability = exp2(exponent > 0.f ? Vec{} : exponent);
      const auto visible = static_cast<int32_t>(j) < key_end;
      store(s, visible ? probability : Vec{});
      store(ds, visible ? probability * (load(ds) - delta) : Vec{});
    }
  }
}

// acc[key rows] (+)= tile^T[key rows x query rows] * rows[query rows x padded_d], the first pass's
// dV += P^T dO and dK += dS^T Q. Row by row over the visible entries only when the tile has masked
// entries and `rows` holds inf or NaN (see the file comment).
HOPATTN_ALWAYS_INLINE void accumulate_key_gradient(const QueryBlock& block, int64_t n0,
                                                   int64_t keys, int64_t padded_d, bool full_tile,
                                                   bool rows_finite, const float* tile,
                                                   const float* rows, const int64_t* key_end,
                                                   float* acc) {
  if (full_tile || rows_finite) {
    gemm<kOutputRows, kOutputVecs, true>(tile, kBlockM, 1, rows, padded_d, acc, padded_d,
                                         round_up(keys, kKeyRowMultiple), padded_d, block.rows);
    return;
  }
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t i = 0; i < block.rows; ++i) {
      if (n0 + j >= key_end[i]) continue;
      const float weight = tile[j * kBlockM + i];
      for (int64_t c = 0; c < padded_d; ++c) acc[j * padded_d + c] += weight * rows[i * padded_d + c];
    }
  }
}

template <class Element>
HOPATTN_ALWAYS_INLINE void store_rows(void* base, const Strides& s, const Sequence& seq,
                                      int64_t first_row, int64_t head, int64_t rows, int64_t d,
                                      int64_t padded_d, const float* acc, float factor) {
  for (int64_t i = 0; i < rows; ++i) {
    Element* dst = static_cast<Element*>(base) +
                   row_offset(s, seq.tensor_batch, first_row + i, head);
    for (int64_t c = 0; c < d; ++c) {
      dst[c] = from_float<Element>(acc == nullptr ? 0.f : acc[i * padded_d + c] * factor);
    }
  }
}

// A task: one block of rows of one head of one sequence. `rows_total` is the length the blocks
// cover: the query length (second pass) or all the key rows the sequence owns (first pass,
// including those past seqused_k, whose gradients are 0).
struct Task {
  Sequence seq;
  int64_t rows_total, head, block;
};

// The tasks of one pass (key blocks: the first; query blocks: the second), in the order the threads
// take them: fixed-length batches in their order, variable-length sequences longest first; within
// a head, key blocks first to last and query blocks last to first, since under the causal mask
// the first key blocks and the last query blocks have the most work, and the end of the schedule
// is better filled with short tasks.
class TaskList {
 public:
  TaskList(const BackwardProblem& p, bool key_blocks)
      : key_blocks_(key_blocks),
        heads_(key_blocks ? p.heads_kv : p.heads_q),
        block_size_(key_blocks ? kBlockN : kBlockM) {
    const SeqlenLayout& layout = p.seqlens;
    SeqlenLayout all_keys = layout;
    all_keys.seqused_k = nullptr;
    if (!layout.varlen()) {
      const Sequence seq = sequence_of(layout, 0);
      fixed_blocks_ = blocks(key_blocks ? seq.seqlen_k : seq.seqlen_q);
      count_ = fixed_blocks_ * heads_ * layout.batch;
      layout_ = &layout;
      return;
    }
    for (int64_t b = 0; b < layout.batch; ++b) {
      const Sequence seq = sequence_of(layout, b);
      entries_.push_back({seq, key_blocks ? sequence_of(all_keys, b).seqlen_k : seq.seqlen_q, 0});
    }
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.rows_total > b.rows_total; });
    for (Entry& e : entries_) {
      e.first_task = count_;
      count_ += blocks(e.rows_total) * heads_;
    }
  }

  int64_t count() const { return count_; }

  Task operator[](int64_t index) const {
    if (layout_ != nullptr) {
      const int64_t batch_head = index / fixed_blocks_;
      const Sequence seq = sequence_of(*layout_, batch_head / heads_);
      const int64_t rows_total = key_blocks_ ? seq.seqlen_k : seq.seqlen_q;
      return {seq, rows_total, batch_head % heads_, block_at(index % fixed_blocks_, fixed_blocks_)};
    }
    const auto found = std::upper_bound(
        entries_.begin(), entries_.end(), index,
        [](int64_t i, const Entry& e) { return i < e.first_task; });
    const Entry& e = *(found - 1);
    const int64_t n = blocks(e.rows_total);
    const int64_t within = index - e.first_task;
    return {e.seq, e.rows_total, within / n, block_at(within % n, n)};
  }

 private:
  struct Entry {
    Sequence seq;
    int64_t rows_total;
    int64_t first_task;
  };
  int64_t blocks(int64_t rows) const { return (rows + block_size_ - 1) / block_size_; }
  int64_t block_at(int64_t i, int64_t n) const { return key_blocks_ ? i : n - 1 - i; }

  bool key_blocks_;
  int64_t heads_, block_size_;
  const SeqlenLayout* layout_ = nullptr;  // fixed lengths
  int64_t fixed_blocks_ = 0;
  int64_t count_ = 0;
  std::vector<Entry> entries_;  // varlen: in task order
};

// First pass: dK and dV of keys [n0, n0 + kBlockN) of a kv head, over every query row of its
// group that sees one of them.
template <class Element>
HOPATTN_ALWAYS_INLINE void key_block_gradients(const BackwardProblem& p, const Task& t,
                                               Workspace& ws) {
  const Sequence& seq = t.seq;
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  const int64_t n0 = t.block * kBlockN;
  const int64_t rows_to_write = std::min(kBlockN, t.rows_total - n0);
  const int64_t keys = std::clamp<int64_t>(seq.seqlen_k - n0, 0, kBlockN);
  const int64_t kv_head = t.head;
  const int64_t first_key_row = seq.k_begin + n0;
  if (keys == 0) {  // keys past seqused_k: no query sees them
    store_rows<Element>(p.dk, p.dk_stride, seq, first_key_row, kv_head, rows_to_write, d, padded_d,
                        nullptr, 0.f);
    store_rows<Element>(p.dv, p.dv_stride, seq, first_key_row, kv_head, rows_to_write, d, padded_d,
                        nullptr, 0.f);
    return;
  }
  ws.reserve(d, padded_d);
  load_key_block<Element>(p, seq, kv_head, n0, keys, ws);
  float* dk = ws.acc.data();
  float* dv = ws.acc_v.data();
  std::fill(dk, dk + round_up(keys, kKeyRowMultiple) * padded_d, 0.f);
  std::fill(dv, dv + round_up(keys, kKeyRowMultiple) * padded_d, 0.f);

  // The first query row that sees key n0: under the causal mask row i sees it iff
  // i >= n0 + seqlen_q - seqlen_k (causal_key_end).
  const int64_t first_row =
      p.causal ? std::max<int64_t>(0, n0 + seq.seqlen_q - seq.seqlen_k) : 0;
  const int64_t group = p.heads_per_kv_head();
  for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    for (int64_t m0 = first_row; m0 < seq.seqlen_q; m0 += kBlockM) {
      const int64_t rows = std::min(kBlockM, seq.seqlen_q - m0);
      const QueryBlock block = load_query_block<Element>(p, seq, head, m0, rows, true, ws);
      if (block.max_key_end <= n0) continue;  // rows whose LSE says they saw no key
      probabilities_and_score_gradients(p, block, n0, keys, ws);
      const bool full_tile = block.min_key_end >= n0 + keys;
      accumulate_key_gradient(block, n0, keys, padded_d, full_tile, block.d_o_finite,
                              ws.s_t.data(), ws.d_o.data(), ws.key_end.data(), dv);
      accumulate_key_gradient(block, n0, keys, padded_d, full_tile, block.q_finite,
                              ws.dp_t.data(), ws.q.data(), ws.key_end.data(), dk);
    }
  }
  store_rows<Element>(p.dk, p.dk_stride, seq, first_key_row, kv_head, keys, d, padded_d, dk,
                      p.softmax_scale);
  store_rows<Element>(p.dv, p.dv_stride, seq, first_key_row, kv_head, keys, d, padded_d, dv, 1.f);
  store_rows<Element>(p.dk, p.dk_stride, seq, first_key_row + keys, kv_head, rows_to_write - keys,
                      d, padded_d, nullptr, 0.f);
  store_rows<Element>(p.dv, p.dv_stride, seq, first_key_row + keys, kv_head, rows_to_write - keys,
                      d, padded_d, nullptr, 0.f);
}

// Second pass: dQ of query rows [m0, m0 + kBlockM) of a head, over the keys they see.
template <class Element>
HOPATTN_ALWAYS_INLINE void query_block_gradient(const BackwardProblem& p, const Task& t,
                                                Workspace& ws) {
  const Sequence& seq = t.seq;
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  const int64_t m0 = t.block * kBlockM;
  const int64_t rows = std::min(kBlockM, seq.seqlen_q - m0);
  const int64_t kv_head = t.head / p.heads_per_kv_head();
  ws.reserve(d, padded_d);
  const QueryBlock block = load_query_block<Element>(p, seq, t.head, m0, rows, false, ws);
  float* dq = ws.acc.data();
  const int64_t output_rows = round_up(rows, kOutputRows);
  std::fill(dq, dq + output_rows * padded_d, 0.f);
  for (int64_t n0 = 0; n0 < block.max_key_end; n0 += kBlockN) {
    const int64_t keys = std::min(kBlockN, block.max_key_end - n0);
    const bool k_finite = load_key_block<Element>(p, seq, kv_head, n0, keys, ws);
    probabilities_and_score_gradients(p, block, n0, keys, ws);
    const float* ds_t = ws.dp_t.data();
    if (block.min_key_end >= n0 + keys || k_finite) {
      gemm<kOutputRows, kOutputVecs, true>(ds_t, 1, kBlockM, ws.k.data(), padded_d, dq, padded_d,
                                           output_rows, padded_d, keys);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t end = std::clamp<int64_t>(ws.key_end[i] - n0, 0, keys);
      for (int64_t j = 0; j < end; ++j) {
        const float weight = ds_t[j * kBlockM + i];
        for (int64_t c = 0; c < padded_d; ++c)
          dq[i * padded_d + c] += weight * ws.k.data()[j * padded_d + c];
      }
    }
  }
  store_rows<Element>(p.dq, p.dq_stride, seq, seq.q_begin + m0, t.head, rows, d, padded_d, dq,
                      p.softmax_scale);
}

// A switch rather than visit_dtype: a lambda would be a separate function, outside the clone.
HOPATTN_CPU_CLONES void run_key_task(const BackwardProblem& p, const Task& task) {
  Workspace& ws = thread_workspace();
  switch (p.dtype) {
    case DType::kFloat32: key_block_gradients<float>(p, task, ws); break;
    case DType::kBFloat16: key_block_gradients<bfloat16>(p, task, ws); break;
    case DType::kFloat16: key_block_gradients<float16>(p, task, ws); break;
    case DType::kFloat8E4M3: break;  // not an attention dtype: validation refuses it
  }
}

HOPATTN_CPU_CLONES void run_query_task(const BackwardProblem& p, const Task& task) {
  Workspace& ws = thread_workspace();
  switch (p.dtype) {
    case DType::kFloat32: query_block_gradient<float>(p, task, ws); break;
    case DType::kBFloat16: query_block_gradient<bfloat16>(p, task, ws); break;
    case DType::kFloat16: query_block_gradient<float16>(p, task, ws); break;
    case DType::kFloat8E4M3: break;  // not an attention dtype: validation refuses it
  }
}

}  // namespace

Status backward(const BackwardProblem& problem) {
  ThreadPool& pool = ThreadPool::instance();
  const TaskList key_tasks(problem, true);
  pool.parallel_for(key_tasks.count(), [&problem, &key_tasks](int64_t index) {
    run_key_task(problem, key_tasks[index]);
  });
  const TaskList query_tasks(problem, false);
  pool.parallel_for(query_tasks.count(), [&problem, &query_tasks](int64_t index) {
    run_query_task(problem, query_tasks[index]);
  });
  return Status::kOk;
}

}  // namespace hopattn::cpu
