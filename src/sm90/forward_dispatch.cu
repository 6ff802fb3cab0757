// The SM90 backend's entry points: what this build contains (the generated kernel table), whether
// the current device can run it, and the dispatch of a validated problem to its kernel. The
// argument rules of this backend live in sm90_rules.cpp, which validation runs before this.
#include <string>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/device_check.hpp"
#include "sm90/kernel_table.hpp"
#include "sm90/launch.cuh"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

namespace {

const KernelEntry* find_kernel(Operation operation, DType dtype, int64_t head_dim) {
  for (int i = 0; i < kKernelCount; ++i) {
    const KernelEntry& entry = kKernels[i];
    if (entry.operation == operation && entry.dtype == dtype && entry.head_dim == head_dim) return &entry;
  }
  return nullptr;
}

}  // namespace

Status current_device_shape(DeviceShape& shape) {
  constexpr int kMaxDevices = 64;
  static DeviceShape cache[kMaxDevices];  // a device's shape never changes; a race rewrites the same values
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_failure("cudaGetDevice", error);
  if (device < kMaxDevices && cache[device].sm_count > 0) {
    shape = cache[device];
    return Status::kOk;
  }
  int sm_count = 0, l2_bytes = 0;
  error = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device);
  if (error != cudaSuccess) return cuda_failure("cudaDeviceGetAttribute", error);
  shape = {sm_count, l2_bytes};
  if (device < kMaxDevices) cache[device] = shape;
  return Status::kOk;
}

bool built() { return true; }

bool supports(DType dtype, int64_t head_dim) { return find_kernel(Operation::kForward, dtype, head_dim) != nullptr; }

std::string supported_list() {
  std::string list;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::string dims;
    for (int i = 0; i < kKernelCount; ++i) {
      if (kKernels[i].dtype == dtype) dims += (dims.empty() ? "" : "/") + std::to_string(kKernels[i].head_dim);
    }
    if (!dims.empty()) list += (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " + dims;
  }
  return list.empty() ? "nothing" : list;
}

bool device_available() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind for the caller
    return false;
  }
  return major == 9 && minor == 0;
}

// Rounded up to the 256-byte alignment the API asks of a caller's workspace.
size_t forward_workspace_size(const ForwardProblem& problem) {
  const size_t bytes = forward_kernel_workspace_bytes(problem);
  return (bytes + 255) / 256 * 256;
}

Status forward(ForwardProblem const& problem) {
  const SeqlenLayout& seqlens = problem.seqlens;
  if (Status status = check_device({{problem.q, "q.data"},
                                    {problem.k, "k.data"},
                                    {problem.v, "v.data"},
                                    {problem.o, "o.data"},
                                    {problem.lse, "lse"},
                                    {seqlens.cu_seqlens_q, "varlen->cu_seqlens_q"},
                                    {seqlens.cu_seqlens_k, "varlen->cu_seqlens_k"},
                                    {seqlens.seqused_k, "varlen->seqused_k"},
                                    {problem.workspace, "options->workspace"}},
                                   problem.cuda_stream);
      status != Status::kOk) {
    return status;
  }
  const KernelEntry* kernel = find_kernel(Operation::kForward, problem.dtype, problem.head_dim);
  if (kernel == nullptr) {
    return set_error(Status::kUnsupported, std::string("dtype ") + dtype_name(problem.dtype) + " with head_dim " +
                                               std::to_string(problem.head_dim) +
                                               " is not in this build's sm90 kernels (" + supported_list() + ")");
  }
  const size_t workspace_bytes = forward_workspace_size(problem);
  if (workspace_bytes == 0 || problem.workspace != nullptr) return kernel->launch(problem, problem.workspace);

  // No workspace from the caller: stream-ordered memory from the device's pool, freed behind the
  // kernel on the same stream, so the call stays asynchronous.
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  void* workspace = nullptr;
  cudaError_t error = cudaMallocAsync(&workspace, workspace_bytes, stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the workspace", error);
  const Status status = kernel->launch(problem, workspace);
  error = cudaFreeAsync(workspace, stream);
  if (status == Status::kOk && error != cudaSuccess) return cuda_failure("cudaFreeAsync of the workspace", error);
  return status;
}

}  // namespace hopattn::sm90
