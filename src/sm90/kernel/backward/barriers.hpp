// The backward kernel's named barriers (bar.sync ids), one list so that no two uses collide. Its
// own kernel: the ids may repeat the forward's. cutlass::arch::NamedBarrier adds the offset past
// the ids CUTLASS reserves for itself.
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::sm90 {

enum class BackwardBarrier : uint32_t {
  // Among consumers, once per step: this step's dS is in shared memory (visible to WGMMA), and
  // every warpgroup's dQ product of the step before last, which read the other dS buffer, retired.
  kdSReady = 0,
  // Among consumers, deterministic runs: the dQ semaphore allows this CTA's adds / they are done.
  kdQTurn = 1,
};

__device__ __forceinline__ void barrier_sync(uint32_t threads, BackwardBarrier id) {
  cutlass::arch::NamedBarrier::sync(threads, uint32_t(id));
}

}  // namespace hopattn::sm90
