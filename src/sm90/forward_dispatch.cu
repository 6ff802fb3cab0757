// The SM90 backend's entry points: what this build contains (the generated kernel table), whether
// the current device can run it, and the dispatch of a validated problem to its kernel. The
// argument rules of this backend live in sm90_rules.cpp, which validation runs before this.
#include <string>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/device_check.hpp"
#include "sm90/dispatch_common.hpp"
#include "sm90/kernel_table.hpp"
#include "sm90/launch.cuh"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

bool built() { return true; }

bool supports(DType dtype, int64_t head_dim) {
  return find_kernel(kForwardKernels, kForwardKernelCount, dtype, head_dim) != nullptr;
}

std::string supported_list() { return supported_list(kForwardKernels, kForwardKernelCount); }

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

size_t forward_workspace_size(const ForwardProblem& problem) { return workspace_size(kForwardKernels, kForwardKernelCount, problem); }

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
  return run_kernel(kForwardKernels, kForwardKernelCount, problem, "kernels");
}

bool supports_fp8(DType out_dtype, int64_t head_dim) {
  return find_kernel(kForwardFp8Kernels, kForwardFp8KernelCount, out_dtype, head_dim) != nullptr;
}

std::string fp8_supported_list() { return supported_list(kForwardFp8Kernels, kForwardFp8KernelCount); }

size_t forward_fp8_workspace_size(const Fp8ForwardProblem& problem) {
  return workspace_size(kForwardFp8Kernels, kForwardFp8KernelCount, problem);
}

Status forward_fp8(Fp8ForwardProblem const& problem) {
  if (Status status = check_device({{problem.q, "q.data"},
                                    {problem.k, "k.data"},
                                    {problem.v, "v.data"},
                                    {problem.o, "o.data"},
                                    {problem.lse, "lse"},
                                    {problem.q_scales.data, "q_scales->data"},
                                    {problem.k_scales.data, "k_scales->data"},
                                    {problem.v_scales.data, "v_scales->data"},
                                    {problem.workspace, "options->workspace"}},
                                   problem.cuda_stream);
      status != Status::kOk) {
    return status;
  }
  return run_kernel(kForwardFp8Kernels, kForwardFp8KernelCount, problem, "FP8 kernels (by o's dtype)");
}

}  // namespace hopattn::sm90
