// The SM90 backward's entry points: what this build contains (the generated backward kernel
// table), the workspace it needs and the dispatch of a validated problem to its kernels.
#include <string>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/device_check.hpp"
#include "sm90/kernel_table.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

namespace {

const BackwardKernelEntry* find_backward_kernel(DType dtype, int64_t head_dim) {
  for (int i = 0; i < kBackwardKernelCount; ++i) {
    const BackwardKernelEntry& entry = kBackwardKernels[i];
    if (entry.dtype == dtype && entry.head_dim == head_dim) return &entry;
  }
  return nullptr;
}

Status cuda_failure(const char* what, cudaError_t error) {
  return set_error(Status::kCuda, std::string("sm90 backward: ") + what + " failed: " + cudaGetErrorString(error));
}

// "bfloat16 with head_dim 64/96/128; float16 with ..." or "nothing", for messages (the API
// builds its own list from supports_backward).
std::string backward_supported_list() {
  std::string list;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::string dims;
    for (int i = 0; i < kBackwardKernelCount; ++i) {
      if (kBackwardKernels[i].dtype == dtype) {
        dims += (dims.empty() ? "" : "/") + std::to_string(kBackwardKernels[i].head_dim);
      }
    }
    if (!dims.empty()) list += (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " + dims;
  }
  return list.empty() ? "nothing" : list;
}

}  // namespace

bool supports_backward(DType dtype, int64_t head_dim) { return find_backward_kernel(dtype, head_dim) != nullptr; }

// Rounded up to the 256-byte alignment the API asks of a caller's workspace; 0 for a problem no
// kernel of this build runs (validation refuses it before any call).
size_t backward_workspace_size(const BackwardProblem& problem) {
  const BackwardKernelEntry* kernel = find_backward_kernel(problem.dtype, problem.head_dim);
  if (kernel == nullptr) return 0;
  return (kernel->workspace_bytes(problem) + 255) / 256 * 256;
}

Status backward(BackwardProblem const& problem) {
  const SeqlenLayout& seqlens = problem.seqlens;
  if (Status status = check_device({{problem.q, "q.data"},
                                    {problem.k, "k.data"},
                                    {problem.v, "v.data"},
                                    {problem.o, "o.data"},
                                    {problem.d_o, "d_o.data"},
                                    {problem.lse, "lse"},
                                    {problem.dq, "dq.data"},
                                    {problem.dk, "dk.data"},
                                    {problem.dv, "dv.data"},
                                    {seqlens.cu_seqlens_q, "varlen->cu_seqlens_q"},
                                    {seqlens.cu_seqlens_k, "varlen->cu_seqlens_k"},
                                    {seqlens.seqused_k, "varlen->seqused_k"},
                                    {problem.workspace, "options->workspace"}},
                                   problem.cuda_stream);
      status != Status::kOk) {
    return status;
  }
  const BackwardKernelEntry* kernel = find_backward_kernel(problem.dtype, problem.head_dim);
  if (kernel == nullptr) {
    return set_error(Status::kUnsupported, std::string("dtype ") + dtype_name(problem.dtype) + " with head_dim " +
                                               std::to_string(problem.head_dim) +
                                               " is not in this build's sm90 backward kernels (" +
                                               backward_supported_list() + ")");
  }
  if (problem.workspace != nullptr) return kernel->launch(problem, problem.workspace);

  // No workspace from the caller: stream-ordered memory from the device's pool, freed behind the
  // kernels on the same stream, so the call stays asynchronous.
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  void* workspace = nullptr;
  cudaError_t error = cudaMallocAsync(&workspace, backward_workspace_size(problem), stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the workspace", error);
  const Status status = kernel->launch(problem, workspace);
  error = cudaFreeAsync(workspace, stream);
  if (status == Status::kOk && error != cudaSuccess) return cuda_failure("cudaFreeAsync of the workspace", error);
  return status;
}

}  // namespace hopattn::sm90
