// memory_space_of on this machine's host memory: Host, with or without CUDA in the build and
// with or without a GPU, and no CUDA error left behind for the caller.
#include "core/memory_space.hpp"

#include <gtest/gtest.h>

#include <vector>

#if defined(HOPATTN_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace hopattn {
namespace {

TEST(MemorySpace, HostPointersAreHostMemory) {
#if defined(HOPATTN_HAVE_CUDA)
  // Without a driver the runtime answers cudaErrorInsufficientDriver to every call, even
  // cudaGetLastError; with one, it must be cudaSuccess again after the queries.
  const cudaError_t before = cudaGetLastError();
#endif
  std::vector<float> heap(16);
  float stack = 0;
  EXPECT_EQ(memory_space_of(heap.data()), MemorySpace::Host);
  EXPECT_EQ(memory_space_of(&stack), MemorySpace::Host);
#if defined(HOPATTN_HAVE_CUDA)
  EXPECT_EQ(cudaGetLastError(), before) << "the queries must leave no CUDA error behind";
#endif
}

TEST(MemorySpace, Names) {
  EXPECT_STREQ(memory_space_name(MemorySpace::Host), "host memory");
  EXPECT_STREQ(memory_space_name(MemorySpace::Device), "device memory");
}

}  // namespace
}  // namespace hopattn
