// Host side of one (dtype, head_dim) backward instantiation: the workspace layout, then three
// kernels in stream order on the problem's stream: the preprocess (D, LSE in base 2, dQ
// accumulator cleared), the main kernel (causal or not) and the postprocess (dQ).
#pragma once

#include <climits>
#include <string>

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "core/problem.hpp"
#include "sm90/device_check.hpp"
#include "sm90/dispatch_common.hpp"
#include "sm90/kernel/backward/config.hpp"
#include "sm90/kernel/backward/epilogue.cuh"
#include "sm90/kernel/backward/kernel.cuh"
#include "sm90/kernel/backward/mainloop.cuh"
#include "sm90/kernel/backward/postprocess.cuh"
#include "sm90/kernel/backward/preprocess.cuh"
#include "sm90/kernel/backward/tile_size.hpp"
#include "sm90/kernel/backward/workspace.hpp"

namespace hopattn::sm90 {

template <class Element, int kHeadDim, bool kCausal>
using BackwardConfigFor = BackwardConfig<Element, kHeadDim, BackwardTileSize<kHeadDim, kCausal>::kBlockM,
                                         BackwardTileSize<kHeadDim, kCausal>::kBlockN,
                                         BackwardTileSize<kHeadDim, kCausal>::kStages,
                                         BackwardTileSize<kHeadDim, kCausal>::kdQPasses>;

// Bytes of workspace launch_backward<Element, kHeadDim>(problem, ...) needs.
template <class Element, int kHeadDim>
size_t backward_workspace_bytes(BackwardProblem const& problem) {
  size_t bytes = 0;
  const int block_m =
      problem.causal ? BackwardTileSize<kHeadDim, true>::kBlockM : BackwardTileSize<kHeadDim, false>::kBlockM;
  BackwardWorkspace::make(problem, block_m, nullptr, &bytes);
  return bytes;
}

template <class Config, bool kCausal>
Status launch_backward_main(BackwardProblem const& problem, BackwardWorkspace const& workspace, int num_n_blocks,
                            cudaStream_t stream) {
  using Mainloop = BackwardMainloop<Config, kCausal>;
  using Epilogue = BackwardEpilogue<Config>;
  using Kernel = BackwardKernel<Mainloop, Epilogue>;
  DeviceShape device;
  if (Status status = current_device_shape(device); status != Status::kOk) return status;
  // What the key blocks of one (kv head, sequence) share: the query rows of its heads, Q and dO with
  // their LSE and D, and their float32 dQ accumulator.
  using Element = typename Config::Element;
  const int64_t row_bytes =
      problem.head_dim * int64_t(2 * sizeof(Element) + sizeof(float)) + 2 * int64_t(sizeof(float));
  const int64_t pair_bytes = problem.heads_per_kv_head() * problem.seqlens.seqlen_q * row_bytes;
  const TileOrder order =
      TileOrder::make(num_n_blocks, int(problem.heads_kv), int(problem.seqlens.batch), pair_bytes,
                      backward_section_bytes(device.l2_bytes), kCausal ? LongestBlock::kFirst : LongestBlock::kNone);
  typename Kernel::Params params{Mainloop::to_params(problem, workspace, order), Epilogue::to_params(problem)};
  if (!Mainloop::descriptors_encoded(params.mainloop)) {  // the backstop of tma.hpp's encoded()
    return set_error(Status::kInternal, "sm90 backward: the driver refused a TMA descriptor (cuTensorMapEncodeTiled) "
                                        "for arguments that passed validation; please report it with the shapes and strides");
  }
  auto* kernel = &backward_kernel<Kernel>;
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Kernel::kSharedMemoryBytes);
  if (error != cudaSuccess) return cuda_failure("backward cudaFuncSetAttribute", error);
  kernel<<<dim3(unsigned(order.total_tiles)), Kernel::kNumThreads, Kernel::kSharedMemoryBytes, stream>>>(params);
  error = cudaGetLastError();
  return error == cudaSuccess ? Status::kOk : cuda_failure("backward kernel launch", error);
}

// The three kernels for the tiles of Config and the mask kCausal.
template <class Config, bool kCausal>
Status launch_backward_kernels(BackwardProblem const& problem, void* workspace_memory) {
  using Element = typename Config::Element;
  constexpr int kHeadDim = Config::kHeadDim;
  constexpr int kBlockM = Config::kBlockM;
  size_t bytes = 0;
  const BackwardWorkspace workspace = BackwardWorkspace::make(problem, kBlockM, workspace_memory, &bytes);
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);

  // One-dimensional grids, the block index fastest: (query block, head, sequence) for the row
  // kernels, (key block, kv head, sequence) for the main kernel.
  const SeqlenLayout& seqlens = problem.seqlens;
  const int64_t num_m_blocks = (seqlens.seqlen_q + kBlockM - 1) / kBlockM;
  const int64_t num_n_blocks = (seqlens.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  const int64_t row_ctas = num_m_blocks * problem.heads_q * seqlens.batch;
  const int64_t main_ctas = num_n_blocks * problem.heads_kv * seqlens.batch;
  if (row_ctas > INT_MAX || main_ctas > INT_MAX) {
    return set_error(Status::kUnsupported, "sm90 backward: more than 2^31 - 1 blocks of (rows, heads, batch)");
  }
  if (row_ctas == 0) return Status::kOk;

  using Preprocess = BackwardPreprocess<Element, kHeadDim, kBlockM>;
  typename Preprocess::Params pre{static_cast<Element const*>(problem.o), static_cast<Element const*>(problem.d_o),
                                  problem.lse, problem.o_stride, problem.d_o_stride, seqlens,
                                  int(problem.heads_q), int(num_m_blocks), workspace};
  backward_rows_kernel<Preprocess><<<dim3(unsigned(row_ctas)), Preprocess::kThreads, 0, stream>>>(pre);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_failure("backward preprocess launch", error);

  if (main_ctas > 0) {
    const int n_blocks = int(num_n_blocks);
    if (Status status = launch_backward_main<Config, kCausal>(problem, workspace, n_blocks, stream);
        status != Status::kOk) {
      return status;
    }
  }

  using Postprocess = BackwardPostprocess<Config>;
  typename Postprocess::Params post{static_cast<Element*>(problem.dq), problem.dq_stride, seqlens,
                                    int(problem.heads_q), int(num_m_blocks), problem.softmax_scale, workspace};
  backward_rows_kernel<Postprocess><<<dim3(unsigned(row_ctas)), Postprocess::kThreads, 0, stream>>>(post);
  error = cudaGetLastError();
  return error == cudaSuccess ? Status::kOk : cuda_failure("backward postprocess launch", error);
}

// `workspace`: at least backward_workspace_bytes<Element, kHeadDim>(problem) bytes of device memory,
// in any state: the preprocess initialises what the main kernel reads.
template <class Element, int kHeadDim>
Status launch_backward(BackwardProblem const& problem, void* workspace_memory) {
  return problem.causal
             ? launch_backward_kernels<BackwardConfigFor<Element, kHeadDim, true>, true>(problem, workspace_memory)
             : launch_backward_kernels<BackwardConfigFor<Element, kHeadDim, false>, false>(problem, workspace_memory);
}

}  // namespace hopattn::sm90
