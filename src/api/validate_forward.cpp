// The forward's own rules: options (their struct_size, and the hopattn_init_* that fill the
// growable structs), the shapes of q, k, v and o, the lse, the workspace and the varlen metadata;
// the shared tensor and backend rules are called from here, the SM90 rules once the backend is
// SM90.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "api/abi.hpp"
#include "api/backend_choice.hpp"
#include "api/problem_of.hpp"
#include "api/tensor_rules.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {

const size_t kForwardOptionsFirstSize =
    offsetof(hopattn_forward_options, workspace_bytes) + sizeof(size_t);
const size_t kVarlenFirstSize = offsetof(hopattn_varlen, max_seqlen_k) + sizeof(int64_t);

namespace {

// The library allocates below this alignment itself (cudaMallocAsync gives 256 bytes), and the
// backends may carve the workspace into vectorised buffers.
constexpr uintptr_t kWorkspaceAlignment = 256;

// The caller's struct as this library knows it: the first struct_size bytes the caller wrote,
// the defaults for fields added after its hopattn.h.
template <class Struct>
Status read_growable(const Struct& given, const Struct& defaults, size_t first_size,
                     const char* argument, const char* type, const char* default_function,
                     const char* init_function, Struct& out) {
  if (given.struct_size < first_size) {
    return invalid(argument, "->struct_size is ", given.struct_size, "; it must be sizeof(", type,
                   ") as the caller's hopattn.h defines it (at least ", first_size,
                   "): initialise the struct with ", default_function, "() or ", init_function,
                   "()");
  }
  out = defaults;
  std::memcpy(&out, &given,
              given.struct_size < sizeof(Struct) ? given.struct_size : sizeof(Struct));
  out.struct_size = sizeof(Struct);
  return Status::kOk;
}

// hopattn_init_*: the defaults in the caller's first struct_size bytes, and nothing past them.
template <class Struct>
Status init_growable(Struct* out, size_t struct_size, Struct defaults, size_t first_size,
                     const char* argument, const char* type) {
  if (out == nullptr) return invalid(argument, " is NULL; it must point to the caller's ", type);
  if (struct_size < first_size) {
    return invalid("struct_size is ", struct_size, "; it must be sizeof(", type,
                   ") as the caller's hopattn.h defines it (at least ", first_size, ")");
  }
  defaults.struct_size = struct_size;
  std::memcpy(out, &defaults, struct_size < sizeof(Struct) ? struct_size : sizeof(Struct));
  return Status::kOk;
}

Status check_options(const hopattn_forward_options& options) {
  const int backend = enum_value(options.backend);
  if (backend != HOPATTN_BACKEND_AUTO && backend != HOPATTN_BACKEND_CPU &&
      backend != HOPATTN_BACKEND_SM90) {
    return invalid("options.backend is ", backend, "; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
  }
  const float scale = options.softmax_scale;
  if (!(scale >= 0.f) || !std::isfinite(scale)) {
    return invalid("options.softmax_scale is ", scale,
                   "; it must be > 0 and finite, or 0 for 1/sqrt(head_dim)");
  }
  return Status::kOk;
}

// q, k, v and (unless null: the workspace query) o.
Status check_shapes(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                    const hopattn_tensor* o, bool varlen) {
  std::vector<NamedTensor> others = {{&k, "k"}, {&v, "v"}};
  if (o != nullptr) others.push_back({o, "o"});
  for (const NamedTensor& other : others) {
    if (other.tensor->dtype != q.dtype) {
      return invalid(other.name, ".dtype is ", dtype_name(dtype_of(other.tensor->dtype)),
                     " but q.dtype is ", dtype_name(dtype_of(q.dtype)),
                     "; q, k, v and o must share one dtype");
    }
  }
  if (varlen) {
    std::vector<NamedTensor> all = {{&q, "q"}};
    all.insert(all.end(), others.begin(), others.end());
    for (const NamedTensor& t : all) {
      if (t.tensor->batch != 1) {
        return invalid(t.name, ".batch is ", t.tensor->batch,
                       "; a variable-length batch packs its sequences along seqlen, so q, k, v "
                       "and o have batch 1");
      }
    }
  }
  for (const NamedTensor& other : others) {
    if (other.tensor->batch != q.batch) {
      return invalid(other.name, ".batch is ", other.tensor->batch, " but q.batch is ", q.batch,
                     "; all tensors must have the same batch");
    }
  }
  if (v.seqlen != k.seqlen || v.heads != k.heads || v.head_dim != k.head_dim) {
    return invalid("v is ", shape_of(v), " but k is ", shape_of(k),
                   "; v must have k's shape (batch, seqlen_k, heads_kv, head_dim)");
  }
  if (k.head_dim != q.head_dim) {
    return invalid("k.head_dim is ", k.head_dim, " but q.head_dim is ", q.head_dim,
                   "; q, k and v must share head_dim");
  }
  if (o != nullptr && (o->seqlen != q.seqlen || o->heads != q.heads || o->head_dim != q.head_dim)) {
    return invalid("o is ", shape_of(*o), " but q is ", shape_of(q), "; o must have q's shape");
  }
  if (q.heads % k.heads != 0) {
    return invalid("q.heads (", q.heads, ") must be a multiple of k.heads (", k.heads,
                   ") so that each k/v head serves a whole group of query heads (GQA/MQA)");
  }
  return o != nullptr ? check_output_does_not_overlap({o, "o"}) : Status::kOk;
}

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

Status check_outputs(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                     const hopattn_tensor& o, const float* lse) {
  std::vector<ByteRange> outputs = {byte_range_of({&o, "o"})};
  if (lse != nullptr) {
    const auto begin = reinterpret_cast<uintptr_t>(lse);
    outputs.push_back({"lse", begin, begin + static_cast<uint64_t>(lse_bytes(q))});
  }
  return check_outputs_do_not_overlap(
      {byte_range_of({&q, "q"}), byte_range_of({&k, "k"}), byte_range_of({&v, "v"})}, outputs);
}

// What can be checked of varlen without reading its arrays.
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

// The CPU backend reads the metadata itself, so it can be checked in full.
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

// Multiply-adds of Q K^T (check_backend_work), or -1 on int64 overflow: fixed lengths from the
// shapes, varlen from the metadata (checked on the CPU, whose bound this is).
int64_t forward_work(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_varlen* varlen,
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

Status check_workspace(const hopattn_forward_options& options, hopattn_backend backend,
                       size_t needed, const SystemQueries& system) {
  if (options.workspace == nullptr) return Status::kOk;
  if (options.workspace_bytes < needed) {
    return invalid("options->workspace_bytes is ", options.workspace_bytes, " but the call needs ",
                   needed, " bytes (hopattn_forward_workspace_size)");
  }
  if (reinterpret_cast<uintptr_t>(options.workspace) % kWorkspaceAlignment != 0) {
    return invalid("options->workspace is not ", kWorkspaceAlignment, "-byte aligned");
  }
  return check_memory_space(backend, {{options.workspace, "options->workspace"}}, system);
}

// Every path: hopattn_forward (varlen null, o given), hopattn_forward_varlen (varlen given, o
// given) and the workspace query (o null, lse null).
Status validate(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                const hopattn_tensor* o, float* lse, const hopattn_varlen* varlen_or_null,
                bool is_varlen, const hopattn_forward_options* options_or_null,
                const SystemQueries& system, ForwardCall& call) {
  const bool query = o == nullptr;
  hopattn_forward_options options = default_forward_options();
  if (options_or_null != nullptr) {
    if (Status s = read_growable(*options_or_null, default_forward_options(),
                                 kForwardOptionsFirstSize, "options", "hopattn_forward_options",
                                 "hopattn_default_forward_options", "hopattn_init_forward_options",
                                 options);
        s != Status::kOk) {
      return s;
    }
  }
  if (Status s = check_options(options); s != Status::kOk) return s;
  hopattn_varlen varlen = default_varlen();
  if (is_varlen) {
    if (varlen_or_null == nullptr) return invalid("varlen is NULL");
    if (Status s = read_growable(*varlen_or_null, default_varlen(), kVarlenFirstSize, "varlen",
                                 "hopattn_varlen", "hopattn_default_varlen", "hopattn_init_varlen",
                                 varlen);
        s != Status::kOk) {
      return s;
    }
  }

  std::vector<NamedTensor> tensors = {{q, "q"}, {k, "k"}, {v, "v"}};
  if (!query) tensors.push_back({o, "o"});
  for (const NamedTensor& t : tensors) {
    if (Status s = check_tensor(t); s != Status::kOk) return s;
  }
  if (Status s = check_shapes(*q, *k, *v, o, is_varlen); s != Status::kOk) return s;
  if (!query) {
    if (Status s = check_lse(*q, lse); s != Status::kOk) return s;
    if (Status s = check_outputs(*q, *k, *v, *o, lse); s != Status::kOk) return s;
  }
  if (is_varlen) {
    if (Status s = check_varlen_arguments(varlen); s != Status::kOk) return s;
  }

  std::vector<NamedPointer> pointers = {
      {q->data, "q.data"}, {k->data, "k.data"}, {v->data, "v.data"}};
  if (!query) pointers.push_back({o->data, "o.data"});
  if (lse != nullptr) pointers.push_back({lse, "lse"});
  if (Status s = resolve_backend(options.backend, pointers, system, call.backend);
      s != Status::kOk) {
    return s;
  }
  if (is_varlen) {
    // AUTO decided by the tensors; the metadata must then be where that backend reads it.
    if (Status s = check_memory_space(call.backend,
                                      {{varlen.cu_seqlens_q, "varlen->cu_seqlens_q"},
                                       {varlen.cu_seqlens_k, "varlen->cu_seqlens_k"},
                                       {varlen.seqused_k, "varlen->seqused_k"}},
                                      system);
        s != Status::kOk) {
      return s;
    }
  }
  if (Status s = check_backend_supports(call.backend, dtype_of(q->dtype), q->head_dim, system);
      s != Status::kOk) {
    return s;
  }
  if (call.backend == HOPATTN_BACKEND_CPU) {
    if (is_varlen) {
      if (Status s = check_varlen_metadata(varlen, q->seqlen, k->seqlen); s != Status::kOk) {
        return s;
      }
    }
    std::string formula;
    const int64_t work = forward_work(*q, *k, is_varlen ? &varlen : nullptr, formula);
    if (Status s = check_backend_work(call.backend, work, formula); s != Status::kOk) return s;
  }

  hopattn_tensor no_output = *q;  // the workspace query describes o by q's shape
  no_output.data = nullptr;
  const hopattn_tensor& out = query ? no_output : *o;
  call.problem = is_varlen ? problem_of(*q, *k, *v, out, lse, varlen, options)
                           : problem_of(*q, *k, *v, out, lse, options);
  call.workspace_needed = 0;
  if (call.backend == HOPATTN_BACKEND_SM90) {
    if (Status s = sm90::check_forward_rules(call.problem); s != Status::kOk) return s;
    call.workspace_needed = system.sm90_forward_workspace_size(call.problem);
  }
  if (query) return Status::kOk;
  return check_workspace(options, call.backend, call.workspace_needed, system);
}

}  // namespace

hopattn_forward_options default_forward_options() { return hopattn_default_forward_options(); }

hopattn_varlen default_varlen() { return hopattn_default_varlen(); }

Status init_forward_options(hopattn_forward_options* options, size_t struct_size) {
  return init_growable(options, struct_size, default_forward_options(), kForwardOptionsFirstSize,
                       "options", "hopattn_forward_options");
}

Status init_varlen(hopattn_varlen* varlen, size_t struct_size) {
  return init_growable(varlen, struct_size, default_varlen(), kVarlenFirstSize, "varlen",
                       "hopattn_varlen");
}

Status validate_forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                        const hopattn_tensor* o, float* lse, const hopattn_forward_options* options,
                        const SystemQueries& system, ForwardCall& call) {
  if (o == nullptr) return invalid("o is NULL");
  return validate(q, k, v, o, lse, nullptr, false, options, system, call);
}

Status validate_forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                               const hopattn_tensor* v, const hopattn_tensor* o, float* lse,
                               const hopattn_varlen* varlen, const hopattn_forward_options* options,
                               const SystemQueries& system, ForwardCall& call) {
  if (o == nullptr) return invalid("o is NULL");
  return validate(q, k, v, o, lse, varlen, true, options, system, call);
}

Status validate_forward_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                        const hopattn_tensor* v, const hopattn_varlen* varlen,
                                        const hopattn_forward_options* options,
                                        const SystemQueries& system, ForwardCall& call) {
  return validate(q, k, v, nullptr, nullptr, varlen, varlen != nullptr, options, system, call);
}

}  // namespace hopattn
