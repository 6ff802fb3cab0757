#include "core/memory_space.hpp"

#if defined(HOPATTN_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace hopattn {

#if defined(HOPATTN_HAVE_CUDA)

MemorySpace memory_space_of(const void* pointer) {
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, pointer);
  if (error != cudaSuccess) {
    cudaGetLastError();  // the query must not fail the caller's next CUDA call
    // Without a usable device nothing can be device memory.
    const bool no_device = error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver ||
                           error == cudaErrorInitializationError || error == cudaErrorStubLibrary ||
                           error == cudaErrorSystemDriverMismatch ||
                           error == cudaErrorCompatNotSupportedOnDevice;
    return no_device ? MemorySpace::Host : MemorySpace::Unknown;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return MemorySpace::Device;
    case cudaMemoryTypeHost:
    case cudaMemoryTypeUnregistered: return MemorySpace::Host;
  }
  return MemorySpace::Unknown;
}

#else

MemorySpace memory_space_of(const void*) { return MemorySpace::Host; }

#endif

const char* memory_space_name(MemorySpace space) {
  switch (space) {
    case MemorySpace::Host: return "host memory";
    case MemorySpace::Device: return "device memory";
    case MemorySpace::Unknown: break;
  }
  return "memory of unknown kind";
}

}  // namespace hopattn
