// The forward's own rules: options (their struct_size, and the hopattn_init_* that fill the
// growable structs), the shapes of q, k, v and o, the lse; the shared tensor, call (varlen
// metadata, work, workspace) and backend rules are called from here, the SM90 rules once the
// backend is SM90. The rules hopattn_forward_fp8 shares (forward_rules.hpp) are defined here too.
#include <cstddef>
#include <string>
#include <vector>

#include "api/abi.hpp"
#include "api/backend_choice.hpp"
#include "api/call_rules.hpp"
#include "api/forward_rules.hpp"
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

// One attention dtype for q, k, v and (unless null) o.
Status check_dtypes(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                    const hopattn_tensor* o) {
  std::vector<NamedTensor> others = {{&k, "k"}, {&v, "v"}};
  if (o != nullptr) others.push_back({o, "o"});
  for (const NamedTensor& other : others) {
    if (other.tensor->dtype != q.dtype) {
      return invalid(other.name, ".dtype is ", dtype_name(dtype_of(other.tensor->dtype)),
                     " but q.dtype is ", dtype_name(dtype_of(q.dtype)),
                     "; q, k, v and o must share one dtype");
    }
  }
  return Status::kOk;
}

// Every path: hopattn_forward (varlen null, o given), hopattn_forward_varlen (varlen given, o
// given) and the workspace query (o null, lse null).
Status validate(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                const hopattn_tensor* o, float* lse, const hopattn_varlen* varlen_or_null,
                bool is_varlen, const hopattn_forward_options* options_or_null,
                const SystemQueries& system, ForwardCall& call) {
  const bool query = o == nullptr;
  hopattn_forward_options options;
  if (Status s = read_forward_options(options_or_null, options); s != Status::kOk) return s;
  if (const int layout = enum_value(options.fp8_v_layout); layout != HOPATTN_FP8_LAYOUT_ROWS) {
    return invalid("options->fp8_v_layout is ", layout,
                   "; hopattn_forward takes only 0 (HOPATTN_FP8_LAYOUT_ROWS, the default): the "
                   "V-transposed layout is for hopattn_forward_fp8's e4m3 v");
  }
  hopattn_varlen varlen = default_varlen();
  if (is_varlen) {
    if (Status s = read_varlen(varlen_or_null, varlen); s != Status::kOk) return s;
  }

  std::vector<NamedTensor> tensors = {{q, "q"}, {k, "k"}, {v, "v"}};
  if (!query) tensors.push_back({o, "o"});
  for (const NamedTensor& t : tensors) {
    if (Status s = check_tensor(t); s != Status::kOk) return s;
    if (Status s = check_attention_dtype(t, "hopattn_forward"); s != Status::kOk) return s;
  }
  if (Status s = check_dtypes(*q, *k, *v, o); s != Status::kOk) return s;
  if (Status s = check_forward_shapes(*q, *k, *v, o, is_varlen); s != Status::kOk) return s;
  if (!query) {
    if (Status s = check_lse(*q, lse); s != Status::kOk) return s;
    if (Status s = check_forward_outputs(*q, *k, {v, "v"}, *o, lse); s != Status::kOk) return s;
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
    if (Status s = check_varlen_memory_space(varlen, call.backend, system); s != Status::kOk) return s;
  }
  if (Status s = check_backend_supports(call.backend, dtype_of(q->dtype), q->head_dim, system);
      s != Status::kOk) {
    return s;
  }
  if (call.backend == HOPATTN_BACKEND_CPU && is_varlen) {
    if (Status s = check_varlen_metadata(varlen, q->seqlen, k->seqlen); s != Status::kOk) return s;
  }
  if (Status s = check_forward_work(call.backend, *q, *k, is_varlen ? &varlen : nullptr);
      s != Status::kOk) {
    return s;
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
  if (options.workspace == nullptr) return Status::kOk;
  return check_workspace(options.workspace, options.workspace_bytes, call.backend,
                         call.workspace_needed, "hopattn_forward_workspace_size", system);
}

}  // namespace

Status read_forward_options(const hopattn_forward_options* given, hopattn_forward_options& options) {
  options = default_forward_options();
  if (given != nullptr) {
    if (Status s = read_growable(*given, default_forward_options(), kForwardOptionsFirstSize,
                                 "options", "hopattn_forward_options",
                                 "hopattn_default_forward_options", "hopattn_init_forward_options",
                                 options);
        s != Status::kOk) {
      return s;
    }
  }
  return check_backend_and_scale(enum_value(options.backend), options.softmax_scale);
}

Status check_forward_shapes(const hopattn_tensor& q, const hopattn_tensor& k,
                            const hopattn_tensor& v, const hopattn_tensor* o, bool varlen) {
  std::vector<NamedTensor> others = {{&k, "k"}, {&v, "v"}};
  if (o != nullptr) others.push_back({o, "o"});
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

Status check_forward_outputs(const hopattn_tensor& q, const hopattn_tensor& k, const NamedTensor& v,
                             const hopattn_tensor& o, const float* lse,
                             const std::vector<ByteRange>& more_inputs) {
  std::vector<ByteRange> outputs = {byte_range_of({&o, "o"})};
  if (lse != nullptr) outputs.push_back(float_range_of("lse", lse, lse_bytes(q) / int64_t{sizeof(float)}));
  std::vector<ByteRange> inputs = {byte_range_of({&q, "q"}), byte_range_of({&k, "k"}),
                                   byte_range_of(v)};
  inputs.insert(inputs.end(), more_inputs.begin(), more_inputs.end());
  return check_outputs_do_not_overlap(inputs, outputs);
}

Status check_forward_work(hopattn_backend backend, const hopattn_tensor& q,
                          const hopattn_tensor& k, const hopattn_varlen* varlen) {
  if (backend != HOPATTN_BACKEND_CPU) return Status::kOk;
  std::string formula;
  const int64_t work = call_work(q, k, varlen, formula);
  return check_backend_work(backend, work, formula);
}

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
