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

namespace {

Status not_built() {
  return set_error(Status::kBackendUnavailable,
                   "the SM90 backend is not in this build: it was configured without CUDA "
                   "(HOPATTN_ENABLE_CUDA=OFF or no CUDA compiler found)");
}

}  // namespace

Status forward(const ForwardProblem&) { return not_built(); }

bool supports_backward(DType, int64_t) { return false; }

size_t backward_workspace_size(const BackwardProblem&) { return 0; }

Status backward(const BackwardProblem&) { return not_built(); }

bool supports_fp8(DType, int64_t) { return false; }

std::string fp8_supported_list() { return "nothing"; }

size_t forward_fp8_workspace_size(const Fp8ForwardProblem&) { return 0; }

Status forward_fp8(const Fp8ForwardProblem&) { return not_built(); }

Status quantize_fp8(const QuantizeProblem&) { return not_built(); }

}  // namespace hopattn::sm90
