// The thread-local "last error" behind hopattn_last_error(). Every layer reports failures the
// same way: `return set_error(status, message);`, so the status and its explanation never part.
#pragma once

#include <string>

#include "core/types.hpp"

namespace hopattn {

// Records `message` as this thread's last error and returns `status` unchanged.
Status set_error(Status status, std::string message);
void clear_error();
// Valid until the next set_error or clear_error on this thread.
const char* last_error();

}  // namespace hopattn
