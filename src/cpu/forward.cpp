// The CPU forward pass: the algorithm of the SM90 kernel on float32 tiles. Each task owns one
// (sequence, head, block of kBlockM query rows) of a fixed-length or variable-length batch; it
// converts its Q block once, then streams K and V in blocks of kBlockN keys through S = Q K^T, the
// mask, the online-softmax update of core/softmax_math.hpp and O += P V, skipping key blocks the
// causal mask hides from every row of the block, and normalises once at the end.
//
// The score tile is kept transposed (keys x queries): S^T = K Q^T reads K rows as they are in
// memory, and the per-query-row softmax statistics become lane-wise vector operations over
// eight query rows at a time, with no horizontal reductions.
//
// The inputs are converted to float32 as their rows are loaded into the tiles, so the same code
// runs on e4m3 codes (the FP8 forward, forward_fp8.cpp): each is multiplied by its row's scale
// there (and a transposed V's rows gathered from its columns), and the algorithm sees the
// dequantised values.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/seqlen.hpp"
#include "core/softmax_math.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/forward_inputs.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/tiles.hpp"

namespace hopattn::cpu {
namespace {

constexpr int64_t kBlockM = 192;  // query rows per task
constexpr int64_t kBlockN = 64;   // keys per step
// Register tiles: S^T = K Q^T in 4 keys x 24 queries, O += P V in 6 queries x 16 head dims.
constexpr int kScoreRows = 4, kScoreVecs = 3;
constexpr int kOutputRows = 6, kOutputVecs = 2;
constexpr int64_t kScorePanel = kScoreVecs * kLanes;
static_assert(kBlockM % kScorePanel == 0 && kScorePanel % kOutputRows == 0);
static_assert(kBlockN % kScoreRows == 0 && kPadFloats % (kOutputVecs * kLanes) == 0);

// One thread's tiles, kept across tasks and calls.
struct Workspace {
  AlignedFloats q_t;  // head_dim x kBlockM: the query block, transposed
  AlignedFloats k;    // kBlockN x head_dim
  AlignedFloats v;    // kBlockN x padded head_dim
  AlignedFloats s_t;  // kBlockN x kBlockM: scores, then probabilities
  AlignedFloats o;    // kBlockM x padded head_dim: the unnormalised output
  AlignedFloats row_max, row_sum, rescale, exponent_max;  // kBlockM each

  void reserve(int64_t head_dim, int64_t padded_head_dim) {
    q_t.reserve(head_dim * kBlockM);
    k.reserve(kBlockN * head_dim);
    v.reserve(kBlockN * padded_head_dim);
    s_t.reserve(kBlockN * kBlockM);
    o.reserve(kBlockM * padded_head_dim);
    for (AlignedFloats* stats : {&row_max, &row_sum, &rescale, &exponent_max})
      stats->reserve(kBlockM);
  }
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

struct Task {
  Sequence seq;
  int64_t head, block;
};

int64_t query_blocks(int64_t seqlen_q) { return (seqlen_q + kBlockM - 1) / kBlockM; }

// The tasks of a call, in the order the threads take them. Sequence by sequence and within one
// head by head, so that the threads stream the same K and V and find them in the shared cache;
// within a head the highest query blocks first, since under the causal mask they see the most
// keys, and the end of the schedule is better filled with short tasks. Variable-length
// sequences go longest (in keys) first, for the same reason.
class TaskList {
 public:
  explicit TaskList(const ForwardProblem& p) : layout_(p.seqlens), heads_q_(p.heads_q) {
    if (!layout_.varlen()) {
      count_ = query_blocks(layout_.seqlen_q) * layout_.batch * heads_q_;
      return;
    }
    sequences_.resize(static_cast<size_t>(layout_.batch));
    for (int64_t b = 0; b < layout_.batch; ++b) sequences_[b] = sequence_of(layout_, b);
    std::stable_sort(sequences_.begin(), sequences_.end(),
                     [](const Sequence& a, const Sequence& b) { return a.seqlen_k > b.seqlen_k; });
    first_task_.assign(sequences_.size() + 1, 0);
    for (size_t i = 0; i < sequences_.size(); ++i)
      first_task_[i + 1] = first_task_[i] + query_blocks(sequences_[i].seqlen_q) * heads_q_;
    count_ = first_task_.back();
  }

  int64_t count() const { return count_; }

  Task operator[](int64_t index) const {
    if (!layout_.varlen()) {
      const int64_t blocks = query_blocks(layout_.seqlen_q);
      const int64_t batch_head = index / blocks;
      return {sequence_of(layout_, batch_head / heads_q_), batch_head % heads_q_,
              blocks - 1 - index % blocks};
    }
    const size_t i = static_cast<size_t>(
        std::upper_bound(first_task_.begin(), first_task_.end(), index) - first_task_.begin() - 1);
    const int64_t blocks = query_blocks(sequences_[i].seqlen_q);
    const int64_t within = index - first_task_[i];
    return {sequences_[i], within / blocks, blocks - 1 - within % blocks};
  }

 private:
  const SeqlenLayout& layout_;
  int64_t heads_q_;
  int64_t count_ = 0;
  std::vector<Sequence> sequences_;  // varlen: in task order
  std::vector<int64_t> first_task_;  // varlen: index of each sequence's first task, then count_
};

// e4m3 inputs are codes, each standing for its value times its row's scale.
template <class Input>
constexpr bool kScaledInput = std::is_same_v<Input, float8_e4m3>;

// The factor of tensor row `row` of `head` in batch entry `b`: 1 for 16- and 32-bit inputs; for
// e4m3 the row's scale, or NaN for a scale that is not finite (the mark of a block that held NaN
// or inf): +inf times a code would give +-inf, and a -inf score would act as a masked key rather
// than make the rows that see it NaN.
template <class Input>
HOPATTN_ALWAYS_INLINE float row_factor(const Fp8Scales* scales, int64_t b, int64_t row,
                                       int64_t head) {
  if constexpr (kScaledInput<Input>) {
    const float scale = scales->data[scales->index(b, head, row)];
    return std::isfinite(scale) ? scale : NAN;
  } else {
    return 1.f;
  }
}

template <class Input>
HOPATTN_ALWAYS_INLINE float input_value(Input element, float factor) {
  if constexpr (kScaledInput<Input>) {
    return to_float(element) * factor;
  } else {
    return to_float(element);
  }
}

template <class Input>
HOPATTN_ALWAYS_INLINE void convert_row(const Input* src, float* dst, int64_t count, float factor) {
  for (int64_t i = 0; i < count; ++i) dst[i] = input_value(src[i], factor);
}

// Query rows [m0, m0 + rows) transposed into q_t, zero in the padded columns up to `columns`
// so that their scores stay finite.
template <class Input>
HOPATTN_ALWAYS_INLINE void load_query_block(const ForwardProblem& p, const Fp8Inputs& fp8,
                                            const Task& t, int64_t m0, int64_t rows,
                                            int64_t columns, float* q_t) {
  const int64_t d = p.head_dim;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = t.seq.q_begin + m0 + i;
    const Input* src =
        static_cast<const Input*>(p.q) + row_offset(p.q_stride, t.seq.tensor_batch, row, t.head);
    const float factor = row_factor<Input>(fp8.q_scales, t.seq.tensor_batch, row, t.head);
    for (int64_t c = 0; c < d; ++c) q_t[c * kBlockM + i] = input_value(src[c], factor);
  }
  for (int64_t c = 0; c < d; ++c)
    std::fill(q_t + c * kBlockM + rows, q_t + c * kBlockM + columns, 0.f);
}

// Into L2: a block of K and V outgrows L1.
HOPATTN_ALWAYS_INLINE void prefetch_bytes(const void* begin, int64_t bytes) {
  for (int64_t offset = 0; offset < bytes; offset += 64)
    __builtin_prefetch(static_cast<const char*>(begin) + offset, 0, 2);
}

// K and V rows lie a seq_stride apart (a transposed V's columns a pitch apart), usually in
// different pages, where the hardware prefetchers do not follow; asking for the next block's
// rows while this block's P V runs hides their latency.
template <class Input>
HOPATTN_ALWAYS_INLINE void prefetch_key_block(const ForwardProblem& p, const Fp8Inputs& fp8,
                                              const Sequence& seq, int64_t kv_head, int64_t n0,
                                              int64_t keys) {
  const int64_t row_bytes = p.head_dim * static_cast<int64_t>(sizeof(Input));
  const auto* k = static_cast<const Input*>(p.k);
  const auto* v = static_cast<const Input*>(p.v);
  const int64_t b = seq.tensor_batch, first = seq.k_begin + n0;
  for (int64_t j = 0; j < keys; ++j) {
    prefetch_bytes(k + row_offset(p.k_stride, b, first + j, kv_head), row_bytes);
    if (!fp8.v_transposed) {
      prefetch_bytes(v + row_offset(p.v_stride, b, first + j, kv_head), row_bytes);
    }
  }
  if (!fp8.v_transposed) return;
  // Each column holds the block's keys in whole groups, a group's keys in its own bytes.
  const int64_t group_bytes = kVTransposedGroup * static_cast<int64_t>(sizeof(Input));
  for (int64_t c = 0; c < p.head_dim; ++c) {
    for (int64_t row = first / kVTransposedGroup * kVTransposedGroup; row < first + keys;
         row += kVTransposedGroup) {
      prefetch_bytes(v + fp8.v_transposed->offset(b, row, kv_head, c), group_bytes);
    }
  }
}

// Row `row` of V's head `head` in batch entry b, dequantised, into dst: gathered from the head_dim
// columns when V is transposed.
template <class Input>
HOPATTN_ALWAYS_INLINE void load_value_row(const ForwardProblem& p, const Fp8Inputs& fp8, int64_t b,
                                          int64_t row, int64_t head, float* dst) {
  const auto* v = static_cast<const Input*>(p.v);
  const float factor = row_factor<Input>(fp8.v_scales, b, row, head);
  if (!fp8.v_transposed) {
    convert_row(v + row_offset(p.v_stride, b, row, head), dst, p.head_dim, factor);
    return;
  }
  const Input* column0 = v + fp8.v_transposed->offset(b, row, head, 0);
  const int64_t pitch = fp8.v_transposed->pitch;
  for (int64_t c = 0; c < p.head_dim; ++c) dst[c] = input_value(column0[c * pitch], factor);
}

// Keys [n0, n0 + keys) of the sequence's K into rows of `k` (zero rows up to `k_rows`), and of V
// into rows of `v` padded with zeros to `padded_d` columns. Returns whether V's rows are all finite.
template <class Input>
HOPATTN_ALWAYS_INLINE bool load_key_block(const ForwardProblem& p, const Fp8Inputs& fp8,
                                          const Sequence& seq, int64_t kv_head, int64_t n0,
                                          int64_t keys, int64_t k_rows, int64_t padded_d, float* k,
                                          float* v) {
  const int64_t d = p.head_dim;
  const auto* k_src = static_cast<const Input*>(p.k);
  const int64_t b = seq.tensor_batch;
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t row = seq.k_begin + n0 + j;
    convert_row(k_src + row_offset(p.k_stride, b, row, kv_head), k + j * d, d,
                row_factor<Input>(fp8.k_scales, b, row, kv_head));
    load_value_row<Input>(p, fp8, b, row, kv_head, v + j * padded_d);
    std::fill(v + j * padded_d + d, v + (j + 1) * padded_d, 0.f);
  }
  std::fill(k + keys * d, k + k_rows * d, 0.f);
  // x * 0 is 0 for finite x and NaN for inf or NaN.
  Vec probe = Vec{};
  for (int64_t i = 0; i < keys * padded_d; i += kLanes) probe += load(v + i) * 0.f;
  float any = 0.f;
  for (int l = 0; l < kLanes; ++l) any += probe[l];
  return any == 0.f;
}

// O += P V for a key block in which some rows do not see some keys (the causal mask) and V holds
// an inf or NaN: the GEMM would multiply the masked keys' P = 0 by it and put NaN into rows that
// never see that key. Each row here adds only the keys it sees. Slow, and only for such blocks.
HOPATTN_ALWAYS_INLINE void masked_pv(const ForwardProblem& p, const Sequence& seq, int64_t m0,
                                     int64_t n0, int64_t keys, int64_t first_row, int64_t rows,
                                     int64_t padded_d, const float* s_t, const float* v, float* o) {
  for (int64_t i = first_row; i < rows; ++i) {
    const int64_t end = std::clamp<int64_t>(
        visible_key_end(p.causal, m0 + i, seq.seqlen_q, seq.seqlen_k) - n0, 0, keys);
    for (int64_t j = 0; j < end; ++j) {
      const float weight = s_t[j * kBlockM + i];
      for (int64_t c = 0; c < padded_d; ++c) o[i * padded_d + c] += weight * v[j * padded_d + c];
    }
  }
}

// The online-softmax step for the key block in s_t (keys x columns, query rows in the lanes,
// from first_column on): masks scores past each row's last visible key, updates the running
// max and sum, leaves the numerators P in s_t and the factor that rescales each output row in
// `rescale`. The exponents are softmax_exponent's (core/softmax_math.hpp): the max subtracted
// before the scale is applied, so that no exponent exceeds 0 whatever the scores' magnitude.
HOPATTN_ALWAYS_INLINE void online_softmax_step(const ForwardProblem& p, const Sequence& seq,
                                               int64_t m0, int64_t n0, int64_t keys,
                                               int64_t first_column, int64_t columns,
                                               float scale_log2, Workspace& ws) {
  float* s_t = ws.s_t.data();
  float* row_max = ws.row_max.data();
  float* row_sum = ws.row_sum.data();
  float* rescale = ws.rescale.data();
  float* exponent_max = ws.exponent_max.data();
  for (int64_t c = first_column; c < columns; c += kLanes) {
    VecInt key_end;  // visible keys of each lane's row, relative to this block
    for (int l = 0; l < kLanes; ++l) {
      const int64_t end = visible_key_end(p.causal, m0 + c + l, seq.seqlen_q, seq.seqlen_k) - n0;
      key_end[l] = static_cast<int32_t>(std::clamp<int64_t>(end, 0, keys));
    }
    Vec block_max = splat(-INFINITY);
    for (int64_t j = 0; j < keys; ++j) {
      float* s = s_t + j * kBlockM + c;
      const Vec score = static_cast<int32_t>(j) < key_end ? load(s) : splat(-INFINITY);
      store(s, score);
      block_max = max(block_max, score);
    }
    for (int l = 0; l < kLanes; ++l) {
      const float old_max = row_max[c + l];
      const float new_max = std::max(old_max, block_max[l]);
      exponent_max[c + l] = exponent_row_max(new_max);
      rescale[c + l] = bounded_rescale_factor(old_max, new_max, scale_log2);
      row_max[c + l] = new_max;
    }
    // softmax_exponent, eight rows at a time; exp2 of it is the numerator.
    const Vec lane_max = load(exponent_max + c);
    Vec sum = Vec{};
    for (int64_t j = 0; j < keys; ++j) {
      float* s = s_t + j * kBlockM + c;
      const Vec numerator = exp2((load(s) - lane_max) * scale_log2);
      store(s, numerator);
      sum += numerator;
    }
    store(row_sum + c, load(row_sum + c) * load(rescale + c) + sum);
  }
}

// One task: q, k and v of element type Input (dequantised as `fp8` says for e4m3), o of Output.
template <class Input, class Output>
HOPATTN_ALWAYS_INLINE void attend_query_block(const ForwardProblem& p, const Fp8Inputs& fp8,
                                              const Task& t, Workspace& ws) {
  const int64_t d = p.head_dim;
  const int64_t padded_d = round_up(d, kPadFloats);
  const int64_t m0 = t.block * kBlockM;
  const Sequence& seq = t.seq;
  const int64_t rows = std::min(kBlockM, seq.seqlen_q - m0);
  const int64_t score_columns = round_up(rows, kScorePanel);
  const int64_t output_rows = round_up(rows, kOutputRows);
  const int64_t kv_head = t.head / p.heads_per_kv_head();
  const float scale_log2 = finite_scale_log2(p.softmax_scale);

  ws.reserve(d, padded_d);
  float* o = ws.o.data();
  load_query_block<Input>(p, fp8, t, m0, rows, score_columns, ws.q_t.data());
  std::fill(ws.row_max.data(), ws.row_max.data() + score_columns, -INFINITY);
  std::fill(ws.row_sum.data(), ws.row_sum.data() + score_columns, 0.f);
  std::fill(o, o + output_rows * padded_d, 0.f);

  // Keys from here on are hidden from every row of the block, the last row seeing the most.
  const int64_t key_limit = visible_key_end(p.causal, m0 + rows - 1, seq.seqlen_q, seq.seqlen_k);
  int64_t first_row = 0;  // the first row that sees key n0; it only grows with n0
  for (int64_t n0 = 0; n0 < key_limit; n0 += kBlockN) {
    const int64_t keys = std::min(kBlockN, key_limit - n0);
    const int64_t score_rows = round_up(keys, kScoreRows);
    while (visible_key_end(p.causal, m0 + first_row, seq.seqlen_q, seq.seqlen_k) <= n0) ++first_row;
    // Under the causal mask, the panels of rows that see no key of this block are skipped
    // throughout: their running max, sum and output stay as they are.
    const int64_t first = first_row / kScorePanel * kScorePanel;
    const bool finite_v = load_key_block<Input>(p, fp8, seq, kv_head, n0, keys, score_rows,
                                                padded_d, ws.k.data(), ws.v.data());
    gemm<kScoreRows, kScoreVecs, false>(ws.k.data(), d, 1, ws.q_t.data() + first, kBlockM,
                                        ws.s_t.data() + first, kBlockM, score_rows,
                                        score_columns - first, d);
    online_softmax_step(p, seq, m0, n0, keys, first, score_columns, scale_log2, ws);
    for (int64_t i = first; i < output_rows; ++i) {
      const float factor = ws.rescale.data()[i];
      if (factor == 1.f) continue;
      for (int64_t c = 0; c < padded_d; c += kLanes)
        store(o + i * padded_d + c, load(o + i * padded_d + c) * factor);
    }
    prefetch_key_block<Input>(p, fp8, seq, kv_head, n0 + keys,
                              std::min(kBlockN, key_limit - n0 - keys));
    if (!finite_v && p.causal) {
      masked_pv(p, seq, m0, n0, keys, first, rows, padded_d, ws.s_t.data(), ws.v.data(), o);
    } else {
      gemm<kOutputRows, kOutputVecs, true>(ws.s_t.data() + first, 1, kBlockM, ws.v.data(),
                                           padded_d, o + first * padded_d, padded_d,
                                           output_rows - first, padded_d, keys);
    }
  }

  for (int64_t i = 0; i < rows; ++i) {
    const float row_sum = ws.row_sum.data()[i];
    const float inverse = inverse_row_sum(row_sum);
    Output* dst = static_cast<Output*>(p.o) +
                  row_offset(p.o_stride, seq.tensor_batch, seq.q_begin + m0 + i, t.head);
    for (int64_t c = 0; c < d; ++c) dst[c] = from_float<Output>(o[i * padded_d + c] * inverse);
    if (p.lse != nullptr) {
      p.lse[lse_index(p.seqlens, seq, p.heads_q, t.head, m0 + i)] =
          row_log_sum_exp(ws.row_max.data()[i], row_sum, p.softmax_scale);
    }
  }
}

// 16- and 32-bit inputs share o's dtype; e4m3 inputs write bfloat16 or float16.
HOPATTN_CPU_CLONES void run_task(const ForwardProblem& p, DType input_dtype,
                                 const Fp8Inputs& fp8, const Task& task) {
  Workspace& ws = thread_workspace();
  // A switch rather than visit_dtype: a lambda would be a separate function, outside the clone.
  switch (input_dtype) {
    case DType::kFloat32: attend_query_block<float, float>(p, fp8, task, ws); break;
    case DType::kBFloat16: attend_query_block<bfloat16, bfloat16>(p, fp8, task, ws); break;
    case DType::kFloat16: attend_query_block<float16, float16>(p, fp8, task, ws); break;
    case DType::kFloat8E4M3:
      if (p.dtype == DType::kFloat16) {
        attend_query_block<float8_e4m3, float16>(p, fp8, task, ws);
      } else {
        attend_query_block<float8_e4m3, bfloat16>(p, fp8, task, ws);
      }
      break;
  }
}

}  // namespace

bool supports(DType dtype, int64_t head_dim) {
  return is_attention_dtype(dtype) && head_dim >= 1 && head_dim <= kMaxHeadDim;
}

int worker_count() { return ThreadPool::instance().thread_count(); }

Status run_forward(const ForwardProblem& problem, DType input_dtype, const Fp8Inputs& fp8) {
  const TaskList tasks(problem);
  ThreadPool::instance().parallel_for(tasks.count(), [&](int64_t index) {
    run_task(problem, input_dtype, fp8, tasks[index]);
  });
  return Status::kOk;
}

Status forward(const ForwardProblem& problem) { return run_forward(problem, problem.dtype, {}); }

}  // namespace hopattn::cpu
