// Where a pointer lives, as far as the CUDA runtime can tell. Decides the backend for
// HOPATTN_BACKEND_AUTO and catches host/device mix-ups before a kernel faults on them.
#pragma once

namespace hopattn {

enum class MemorySpace {
  Host,    // pageable or pinned host memory, or any pointer when there is no CUDA device
  Device,  // device or managed memory
  Unknown  // the runtime could not classify it
};

// Never touches the memory. Without CUDA in the build every pointer is Host. Leaves no
// sticky CUDA error behind, and treats "no device" or "no driver" as Host.
MemorySpace memory_space_of(const void* pointer);

const char* memory_space_name(MemorySpace space);

}  // namespace hopattn
