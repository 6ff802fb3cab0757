// The SM90 backend of a build without CUDA: present in name only, so the dispatcher and the
// build info need no #ifdefs.
#include "core/error.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

bool built() { return false; }

bool supports(hopattn_dtype, int64_t) { return false; }

bool device_available() { return false; }

hopattn_status forward(const AttentionProblem&) {
  return set_error(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                   "the SM90 backend is not in this build: it was configured without CUDA "
                   "(HOPATTN_ENABLE_CUDA=OFF or no CUDA compiler found)");
}

}  // namespace hopattn::sm90
