// Which backend runs a call: HOPATTN_BACKEND_AUTO decided by where the pointers live, then
// whether that backend is built, has its device, holds every pointer in its memory space and
// computes the (dtype, head_dim). Shared by every operation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/system_queries.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

struct NamedPointer {
  const void* pointer;
  std::string name;  // the C argument: "q.data", "lse", "varlen->cu_seqlens_q", ...
};

const char* backend_name(hopattn_backend backend);

// `backend` becomes CPU or SM90. AUTO picks SM90 when `pointers` (all in one memory space) are
// device memory, CPU when they are host memory. An explicit backend gets every pointer checked
// against its memory space.
Status resolve_backend(hopattn_backend requested, const std::vector<NamedPointer>& pointers,
                       const SystemQueries& system, hopattn_backend& backend);

// Every pointer is in `backend`'s memory space, as far as the runtime can tell: a pointer of the
// other space would fault inside the backend. Null pointers are skipped.
Status check_memory_space(hopattn_backend backend, const std::vector<NamedPointer>& pointers,
                          const SystemQueries& system);

Status check_backend_supports(hopattn_backend backend, DType dtype, int64_t head_dim,
                              const SystemQueries& system);

}  // namespace hopattn
