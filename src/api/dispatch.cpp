#include "api/dispatch.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "api/abi.hpp"
#include "api/tensor_rules.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/memory_space.hpp"
#include "cpu/cpu_backend.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn {
namespace {

// "bfloat16 with head_dim 64/128; float16 with head_dim 64/128", or "nothing": what
// sm90::supports_backward answers yes to, asked over the head_dims any backend accepts.
std::string sm90_backward_supported_list() {
  std::string list;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    std::string head_dims;
    for (int64_t head_dim = 1; head_dim <= cpu::kMaxHeadDim; ++head_dim) {
      if (!sm90::supports_backward(dtype, head_dim)) continue;
      head_dims += (head_dims.empty() ? "" : "/") + std::to_string(head_dim);
    }
    if (head_dims.empty()) continue;
    list += (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " +
            head_dims;
  }
  return list.empty() ? "nothing" : list;
}

// At namespace scope, built when the library loads: a function-local static's guard, held by a
// thread that fork() does not copy, would hang the child's first call (std::function members
// make the initialisation dynamic). Never destroyed, so that a thread still calling during exit()
// finds it whole. Nothing calls system_queries() from a static initialiser, so it is built first.
const SystemQueries& the_system_queries = *new SystemQueries{
    memory_space_of,
    sm90::built,
    sm90::device_available,
    sm90::supports,
    sm90::supported_list,
    sm90::forward_workspace_size,
    sm90::supports_backward,
    sm90_backward_supported_list,
    sm90::backward_workspace_size,
    sm90::supports_fp8,
    sm90::fp8_supported_list,
    sm90::forward_fp8_workspace_size};

const SystemQueries& system_queries() { return the_system_queries; }

std::string sm90_info() {
  if (!sm90::built()) return "sm90: not built";
  std::string line = "sm90: built; " + sm90::supported_list() +
                     "; causal, GQA, varlen; FP8 forward: " + sm90::fp8_supported_list() +
                     "; device: ";
  line += sm90::device_available() ? "available" : "no compute capability 9.0 GPU visible";
  return line;
}

Status run(const ForwardCall& call) {
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::forward(call.problem)
                                              : cpu::forward(call.problem);
}

Status run(const BackwardCall& call) {
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::backward(call.problem)
                                              : cpu::backward(call.problem);
}

Status run(const Fp8ForwardCall& call) {
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::forward_fp8(call.problem)
                                              : cpu::forward_fp8(call.problem);
}

Status run(const QuantizeCall& call) {
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::quantize_fp8(call.problem)
                                              : cpu::quantize_fp8(call.problem);
}

}  // namespace

Status forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
               hopattn_tensor* o, float* lse, const hopattn_forward_options* options) {
  ForwardCall call;
  if (Status s = validate_forward(q, k, v, o, lse, options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                      hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                      const hopattn_forward_options* options) {
  ForwardCall call;
  if (Status s = validate_forward_varlen(q, k, v, o, lse, varlen, options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status forward_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                              const hopattn_tensor* v, const hopattn_varlen* varlen,
                              const hopattn_forward_options* options, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes is NULL");
  ForwardCall call;
  if (Status s = validate_forward_workspace_query(q, k, v, varlen, options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  *bytes = call.workspace_needed;
  return Status::kOk;
}

Status backward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                hopattn_tensor* dq, hopattn_tensor* dk, hopattn_tensor* dv,
                const hopattn_backward_options* options) {
  BackwardCall call;
  if (Status s = validate_backward(q, k, v, o, d_o, lse, dq, dk, dv, options, system_queries(),
                                   call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status backward_varlen(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                       const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                       hopattn_tensor* dq, hopattn_tensor* dk, hopattn_tensor* dv,
                       const hopattn_varlen* varlen, const hopattn_backward_options* options) {
  BackwardCall call;
  if (Status s = validate_backward_varlen(q, k, v, o, d_o, lse, dq, dk, dv, varlen, options,
                                          system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status backward_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                               const hopattn_tensor* v, const hopattn_varlen* varlen,
                               const hopattn_backward_options* options, size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes is NULL");
  BackwardCall call;
  if (Status s =
          validate_backward_workspace_query(q, k, v, varlen, options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  *bytes = call.workspace_needed;
  return Status::kOk;
}

Status quantize_fp8(const hopattn_tensor* x, hopattn_tensor* out, float* scales,
                    const hopattn_quantize_options* options) {
  QuantizeCall call;
  if (Status s = validate_quantize(x, out, scales, options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status forward_fp8(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                   const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                   const hopattn_tensor* v, const hopattn_fp8_scales* v_scales, hopattn_tensor* o,
                   float* lse, const hopattn_forward_options* options) {
  Fp8ForwardCall call;
  if (Status s = validate_forward_fp8(q, q_scales, k, k_scales, v, v_scales, o, lse, nullptr, false,
                                      options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status forward_fp8_varlen(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                          const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                          const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
                          hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                          const hopattn_forward_options* options) {
  Fp8ForwardCall call;
  if (Status s = validate_forward_fp8(q, q_scales, k, k_scales, v, v_scales, o, lse, varlen, true,
                                      options, system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  return run(call);
}

Status forward_fp8_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                                  const hopattn_tensor* v, int o_dtype, const hopattn_varlen* varlen,
                                  bool is_varlen, const hopattn_forward_options* options,
                                  size_t* bytes) {
  if (bytes == nullptr) return invalid("bytes is NULL");
  Fp8ForwardCall call;
  if (Status s = validate_forward_fp8_workspace_query(q, k, v, o_dtype, varlen, is_varlen, options,
                                                      system_queries(), call);
      s != Status::kOk) {
    return s;
  }
  *bytes = call.workspace_needed;
  return Status::kOk;
}

bool backend_available(int backend) {
  switch (backend) {
    case HOPATTN_BACKEND_AUTO:  // AUTO can always fall back to the CPU
    case HOPATTN_BACKEND_CPU: return true;
    case HOPATTN_BACKEND_SM90: return sm90::built() && sm90::device_available();
  }
  return false;
}

bool backend_supports(int backend, int dtype, int64_t head_dim) {
  if (!is_valid_dtype(dtype)) return false;
  const auto d = static_cast<DType>(dtype);
  switch (backend) {
    case HOPATTN_BACKEND_AUTO: return cpu::supports(d, head_dim) || sm90::supports(d, head_dim);
    case HOPATTN_BACKEND_CPU: return cpu::supports(d, head_dim);
    case HOPATTN_BACKEND_SM90: return sm90::supports(d, head_dim);
  }
  return false;
}

const char* build_info() {
  // Built once and kept for the process's life, without a function-local static's guard: a child
  // forked while another thread held that guard would wait on it for ever. Threads that race
  // here each build the text; the first to publish it wins and the others free theirs.
  static std::atomic<const char*> published{nullptr};
  if (const char* info = published.load(std::memory_order_acquire)) return info;
  const std::string text = "cpu: float32/bfloat16/float16, head_dim 1-" + std::to_string(cpu::kMaxHeadDim) +
                           ", causal, GQA, varlen, backward, FP8 quantisation and forward; " +
                           std::to_string(cpu::worker_count()) + " threads\n" + sm90_info();
  char* built = new char[text.size() + 1];
  std::memcpy(built, text.c_str(), text.size() + 1);
  const char* expected = nullptr;
  if (published.compare_exchange_strong(expected, built, std::memory_order_acq_rel)) return built;
  delete[] built;
  return expected;
}

}  // namespace hopattn
