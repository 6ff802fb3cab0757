#include "api/dispatch.hpp"

#include <string>

#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/memory_space.hpp"
#include "cpu/cpu_backend.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn {
namespace {

// The head dims build_info asks the SM90 backend about.
constexpr int64_t kSm90ReportedHeadDims[] = {64, 96, 128, 192, 256};

const SystemQueries& system_queries() {
  static const SystemQueries queries{memory_space_of, sm90::built, sm90::device_available,
                                     sm90::supports};
  return queries;
}

std::string sm90_info() {
  if (!sm90::built()) return "sm90: not built";
  std::string line = "sm90: built;";
  bool any = false;
  for (hopattn_dtype dtype :
       {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    std::string dims;
    for (int64_t head_dim : kSm90ReportedHeadDims) {
      if (sm90::supports(dtype, head_dim))
        dims += (dims.empty() ? "" : "/") + std::to_string(head_dim);
    }
    if (dims.empty()) continue;
    line += std::string(any ? "," : "") + " " + dtype_name(dtype) + " head_dim " + dims;
    any = true;
  }
  line += "; causal, GQA; device: ";
  line += sm90::device_available() ? "available" : "no compute capability 9.0 GPU visible";
  return line;
}

}  // namespace

hopattn_status forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                       hopattn_tensor* o, float* lse, const hopattn_forward_options* options) {
  ForwardCall call;
  if (hopattn_status s = validate_forward(q, k, v, o, lse, options, system_queries(), call);
      s != HOPATTN_OK) {
    return s;
  }
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::forward(call.problem)
                                              : cpu::forward(call.problem);
}

bool backend_available(hopattn_backend backend) {
  switch (backend) {
    case HOPATTN_BACKEND_AUTO:  // AUTO can always fall back to the CPU
    case HOPATTN_BACKEND_CPU: return true;
    case HOPATTN_BACKEND_SM90: return sm90::built() && sm90::device_available();
  }
  return false;
}

bool backend_supports(hopattn_backend backend, hopattn_dtype dtype, int64_t head_dim) {
  if (!is_valid_dtype(dtype)) return false;
  switch (backend) {
    case HOPATTN_BACKEND_AUTO:
      return cpu::supports(dtype, head_dim) || sm90::supports(dtype, head_dim);
    case HOPATTN_BACKEND_CPU: return cpu::supports(dtype, head_dim);
    case HOPATTN_BACKEND_SM90: return sm90::supports(dtype, head_dim);
  }
  return false;
}

const char* build_info() {
  static const std::string info = "cpu: float32/bfloat16/float16, head_dim 1-" +
                                  std::to_string(cpu::kMaxHeadDim) + ", causal, GQA; " +
                                  std::to_string(cpu::worker_count()) + " threads\n" + sm90_info();
  return info.c_str();
}

}  // namespace hopattn
