// The backward's own rules: options (struct_size, hopattn_init_backward_options), the shapes of
// the nine arguments (o, d_o and dq like q; v, dk and dv like k), the required lse, the gradients
// (each a buffer of its own, no input touched); the shared tensor, call and backend rules are
// called from here, the SM90 rules (sm90/sm90_rules.hpp) once the backend is SM90.
#include <cstddef>
#include <string>
#include <vector>

#include "api/abi.hpp"
#include "api/backend_choice.hpp"
#include "api/call_rules.hpp"
#include "api/problem_of.hpp"
#include "api/tensor_rules.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {

const size_t kBackwardOptionsFirstSize =
    offsetof(hopattn_backward_options, workspace_bytes) + sizeof(size_t);

namespace {

// The tensor arguments of a backward call; o, d_o, dq, dk and dv are null in the workspace query.
struct Arguments {
  const hopattn_tensor *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
  const float* lse;
  bool query() const { return o == nullptr; }
};

// Each argument with the tensor whose shape it must have: q (query-shaped) or k (key-shaped).
struct Shaped {
  NamedTensor tensor;
  bool query_shaped;
};

std::vector<Shaped> present(const Arguments& a) {
  std::vector<Shaped> all = {{{a.q, "q"}, true}, {{a.k, "k"}, false}, {{a.v, "v"}, false}};
  if (!a.query()) {
    all.insert(all.end(), {{{a.o, "o"}, true},
                           {{a.d_o, "d_o"}, true},
                           {{a.dq, "dq"}, true},
                           {{a.dk, "dk"}, false},
                           {{a.dv, "dv"}, false}});
  }
  return all;
}

Status check_shapes(const Arguments& a, bool varlen) {
  const hopattn_tensor& q = *a.q;
  const hopattn_tensor& k = *a.k;
  const std::vector<Shaped> all = present(a);
  for (const Shaped& s : all) {
    if (s.tensor.tensor->dtype != q.dtype) {
      return invalid(s.tensor.name, ".dtype is ", dtype_name(dtype_of(s.tensor.tensor->dtype)),
                     " but q.dtype is ", dtype_name(dtype_of(q.dtype)),
                     "; q, k, v, o, d_o, dq, dk and dv must share one dtype");
    }
  }
  for (const Shaped& s : all) {
    const hopattn_tensor& t = *s.tensor.tensor;
    if (varlen && t.batch != 1) {
      return invalid(s.tensor.name, ".batch is ", t.batch,
                     "; a variable-length batch packs its sequences along seqlen, so every "
                     "tensor has batch 1");
    }
    if (t.batch != q.batch) {
      return invalid(s.tensor.name, ".batch is ", t.batch, " but q.batch is ", q.batch,
                     "; all tensors must have the same batch");
    }
  }
  if (k.head_dim != q.head_dim) {
    return invalid("k.head_dim is ", k.head_dim, " but q.head_dim is ", q.head_dim,
                   "; every tensor has q's head_dim");
  }
  for (const Shaped& s : all) {
    const hopattn_tensor& like = s.query_shaped ? q : k;
    const char* like_name = s.query_shaped ? "q" : "k";
    const char* shape = s.query_shaped ? "(batch, seqlen_q, heads_q, head_dim)"
                                       : "(batch, seqlen_k, heads_kv, head_dim)";
    const hopattn_tensor& t = *s.tensor.tensor;
    const char* const fields[] = {"seqlen", "heads", "head_dim"};
    const int64_t sizes[] = {t.seqlen, t.heads, t.head_dim};
    const int64_t like_sizes[] = {like.seqlen, like.heads, like.head_dim};
    for (int i = 0; i < 3; ++i) {
      if (sizes[i] != like_sizes[i]) {
        return invalid(s.tensor.name, ".", fields[i], " is ", sizes[i], " but ", like_name, ".",
                       fields[i], " is ", like_sizes[i], "; ", s.tensor.name, " must have ",
                       like_name, "'s shape ", shape);
      }
    }
  }
  if (q.heads % k.heads != 0) {
    return invalid("q.heads (", q.heads, ") must be a multiple of k.heads (", k.heads,
                   ") so that each k/v head serves a whole group of query heads (GQA/MQA)");
  }
  if (a.query()) return Status::kOk;
  for (const NamedTensor& gradient : {NamedTensor{a.dq, "dq"}, {a.dk, "dk"}, {a.dv, "dv"}}) {
    if (Status s = check_output_does_not_overlap(gradient); s != Status::kOk) return s;
  }
  return Status::kOk;
}

// The gradients share no memory with the inputs (lse among them) or with each other.
Status check_gradients_apart(const Arguments& a) {
  std::vector<ByteRange> inputs;
  for (const NamedTensor& input :
       {NamedTensor{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.o, "o"}, {a.d_o, "d_o"}}) {
    inputs.push_back(byte_range_of(input));
  }
  const auto lse_begin = reinterpret_cast<uintptr_t>(a.lse);
  inputs.push_back({"lse", lse_begin, lse_begin + static_cast<uint64_t>(lse_bytes(*a.q))});
  return check_outputs_do_not_overlap(
      inputs, {byte_range_of({a.dq, "dq"}), byte_range_of({a.dk, "dk"}),
               byte_range_of({a.dv, "dv"})});
}

// Every path: hopattn_backward (varlen null), hopattn_backward_varlen and the workspace query
// (o null: no o, d_o, lse or gradients).
Status validate(const Arguments& a, const hopattn_varlen* varlen_or_null, bool is_varlen,
                const hopattn_backward_options* options_or_null, const SystemQueries& system,
                BackwardCall& call) {
  hopattn_backward_options options = default_backward_options();
  if (options_or_null != nullptr) {
    if (Status s = read_growable(*options_or_null, default_backward_options(),
                                 kBackwardOptionsFirstSize, "options", "hopattn_backward_options",
                                 "hopattn_default_backward_options",
                                 "hopattn_init_backward_options", options);
        s != Status::kOk) {
      return s;
    }
  }
  if (Status s = check_backend_and_scale(enum_value(options.backend), options.softmax_scale);
      s != Status::kOk) {
    return s;
  }
  hopattn_varlen varlen = default_varlen();
  if (is_varlen) {
    if (Status s = read_varlen(varlen_or_null, varlen); s != Status::kOk) return s;
  }

  // In the order of the C arguments, lse after d_o.
  for (const Shaped& s : present(a)) {
    if (Status status = check_tensor(s.tensor); status != Status::kOk) return status;
    if (Status status = check_attention_dtype(s.tensor, "hopattn_backward");
        status != Status::kOk) {
      return status;
    }
    if (std::string(s.tensor.name) == "d_o" && a.lse == nullptr) {
      return invalid("lse is NULL; the backward needs the forward's float32 LSE, ",
                     is_varlen ? "(heads_q, total_q)" : "(batch, heads_q, seqlen_q)",
                     " as hopattn_forward wrote it");
    }
  }
  if (Status s = check_shapes(a, is_varlen); s != Status::kOk) return s;
  if (!a.query()) {
    if (Status s = check_lse(*a.q, a.lse); s != Status::kOk) return s;
    if (Status s = check_gradients_apart(a); s != Status::kOk) return s;
  }
  if (is_varlen) {
    if (Status s = check_varlen_arguments(varlen); s != Status::kOk) return s;
  }

  std::vector<NamedPointer> pointers;
  for (const Shaped& s : present(a)) {
    pointers.push_back({s.tensor.tensor->data, std::string(s.tensor.name) + ".data"});
  }
  if (!a.query()) pointers.push_back({a.lse, "lse"});
  if (Status s = resolve_backend(options.backend, pointers, system, call.backend);
      s != Status::kOk) {
    return s;
  }
  if (is_varlen) {
    if (Status s = check_varlen_memory_space(varlen, call.backend, system); s != Status::kOk) return s;
  }
  if (Status s =
          check_backend_supports_backward(call.backend, dtype_of(a.q->dtype), a.q->head_dim, system);
      s != Status::kOk) {
    return s;
  }
  if (call.backend == HOPATTN_BACKEND_CPU) {
    if (is_varlen) {
      if (Status s = check_varlen_metadata(varlen, a.q->seqlen, a.k->seqlen); s != Status::kOk) {
        return s;
      }
    }
    std::string formula;
    const int64_t work = call_work(*a.q, *a.k, is_varlen ? &varlen : nullptr, formula);
    if (Status s = check_backend_work(call.backend, work, formula); s != Status::kOk) return s;
  }

  // The workspace query describes o, d_o and dq by q's strides and dk, dv by k's.
  hopattn_tensor no_query_tensor = *a.q, no_key_tensor = *a.k;
  no_query_tensor.data = no_key_tensor.data = nullptr;
  const auto or_query = [&](const hopattn_tensor* t) -> const hopattn_tensor& {
    return a.query() ? no_query_tensor : *t;
  };
  const auto or_key = [&](const hopattn_tensor* t) -> const hopattn_tensor& {
    return a.query() ? no_key_tensor : *t;
  };
  call.problem =
      is_varlen ? problem_of(*a.q, *a.k, *a.v, or_query(a.o), or_query(a.d_o), a.lse,
                             or_query(a.dq), or_key(a.dk), or_key(a.dv), varlen, options)
                : problem_of(*a.q, *a.k, *a.v, or_query(a.o), or_query(a.d_o), a.lse,
                             or_query(a.dq), or_key(a.dk), or_key(a.dv), options);
  call.workspace_needed = 0;
  if (call.backend == HOPATTN_BACKEND_SM90) {
    if (Status s = sm90::check_backward_rules(call.problem); s != Status::kOk) return s;
    call.workspace_needed = system.sm90_backward_workspace_size(call.problem);
  }
  if (a.query() || options.workspace == nullptr) return Status::kOk;
  return check_workspace(options.workspace, options.workspace_bytes, call.backend,
                         call.workspace_needed, "hopattn_backward_workspace_size", system);
}

// The outputs' structs are named before anything else is read, as the forward names o.
Status check_output_structs(const hopattn_tensor* dq, const hopattn_tensor* dk,
                            const hopattn_tensor* dv) {
  for (const NamedTensor& t : {NamedTensor{dq, "dq"}, {dk, "dk"}, {dv, "dv"}}) {
    if (t.tensor == nullptr) return invalid(t.name, " is NULL");
  }
  return Status::kOk;
}

}  // namespace

hopattn_backward_options default_backward_options() { return hopattn_default_backward_options(); }

Status init_backward_options(hopattn_backward_options* options, size_t struct_size) {
  return init_growable(options, struct_size, default_backward_options(),
                       kBackwardOptionsFirstSize, "options", "hopattn_backward_options");
}

Status validate_backward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                         const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                         const hopattn_tensor* dq, const hopattn_tensor* dk,
                         const hopattn_tensor* dv, const hopattn_backward_options* options,
                         const SystemQueries& system, BackwardCall& call) {
  if (o == nullptr) return invalid("o is NULL");
  if (d_o == nullptr) return invalid("d_o is NULL");
  if (Status s = check_output_structs(dq, dk, dv); s != Status::kOk) return s;
  return validate({q, k, v, o, d_o, dq, dk, dv, lse}, nullptr, false, options, system, call);
}

Status validate_backward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                                const hopattn_tensor* v, const hopattn_tensor* o,
                                const hopattn_tensor* d_o, const float* lse,
                                const hopattn_tensor* dq, const hopattn_tensor* dk,
                                const hopattn_tensor* dv, const hopattn_varlen* varlen,
                                const hopattn_backward_options* options,
                                const SystemQueries& system, BackwardCall& call) {
  if (o == nullptr) return invalid("o is NULL");
  if (d_o == nullptr) return invalid("d_o is NULL");
  if (Status s = check_output_structs(dq, dk, dv); s != Status::kOk) return s;
  return validate({q, k, v, o, d_o, dq, dk, dv, lse}, varlen, true, options, system, call);
}

Status validate_backward_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                         const hopattn_tensor* v, const hopattn_varlen* varlen,
                                         const hopattn_backward_options* options,
                                         const SystemQueries& system, BackwardCall& call) {
  return validate({q, k, v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}, varlen,
                  varlen != nullptr, options, system, call);
}

}  // namespace hopattn
