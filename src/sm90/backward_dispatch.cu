// The SM90 backward's entry points: what this build contains (the generated backward kernel
// table), the workspace it needs and the dispatch of a validated problem to its kernels.
#include <string>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/device_check.hpp"
#include "sm90/dispatch_common.hpp"
#include "sm90/kernel_table.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

bool supports_backward(DType dtype, int64_t head_dim) {
  return find_kernel(kBackwardKernels, kBackwardKernelCount, dtype, head_dim) != nullptr;
}

size_t backward_workspace_size(const BackwardProblem& problem) { return workspace_size(kBackwardKernels, kBackwardKernelCount, problem); }

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
  return run_kernel(kBackwardKernels, kBackwardKernelCount, problem, "backward kernels");
}

}  // namespace hopattn::sm90
