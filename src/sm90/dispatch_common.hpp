// What the forward and the backward dispatch share: finding an operation's kernel in its generated
// table, listing the table for messages, the workspace the API asks for, and running a kernel with
// the caller's workspace or stream-ordered memory of its own.
#pragma once

#include <string>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/kernel_table.hpp"

namespace hopattn::sm90 {

inline Status cuda_failure(const char* what, cudaError_t error) {
  return set_error(Status::kCuda, std::string("sm90: ") + what + " failed: " + cudaGetErrorString(error));
}

template <class Problem>
const KernelEntry<Problem>* find_kernel(const KernelEntry<Problem>* table, int count, DType dtype, int64_t head_dim) {
  for (int i = 0; i < count; ++i) {
    if (table[i].dtype == dtype && table[i].head_dim == head_dim) return &table[i];
  }
  return nullptr;
}

// "bfloat16 with head_dim 64/96/128; float16 with ..." or "nothing": for messages.
template <class Problem>
std::string supported_list(const KernelEntry<Problem>* table, int count) {
  std::string list;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::string dims;
    for (int i = 0; i < count; ++i) {
      if (table[i].dtype == dtype) dims += (dims.empty() ? "" : "/") + std::to_string(table[i].head_dim);
    }
    if (!dims.empty()) list += (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " + dims;
  }
  return list.empty() ? "nothing" : list;
}

// The kernel's workspace rounded up to the 256-byte alignment the API asks of a caller's.
template <class Problem>
size_t api_workspace_bytes(const KernelEntry<Problem>& kernel, Problem const& problem) {
  return (kernel.workspace_bytes(problem) + 255) / 256 * 256;
}

// api_workspace_bytes of the problem's kernel; 0 for a problem no kernel of this build runs
// (validation refuses it before any call).
template <class Problem>
size_t workspace_size(const KernelEntry<Problem>* table, int count, Problem const& problem) {
  const KernelEntry<Problem>* kernel = find_kernel(table, count, problem.dtype, problem.head_dim);
  return kernel == nullptr ? 0 : api_workspace_bytes(*kernel, problem);
}

// Runs the kernel on the caller's workspace, or, when the caller gave none and the kernel needs
// some, on stream-ordered memory from the device's pool freed behind the kernel on the same stream,
// so the call stays asynchronous.
template <class Problem>
Status launch_with_workspace(const KernelEntry<Problem>& kernel, Problem const& problem) {
  const size_t bytes = api_workspace_bytes(kernel, problem);
  if (bytes == 0 || problem.workspace != nullptr) return kernel.launch(problem, problem.workspace);
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  void* workspace = nullptr;
  cudaError_t error = cudaMallocAsync(&workspace, bytes, stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the workspace", error);
  const Status status = kernel.launch(problem, workspace);
  error = cudaFreeAsync(workspace, stream);
  if (status == Status::kOk && error != cudaSuccess) return cuda_failure("cudaFreeAsync of the workspace", error);
  return status;
}

// The validated problem on its (dtype, head_dim) kernel from `table`; an error naming what the
// build holds when there is none (`kernels`: "kernels", "backward kernels").
template <class Problem>
Status run_kernel(const KernelEntry<Problem>* table, int count, Problem const& problem, const char* kernels) {
  const KernelEntry<Problem>* kernel = find_kernel(table, count, problem.dtype, problem.head_dim);
  if (kernel == nullptr) {
    return set_error(Status::kUnsupported, std::string("dtype ") + dtype_name(problem.dtype) + " with head_dim " +
                                               std::to_string(problem.head_dim) + " is not in this build's sm90 " +
                                               kernels + " (" + supported_list(table, count) + ")");
  }
  return launch_with_workspace(*kernel, problem);
}

}  // namespace hopattn::sm90
