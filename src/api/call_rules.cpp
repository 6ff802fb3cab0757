#include "api/call_rules.hpp"

#include <cmath>

#include "api/backend_choice.hpp"
#include "api/validate.hpp"

namespace hopattn {
namespace {

// cu_seqlens_q or cu_seqlens_k, in host memory: 0, non-decreasing, at most `max_length` apart,
// ending at the tensor's rows.
Status check_prefix_sums(const int32_t* cu, int64_t batch, const char* name, const char* what,
                         const char* max_name, int64_t max_length, const char* total_name,
                         int64_t total) {
  if (cu[0] != 0) return invalid(name, "[0] is ", cu[0], "; it must be 0");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = static_cast<int64_t>(cu[b + 1]) - cu[b];
    if (length < 0) {
      return invalid(name, "[", b + 1, "] is ", cu[b + 1], " but ", name, "[", b, "] is ", cu[b],
                     "; the prefix sums must not decrease");
    }
    if (length > max_length) {
      return invalid("sequence ", b, " has ", length, " ", what, " (", name, "[", b + 1, "] - ",
                     name, "[", b, "]) but ", max_name, " is ", max_length,
                     "; it must be >= every length");
    }
  }
  if (cu[batch] != total) {
    return invalid(name, "[", batch, "] is ", cu[batch], " but ", total_name, " is ", total,
                   "; the last prefix sum must be the number of rows of the packed tensor");
  }
  return Status::kOk;
}

}  // namespace

// (batch, heads_q, seqlen_q) float32 values; for varlen batch is 1 and seqlen_q is total_q.
int64_t lse_bytes(const hopattn_tensor& q) {
  return q.batch * q.heads * q.seqlen * static_cast<int64_t>(sizeof(float));
}

Status check_lse(const hopattn_tensor& q, const float* lse) {
  if (lse == nullptr) return Status::kOk;
  if (reinterpret_cast<uintptr_t>(lse) % alignof(float) != 0) {
    return invalid("lse is not 4-byte aligned; it must point to float32 values");
  }
  int64_t rows = 0, bytes = 0;
  if (__builtin_mul_overflow(q.batch, q.heads, &rows) ||
      __builtin_mul_overflow(rows, q.seqlen, &rows) ||
      __builtin_mul_overflow(rows, static_cast<int64_t>(sizeof(float)), &bytes) ||
      runs_past_address_space(lse, bytes)) {
    return invalid("lse: batch * heads_q * seqlen_q = ", q.batch, " * ", q.heads, " * ", q.seqlen,
                   " float32 values do not fit in the address space");
  }
  return Status::kOk;
}

Status check_backend_and_scale(int backend, float softmax_scale) {
  if (backend != HOPATTN_BACKEND_AUTO && backend != HOPATTN_BACKEND_CPU &&
      backend != HOPATTN_BACKEND_SM90) {
    return invalid("options.backend is ", backend, "; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
  }
  if (!(softmax_scale >= 0.f) || !std::isfinite(softmax_scale)) {
    return invalid("options.softmax_scale is ", softmax_scale,
                   "; it must be > 0 and finite, or 0 for 1/sqrt(head_dim)");
  }
  return Status::kOk;
}

Status read_varlen(const hopattn_varlen* given, hopattn_varlen& varlen) {
  if (given == nullptr) return invalid("varlen is NULL");
  varlen = default_varlen();
  return read_growable(*given, default_varlen(), kVarlenFirstSize, "varlen", "hopattn_varlen",
                       "hopattn_default_varlen", "hopattn_init_varlen", varlen);
}

Status check_varlen_arguments(const hopattn_varlen& varlen) {
  if (varlen.batch < 1) {
    return invalid("varlen->batch is ", varlen.batch,
                   "; it must be >= 1 (the number of sequences)");
  }
  if (varlen.batch > (INT64_MAX - 1) / static_cast<int64_t>(sizeof(int32_t))) {
    return invalid("varlen->batch is ", varlen.batch,
                   "; its arrays do not fit in the address space");
  }
  struct Array {
    const char* name;
    const int32_t* pointer;
    int64_t count;
    bool optional;
  };
  const Array arrays[] = {{"varlen->cu_seqlens_q", varlen.cu_seqlens_q, varlen.batch + 1, false},
                          {"varlen->cu_seqlens_k", varlen.cu_seqlens_k, varlen.batch + 1, false},
                          {"varlen->seqused_k", varlen.seqused_k, varlen.batch, true}};
  for (const Array& array : arrays) {
    if (array.pointer == nullptr) {
      if (array.optional) continue;
      return invalid(array.name, " is NULL; it must point to varlen->batch + 1 int32 prefix sums");
    }
    if (reinterpret_cast<uintptr_t>(array.pointer) % alignof(int32_t) != 0) {
      return invalid(array.name, " is not 4-byte aligned; it must point to int32 values");
    }
    if (runs_past_address_space(array.pointer,
                                array.count * static_cast<int64_t>(sizeof(int32_t)))) {
      return invalid(array.name, ": its ", array.count,
                     " int32 values run past the end of the address space");
    }
  }
  if (varlen.max_seqlen_q < 1) {
    return invalid("varlen->max_seqlen_q is ", varlen.max_seqlen_q,
                   "; it must be >= 1 and >= every query length");
  }
  if (varlen.max_seqlen_k < 1) {
    return invalid("varlen->max_seqlen_k is ", varlen.max_seqlen_k,
                   "; it must be >= 1 and >= every key length");
  }
  return Status::kOk;
}

Status check_varlen_memory_space(const hopattn_varlen& varlen, hopattn_backend backend,
                                 const SystemQueries& system) {
  return check_memory_space(backend,
                            {{varlen.cu_seqlens_q, "varlen->cu_seqlens_q"},
                             {varlen.cu_seqlens_k, "varlen->cu_seqlens_k"},
                             {varlen.seqused_k, "varlen->seqused_k"}},
                            system);
}

Status check_varlen_metadata(const hopattn_varlen& varlen, int64_t total_q, int64_t total_k) {
  if (Status s = check_prefix_sums(varlen.cu_seqlens_q, varlen.batch, "varlen->cu_seqlens_q",
                                   "queries", "varlen->max_seqlen_q", varlen.max_seqlen_q,
                                   "q.seqlen (total_q)", total_q);
      s != Status::kOk) {
    return s;
  }
  if (Status s = check_prefix_sums(varlen.cu_seqlens_k, varlen.batch, "varlen->cu_seqlens_k",
                                   "keys", "varlen->max_seqlen_k", varlen.max_seqlen_k,
                                   "k.seqlen (total_k)", total_k);
      s != Status::kOk) {
    return s;
  }
  if (varlen.seqused_k == nullptr) return Status::kOk;
  for (int64_t b = 0; b < varlen.batch; ++b) {
    const int64_t keys = static_cast<int64_t>(varlen.cu_seqlens_k[b + 1]) - varlen.cu_seqlens_k[b];
    if (varlen.seqused_k[b] < 0 || varlen.seqused_k[b] > keys) {
      return invalid("varlen->seqused_k[", b, "] is ", varlen.seqused_k[b], "; it must be in [0, ",
                     keys, "], the key length of sequence ", b);
    }
  }
  return Status::kOk;
}

int64_t call_work(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_varlen* varlen,
                  std::string& formula) {
  int64_t per_score = 0;
  if (__builtin_mul_overflow(q.heads, q.head_dim, &per_score)) return -1;
  int64_t scores = 0;
  if (varlen == nullptr) {
    formula = "q.batch * q.heads * q.seqlen * k.seqlen * q.head_dim";
    if (__builtin_mul_overflow(q.batch, q.seqlen, &scores) ||
        __builtin_mul_overflow(scores, k.seqlen, &scores)) {
      return -1;
    }
  } else {
    formula = "q.heads * q.head_dim * (the sum over sequences of their query times key lengths)";
    for (int64_t b = 0; b < varlen->batch; ++b) {
      const int64_t queries = static_cast<int64_t>(varlen->cu_seqlens_q[b + 1]) -
                              varlen->cu_seqlens_q[b];
      const int64_t keys =
          varlen->seqused_k != nullptr
              ? varlen->seqused_k[b]
              : static_cast<int64_t>(varlen->cu_seqlens_k[b + 1]) - varlen->cu_seqlens_k[b];
      int64_t sequence_scores = 0;
      if (__builtin_mul_overflow(queries, keys, &sequence_scores) ||
          __builtin_add_overflow(scores, sequence_scores, &scores)) {
        return -1;
      }
    }
  }
  int64_t work = 0;
  return __builtin_mul_overflow(scores, per_score, &work) ? -1 : work;
}

Status check_fp8_scaling(int scaling, int64_t block_rows, const std::string& owner) {
  if (scaling != HOPATTN_FP8_SCALE_TENSOR && scaling != HOPATTN_FP8_SCALE_HEAD &&
      scaling != HOPATTN_FP8_SCALE_BLOCK) {
    return invalid(owner, "->scaling is ", scaling,
                   "; allowed: 0 (HOPATTN_FP8_SCALE_TENSOR), 1 (HOPATTN_FP8_SCALE_HEAD), "
                   "2 (HOPATTN_FP8_SCALE_BLOCK)");
  }
  if (scaling == HOPATTN_FP8_SCALE_BLOCK && block_rows <= 0) {
    return invalid(owner, "->block_rows is ", block_rows,
                   "; with HOPATTN_FP8_SCALE_BLOCK it must be > 0 (rows per scale; the FP8 "
                   "kernel's tile is 128)");
  }
  return Status::kOk;
}

Status check_fp8_layout(int layout, const char* name) {
  if (layout == HOPATTN_FP8_LAYOUT_ROWS || layout == HOPATTN_FP8_LAYOUT_V_TRANSPOSED) {
    return Status::kOk;
  }
  return invalid(name, " is ", layout,
                 "; allowed: 0 (HOPATTN_FP8_LAYOUT_ROWS), 1 (HOPATTN_FP8_LAYOUT_V_TRANSPOSED)");
}

Status check_fp8_scales_array(const float* data, const hopattn_tensor& t, int scaling,
                              int64_t block_rows, const Fp8ScalesNames& names, int64_t& count) {
  const std::string& of = names.of;
  const std::string layout =
      scaling == HOPATTN_FP8_SCALE_TENSOR ? "1 (HOPATTN_FP8_SCALE_TENSOR)"
      : scaling == HOPATTN_FP8_SCALE_HEAD
          ? of + "batch * " + of + "heads (HOPATTN_FP8_SCALE_HEAD)"
          : of + "batch * " + of + "heads * ceil(" + of + "seqlen / " + names.block_rows +
                ") (HOPATTN_FP8_SCALE_BLOCK)";
  if (data == nullptr) {
    return invalid(names.data, " is NULL; it must point to ", layout, " float32 values");
  }
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0) {
    return invalid(names.data, " is not 4-byte aligned; it must point to float32 values");
  }
  count = 1;
  // ceil(seqlen / block_rows) without overflow for any block_rows (QuantizeProblem's formula).
  const int64_t blocks = scaling == HOPATTN_FP8_SCALE_BLOCK ? (t.seqlen - 1) / block_rows + 1 : 1;
  int64_t bytes = 0;
  if (scaling != HOPATTN_FP8_SCALE_TENSOR &&
      (__builtin_mul_overflow(t.batch, t.heads, &count) ||
       __builtin_mul_overflow(count, blocks, &count))) {
    count = -1;
  }
  if (count < 0 || __builtin_mul_overflow(count, static_cast<int64_t>(sizeof(float)), &bytes) ||
      runs_past_address_space(data, bytes)) {
    return invalid(names.data, ": ", layout, " float32 values do not fit in the address space");
  }
  return Status::kOk;
}

Status check_workspace(const void* workspace, size_t workspace_bytes, hopattn_backend backend,
                       size_t needed, const char* size_function, const SystemQueries& system) {
  if (workspace_bytes < needed) {
    return invalid("options->workspace_bytes is ", workspace_bytes, " but the call needs ", needed,
                   " bytes (", size_function, ")");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
    return invalid("options->workspace is not ", kWorkspaceAlignment, "-byte aligned");
  }
  return check_memory_space(backend, {{workspace, "options->workspace"}}, system);
}

}  // namespace hopattn
