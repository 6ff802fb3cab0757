// The SM90 backend of a build without CUDA: present in name only, so the dispatcher and the
// build info need no #ifdefs.
#include "core/error.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

bool built() { return false; }

bool supports(DType, int64_t) { return false; }

std::string supported_list() { return "nothing"; }

bool device_available() { return false; }

size_t forward_workspace_size(const ForwardProblem&) { return 0; }

Status forward(const ForwardProblem&) {
  return set_error(Status::kBackendUnavailable,
                   "the SM90 backend is not in this build: it was configured without CUDA "
                   "(HOPATTN_ENABLE_CUDA=OFF or no CUDA compiler found)");
}

bool supports_backward(DType, int64_t) { return false; }

size_t backward_workspace_size(const BackwardProblem&) { return 0; }

Status backward(const BackwardProblem&) { return forward(ForwardProblem{}); }

}  // namespace hopattn::sm90
