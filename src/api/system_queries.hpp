// What validation needs to know about the machine and the SM90 build. The C API passes the real
// queries (dispatch.cpp); the tests pass fakes, so that the SM90 rules run without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/memory_space.hpp"
#include "core/problem.hpp"

namespace hopattn {

struct SystemQueries {
  std::function<MemorySpace(const void*)> memory_space_of;
  std::function<bool()> sm90_built;
  std::function<bool()> sm90_device_available;
  std::function<bool(DType, int64_t)> sm90_supports;
  // For messages: what the SM90 kernels of this build cover ("nothing" without them).
  std::function<std::string()> sm90_supported_list;
  std::function<size_t(const ForwardProblem&)> sm90_forward_workspace_size;
  // The backward kernels: which (dtype, head_dim) they cover, the same as a list for messages,
  // and the workspace a problem needs.
  std::function<bool(DType, int64_t)> sm90_supports_backward;
  std::function<std::string()> sm90_backward_supported_list;
  std::function<size_t(const BackwardProblem&)> sm90_backward_workspace_size;
  // The FP8 forward kernels: which (output dtype, head_dim) they cover, the same as a list for
  // messages, and the workspace a problem needs.
  std::function<bool(DType, int64_t)> sm90_supports_fp8;
  std::function<std::string()> sm90_fp8_supported_list;
  std::function<size_t(const Fp8ForwardProblem&)> sm90_forward_fp8_workspace_size;
};

}  // namespace hopattn
