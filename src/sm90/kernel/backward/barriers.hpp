// The backward kernel's named barriers (bar.sync ids), one list so that no two uses collide. Its
// own kernel: the ids may repeat the forward's. cutlass::arch::NamedBarrier adds the offset past
// the ids CUTLASS reserves for itself.
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90 {

enum class BackwardBarrier : uint32_t {
  // Among consumers, once per step: this step's dS (and with kSplitHeadDim P^T) is in shared memory
  // (visible to WGMMA), and every warpgroup's products of the step before last, which read the
  // other buffer, retired.
  kdSReady = 0,
  // Among consumers, in the epilogue: every dK / dV product (which read Q and dO) retired, so the
  // Q and dO buffers may stage dK and dV; then: the staged rows are in shared memory.
  kdKVStaging = 1,
};
// The dQ handoff between the consumer warpgroups and the thread that reduces dQ into global memory
// goes through mbarriers (BackwardMainloop::SharedStorage::dq_full / dq_empty), not named barriers.

__device__ __forceinline__ void barrier_sync(uint32_t threads, BackwardBarrier id) {
  cutlass::arch::NamedBarrier::sync(threads, uint32_t(id));
}

}  // namespace hopattn::sm90
