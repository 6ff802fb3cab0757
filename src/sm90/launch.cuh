// Host side of one (dtype, head_dim) instantiation, 16-bit or FP8 inputs: composes the kernel from
// its collectives, builds their parameters, sizes the persistent grid and launches the causal or
// non-causal kernel on the problem's stream.
#pragma once

#include <string>

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "core/problem.hpp"
#include "sm90/device_check.hpp"
#include "sm90/dispatch_common.hpp"
#include "sm90/kernel/config.hpp"
#include "sm90/kernel/epilogue.cuh"
#include "sm90/kernel/forward_kernel.cuh"
#include "sm90/kernel/mainloop.cuh"
#include "sm90/kernel/tile_scheduler.cuh"
#include "sm90/kernel/tile_size.hpp"
#include "sm90/kernel/timeline.hpp"

namespace hopattn::sm90 {

// Equal tiles (fixed lengths, no mask) are dealt out statically. Tiles of unequal length are drawn
// dynamically: causal ones, and those of variable-length batches, whose tiles see their own
// sequence's keys and whose grid has empty tiles past each shorter sequence's end.
inline bool equal_tiles(ForwardProblem const& problem) { return !problem.causal && !problem.seqlens.varlen(); }

// `Problem`: ForwardProblem, or Fp8ForwardProblem for a Config of FP8 inputs.
template <class Config, bool kCausal, class Scheduler, class Problem>
Status launch_forward_kernel(Problem const& problem, DeviceShape const& device, void* workspace) {
  using Mainloop = ForwardMainloop<Config, kCausal>;
  using Epilogue = ForwardEpilogue<Config>;
  using Kernel = ForwardKernel<Mainloop, Epilogue, Scheduler>;
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);

  typename Kernel::Params params;
  params.mainloop = Mainloop::to_params(problem);
  params.epilogue = Epilogue::to_params(problem);
  if (!Mainloop::descriptors_encoded(params.mainloop) || !Epilogue::descriptors_encoded(params.epilogue)) {
    return set_error(Status::kInternal, "sm90: the driver refused a TMA descriptor (cuTensorMapEncodeTiled) for "
                                        "arguments that passed validation; please report it with the shapes and strides");
  }
  const int num_m_blocks = int(ceil_div(problem.seqlens.seqlen_q, int64_t(Config::kBlockM)));
  // K and V of one head, read by every query block of it; GQA heads of a group share them, which
  // either order keeps adjacent.
  const int64_t kv_bytes = 2 * problem.seqlens.seqlen_k * problem.head_dim *
                           int64_t(sizeof(typename Config::Element)) / problem.heads_per_kv_head();
  const TileOrder order =
      TileOrder::make(num_m_blocks, int(problem.heads_q), int(problem.seqlens.batch), kv_bytes,
                      forward_section_bytes(device.l2_bytes), kCausal ? LongestBlock::kLast : LongestBlock::kNone);
  static_cast<Timeline::Params&>(params) = Timeline::to_params(workspace);
  void* scheduler_workspace = Timeline::kernel_workspace(workspace);
  params.scheduler = Scheduler::to_params(order, scheduler_workspace);

  cudaError_t error;
  if constexpr (Scheduler::kWorkspaceBytes > 0) {
    error = cudaMemsetAsync(scheduler_workspace, 0, Scheduler::kWorkspaceBytes, stream);
    if (error != cudaSuccess) return cuda_failure("cudaMemsetAsync of the tile counter", error);
  }
  auto* kernel = &device_kernel<Kernel>;
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSharedMemoryBytes);
  if (error != cudaSuccess) return cuda_failure("cudaFuncSetAttribute", error);
  kernel<<<persistent_grid(order, device.sm_count), Kernel::kNumThreads, Kernel::kSharedMemoryBytes, stream>>>(params);
  error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_failure("forward kernel launch", error);
  return Status::kOk;
}

template <class Config, class Problem>
Status launch_forward_masks(Problem const& problem, DeviceShape const& device, void* workspace) {
  if (problem.causal) return launch_forward_kernel<Config, true, DynamicTileScheduler>(problem, device, workspace);
  return equal_tiles(problem) ? launch_forward_kernel<Config, false, StaticTileScheduler>(problem, device, workspace)
                              : launch_forward_kernel<Config, false, DynamicTileScheduler>(problem, device, workspace);
}

template <class Element, class ElementOut, int kHeadDim, class Tiles, bool kVTransposedInput>
using TileConfig = ForwardConfig<Element, ElementOut, kHeadDim, Tiles::kBlockM, Tiles::kBlockN, Tiles::kStages,
                                 kVTransposedInput>;

// The tile of the head_dim and V layout, or its shorter one where that wastes less (tile_size.hpp).
template <class Element, class ElementOut, int kHeadDim, bool kVTransposedInput, class Problem>
Status launch_forward_sized(Problem const& problem, DeviceShape const& device, void* workspace) {
  constexpr bool kTransposesV = kernel_transposes_v(int(sizeof(Element)), kVTransposedInput);
  using Tiles = TileSize<kHeadDim, int(sizeof(Element)), kTransposesV>;
  using ShortTiles = ShortTileSize<kHeadDim, int(sizeof(Element)), kTransposesV>;
  if constexpr (ShortTiles::kExists) {
    if (takes_short_tile<Tiles, ShortTiles>(problem.seqlens.varlen(), problem.causal, problem.seqlens.seqlen_q,
                                            problem.seqlens.seqlen_k)) {
      return launch_forward_masks<TileConfig<Element, ElementOut, kHeadDim, ShortTiles, kVTransposedInput>>(
          problem, device, workspace);
    }
  }
  return launch_forward_masks<TileConfig<Element, ElementOut, kHeadDim, Tiles, kVTransposedInput>>(problem, device,
                                                                                                   workspace);
}

// FP8 takes V in either layout (Fp8ForwardProblem::v_layout), each with kernels of its own.
template <class Element, class ElementOut, int kHeadDim, class Problem>
Status launch_forward_config(Problem const& problem, void* workspace) {
  DeviceShape device;
  if (Status status = current_device_shape(device); status != Status::kOk) return status;
  if constexpr (sizeof(Element) == 1) {
    if (problem.v_layout == Fp8Layout::kVTransposed) {
      return launch_forward_sized<Element, ElementOut, kHeadDim, true>(problem, device, workspace);
    }
  }
  return launch_forward_sized<Element, ElementOut, kHeadDim, false>(problem, device, workspace);
}

// Bytes of workspace launch_forward<Element, kHeadDim>(problem, ...) needs (the dynamic
// scheduler's tile counter, after the timeline's record in a diagnostic build); the same for
// launch_forward_fp8.
template <class Element, int kHeadDim>
size_t forward_workspace_bytes(ForwardProblem const& problem) {
  return Timeline::kWorkspaceBytes +
         (equal_tiles(problem) ? StaticTileScheduler::kWorkspaceBytes : DynamicTileScheduler::kWorkspaceBytes);
}

// `workspace`: at least forward_workspace_bytes<Element, kHeadDim>(problem) bytes of device memory.
template <class Element, int kHeadDim>
Status launch_forward(ForwardProblem const& problem, void* workspace) {
  return launch_forward_config<Element, Element, kHeadDim>(problem, workspace);
}

// FP8 inputs, O of type ElementOut.
template <class ElementOut, int kHeadDim>
size_t forward_fp8_workspace_bytes(Fp8ForwardProblem const& problem) {
  return forward_workspace_bytes<ElementOut, kHeadDim>(problem);
}

template <class ElementOut, int kHeadDim>
Status launch_forward_fp8(Fp8ForwardProblem const& problem, void* workspace) {
  return launch_forward_config<cutlass::float_e4m3_t, ElementOut, kHeadDim>(problem, workspace);
}

}  // namespace hopattn::sm90
