// hopattn_forward_fp8's own rules (and its varlen form's): v's layout (options->fp8_v_layout, whose
// strides and extent the tensor rules then check), the dtypes (e4m3 inputs, a bfloat16 or float16
// output), the three scales arguments (layout, array, memory space; on the CPU their values) and
// the scale arrays among the inputs that the outputs must not overlap. The options,
// shapes, lse and work bound are the forward's (forward_rules.hpp), the varlen metadata and the
// rest the shared tensor, call and backend rules; the SM90 rules (sm90_rules.hpp) once the backend
// is SM90.
#include <cmath>
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
namespace {

// The three inputs and their scales, by their C names, in argument order.
constexpr int kInputs = 3;
constexpr const char* kInputNames[kInputs] = {"q", "k", "v"};
constexpr const char* kScalesNames[kInputs] = {"q_scales", "k_scales", "v_scales"};
constexpr const char* kScalesDataNames[kInputs] = {"q_scales->data", "k_scales->data",
                                                   "v_scales->data"};

// The arguments of a call; o and the scales are null in the workspace query, which names the
// output's dtype instead. varlen: the variable-length forms' metadata (null for fixed lengths).
struct Arguments {
  const hopattn_tensor* inputs[kInputs];  // q, k, v
  const hopattn_fp8_scales* scales[kInputs];
  const hopattn_tensor* o;
  float* lse;
  int o_dtype;  // the query's (any int); a call's is o->dtype
  bool is_varlen;
  const hopattn_varlen* varlen;
  bool query() const { return o == nullptr; }
};

Status check_input_dtype(const hopattn_tensor& t, const char* name) {
  const int dtype = enum_value(t.dtype);
  if (dtype == HOPATTN_DTYPE_FLOAT8_E4M3) return Status::kOk;
  return invalid(name, ".dtype must be HOPATTN_DTYPE_FLOAT8_E4M3 (e4m3 codes, as "
                 "hopattn_quantize_fp8 writes them) for hopattn_forward_fp8, not ",
                 dtype_name(static_cast<DType>(dtype)),
                 "; hopattn_forward takes float32, bfloat16 and float16 inputs");
}

// `dtype` read as an integer: the query's o_dtype may be any int.
Status check_output_dtype(int dtype, const char* name) {
  if (dtype == HOPATTN_DTYPE_BFLOAT16 || dtype == HOPATTN_DTYPE_FLOAT16) return Status::kOk;
  const std::string given =
      is_valid_dtype(dtype) ? dtype_name(static_cast<DType>(dtype)) : std::to_string(dtype);
  return invalid(name, " is ", given,
                 "; hopattn_forward_fp8 writes bfloat16 or float16 (1, HOPATTN_DTYPE_BFLOAT16, "
                 "or 2, HOPATTN_DTYPE_FLOAT16)");
}

// The CPU backend reads the scales, so it refuses what no block's amax / 448 can be: zero,
// negative, -inf. NaN and +inf are what hopattn_quantize_fp8 writes for blocks that held NaN or
// inf; they are used, and make NaN in every row that sees their block.
Status check_scale_values(const float* data, int64_t count, const char* name) {
  for (int64_t i = 0; i < count; ++i) {
    const float scale = data[i];
    if (scale > 0.f || std::isnan(scale)) continue;
    return invalid(name, "[", i, "] is ", scale,
                   "; a scale must be > 0 (NaN or +inf, which mark a block that held NaN or "
                   "inf, give NaN in the rows that see it)");
  }
  return Status::kOk;
}

// Every path: hopattn_forward_fp8 and its varlen form (o and the scales given) and their workspace
// queries (o null).
Status validate(const Arguments& a, const hopattn_forward_options* options_or_null,
                const SystemQueries& system, Fp8ForwardCall& call) {
  hopattn_forward_options options;
  if (Status s = read_forward_options(options_or_null, options); s != Status::kOk) return s;
  const int v_layout = enum_value(options.fp8_v_layout);
  if (Status s = check_fp8_layout(v_layout, "options->fp8_v_layout"); s != Status::kOk) return s;
  hopattn_varlen varlen = default_varlen();
  if (a.is_varlen) {
    if (Status s = read_varlen(a.varlen, varlen); s != Status::kOk) return s;
  }
  const NamedTensor inputs[kInputs] = {
      {a.inputs[0], kInputNames[0]},
      {a.inputs[1], kInputNames[1]},
      {a.inputs[2], kInputNames[2], static_cast<Fp8Layout>(v_layout)}};
  for (const NamedTensor& input : inputs) {
    if (Status s = check_tensor(input); s != Status::kOk) return s;
    if (Status s = check_input_dtype(*input.tensor, input.name); s != Status::kOk) return s;
  }
  int o_dtype = a.o_dtype;
  if (!a.query()) {
    if (Status s = check_tensor({a.o, "o"}); s != Status::kOk) return s;
    o_dtype = enum_value(a.o->dtype);
  }
  if (Status s = check_output_dtype(o_dtype, a.query() ? "o_dtype" : "o.dtype"); s != Status::kOk) {
    return s;
  }
  const hopattn_tensor &q = *a.inputs[0], &k = *a.inputs[1], &v = *a.inputs[2];
  if (Status s = check_forward_shapes(q, k, v, a.o, a.is_varlen); s != Status::kOk) return s;

  int64_t scale_counts[kInputs] = {};
  std::vector<ByteRange> scale_ranges;
  if (!a.query()) {
    for (int i = 0; i < kInputs; ++i) {
      const hopattn_fp8_scales& scales = *a.scales[i];
      const std::string owner = kScalesNames[i];
      const int scaling = enum_value(scales.scaling);
      if (Status s = check_fp8_scaling(scaling, scales.block_rows, owner); s != Status::kOk) {
        return s;
      }
      if (Status s = check_fp8_scales_array(
              scales.data, *a.inputs[i], scaling, scales.block_rows,
              {kScalesDataNames[i], std::string(kInputNames[i]) + ".", owner + "->block_rows"},
              scale_counts[i]);
          s != Status::kOk) {
        return s;
      }
      scale_ranges.push_back(float_range_of(kScalesDataNames[i], scales.data, scale_counts[i]));
    }
    if (Status s = check_lse(q, a.lse); s != Status::kOk) return s;
    if (Status s = check_forward_outputs(q, k, inputs[2], *a.o, a.lse, scale_ranges);
        s != Status::kOk) {
      return s;
    }
  }
  if (a.is_varlen) {
    if (Status s = check_varlen_arguments(varlen); s != Status::kOk) return s;
  }

  std::vector<NamedPointer> pointers = {{q.data, "q.data"}, {k.data, "k.data"}, {v.data, "v.data"}};
  if (!a.query()) pointers.push_back({a.o->data, "o.data"});
  if (a.lse != nullptr) pointers.push_back({a.lse, "lse"});
  if (Status s = resolve_backend(options.backend, pointers, system, call.backend);
      s != Status::kOk) {
    return s;
  }
  // As the varlen metadata: AUTO decides by the tensors, and the scales must follow them.
  if (!a.query()) {
    std::vector<NamedPointer> scale_pointers;
    for (int i = 0; i < kInputs; ++i) scale_pointers.push_back({a.scales[i]->data, kScalesDataNames[i]});
    if (Status s = check_memory_space(call.backend, scale_pointers, system); s != Status::kOk) {
      return s;
    }
  }
  if (a.is_varlen) {
    if (Status s = check_varlen_memory_space(varlen, call.backend, system); s != Status::kOk) return s;
  }
  if (Status s = check_backend_supports_fp8(call.backend, dtype_of(static_cast<hopattn_dtype>(o_dtype)),
                                            q.head_dim, system);
      s != Status::kOk) {
    return s;
  }
  if (call.backend == HOPATTN_BACKEND_CPU && a.is_varlen) {
    if (Status s = check_varlen_metadata(varlen, q.seqlen, k.seqlen); s != Status::kOk) return s;
  }
  if (Status s = check_forward_work(call.backend, q, k, a.is_varlen ? &varlen : nullptr);
      s != Status::kOk) {
    return s;
  }
  if (!a.query() && call.backend == HOPATTN_BACKEND_CPU) {
    for (int i = 0; i < kInputs; ++i) {
      if (Status s = check_scale_values(a.scales[i]->data, scale_counts[i], kScalesDataNames[i]);
          s != Status::kOk) {
        return s;
      }
    }
  }

  hopattn_tensor no_output = q;  // the workspace query describes o by q's shape and o_dtype
  no_output.data = nullptr;
  no_output.dtype = static_cast<hopattn_dtype>(o_dtype);
  const hopattn_fp8_scales no_scales = {nullptr, HOPATTN_FP8_SCALE_TENSOR, 0};
  const auto scales_of = [&](int i) -> const hopattn_fp8_scales& {
    return a.query() ? no_scales : *a.scales[i];
  };
  const hopattn_tensor& out = a.query() ? no_output : *a.o;
  call.problem = a.is_varlen ? problem_of(q, scales_of(0), k, scales_of(1), v, scales_of(2), out, a.lse,
                                          varlen, options)
                             : problem_of(q, scales_of(0), k, scales_of(1), v, scales_of(2), out, a.lse,
                                          options);
  call.workspace_needed = 0;
  if (call.backend == HOPATTN_BACKEND_SM90) {
    if (Status s = sm90::check_forward_fp8_rules(call.problem); s != Status::kOk) return s;
    call.workspace_needed = system.sm90_forward_fp8_workspace_size(call.problem);
  }
  if (a.query() || options.workspace == nullptr) return Status::kOk;
  return check_workspace(options.workspace, options.workspace_bytes, call.backend,
                         call.workspace_needed,
                         a.is_varlen ? "hopattn_forward_fp8_varlen_workspace_size"
                                     : "hopattn_forward_fp8_workspace_size",
                         system);
}

}  // namespace

Status validate_forward_fp8(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                            const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                            const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
                            const hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                            bool is_varlen, const hopattn_forward_options* options,
                            const SystemQueries& system, Fp8ForwardCall& call) {
  // The structs are named before anything is read, in argument order, as the forward names o.
  const hopattn_fp8_scales* scales[kInputs] = {q_scales, k_scales, v_scales};
  for (int i = 0; i < kInputs; ++i) {
    if (scales[i] == nullptr) {
      return invalid(kScalesNames[i], " is NULL; it must point to the hopattn_fp8_scales of ",
                     kInputNames[i], " (its scales array, scaling and block_rows)");
    }
  }
  if (o == nullptr) return invalid("o is NULL");
  return validate({{q, k, v}, {q_scales, k_scales, v_scales}, o, lse, 0, is_varlen, varlen}, options,
                  system, call);
}

Status validate_forward_fp8_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                            const hopattn_tensor* v, int o_dtype,
                                            const hopattn_varlen* varlen, bool is_varlen,
                                            const hopattn_forward_options* options,
                                            const SystemQueries& system, Fp8ForwardCall& call) {
  return validate({{q, k, v}, {nullptr, nullptr, nullptr}, nullptr, nullptr, o_dtype, is_varlen, varlen},
                  options, system, call);
}

}  // namespace hopattn
