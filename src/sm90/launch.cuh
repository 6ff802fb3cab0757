// Host side of one (dtype, head_dim) instantiation: builds the TMA descriptors, sizes shared memory
// and launches the causal or non-causal kernel on the problem's stream.
#pragma once

#include <string>

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "core/problem.hpp"
#include "sm90/kernel/config.hpp"
#include "sm90/kernel/forward_kernel.cuh"
#include "sm90/kernel/tile_size.hpp"

namespace hopattn::sm90 {

inline hopattn_status cuda_failure(const char* what, cudaError_t error) {
  return set_error(HOPATTN_ERROR_CUDA,
                   std::string("sm90: ") + what + " failed: " + cudaGetErrorString(error));
}

template <class Config, bool kCausal>
hopattn_status launch_config(ForwardParams<Config> const& params, cudaStream_t stream) {
  auto* kernel = &forward_kernel<Config, kCausal>;
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Config::kSharedMemoryBytes);
  if (error != cudaSuccess) return cuda_failure("cudaFuncSetAttribute", error);
  const dim3 grid = LinearTileScheduler<kCausal>::grid(params.num_m_blocks, params.heads_q, params.batch);
  kernel<<<grid, Config::kNumThreads, Config::kSharedMemoryBytes, stream>>>(params);
  error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_failure("forward kernel launch", error);
  return HOPATTN_OK;
}

template <class Element, int kHeadDim>
hopattn_status launch_forward(AttentionProblem const& problem) {
  using Tiles = TileSize<kHeadDim>;
  using Config = ForwardConfig<Element, kHeadDim, Tiles::kBlockM, Tiles::kBlockN, Tiles::kStages>;
  const auto params = make_forward_params<Config>(problem);
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  return problem.causal ? launch_config<Config, true>(params, stream)
                        : launch_config<Config, false>(params, stream);
}

}  // namespace hopattn::sm90
