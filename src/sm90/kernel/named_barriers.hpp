// The forward kernel's named barriers (bar.sync ids), one list so that no two uses collide.
// cutlass::arch::NamedBarrier adds the offset past the ids CUTLASS reserves for itself.
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90 {

enum class ForwardBarrier : uint32_t {
  // Consumers -> producer warp: the tile no longer reads Q's buffer (every Q K^T retired, or with
  // Q in registers, the first), so the next tile's Q may load.
  kQueryEmpty = 0,
  // Among consumers, where O is staged in V's (or V^T's) buffer (not Config::kOwnOutputBuffer):
  // every P V of the tile has retired, so O may overwrite it.
  kOutputBufferFree = 1,
  // Among consumers, where O is staged in V's (or V^T's) buffer: O is in shared memory and visible
  // to the TMA engine.
  kOutputStaged = 2,
  // Pingpong: consumer warpgroup w issues its GEMMs after kWarpgroupTurn + w completes.
  kWarpgroupTurn = 3,  // ids 3, 4, 5 for up to three consumer warpgroups
};

__device__ __forceinline__ void barrier_sync(uint32_t threads, ForwardBarrier id, int offset = 0) {
  cutlass::arch::NamedBarrier::sync(threads, uint32_t(id) + offset);
}

__device__ __forceinline__ void barrier_arrive(uint32_t threads, ForwardBarrier id, int offset = 0) {
  cutlass::arch::NamedBarrier::arrive(threads, uint32_t(id) + offset);
}

}  // namespace hopattn::sm90
