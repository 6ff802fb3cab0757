// The SM90 backward's entry points. (Placeholder until the backward kernels land: no kernel yet.)
#include "core/error.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

bool supports_backward(DType, int64_t) { return false; }

size_t backward_workspace_size(const BackwardProblem&) { return 0; }

Status backward(const BackwardProblem&) {
  return set_error(Status::kUnsupported, "the sm90 backward is not in this build yet");
}

}  // namespace hopattn::sm90
