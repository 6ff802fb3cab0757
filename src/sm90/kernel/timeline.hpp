// A diagnostic build's record of when each role of the forward kernel reaches its phases. With
// HOPATTN_TIMELINE defined (the CMake option of that name, off in every normal build), one thread
// of each role (the producer warp, each consumer warpgroup) stamps the SM's clock at the points
// named below into the front of the workspace, and bench/timeline.py reads and draws them: when
// the tensor cores wait, and for what. Without it the record has no bytes, a stamp compiles to
// nothing and the kernels' PTX is that of a build without this header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hopattn::sm90 {

// The points a role stamps (bench/timeline.py reads the names and values from this list).
enum class TimelineEvent : uint32_t {
  kTileBegin = 1,  // a role starts a tile (arg: the tile's index)
  kQueryReady,     // consumer: the tile's Q has landed
  kStepBegin,      // consumer: a key step starts (arg: its key block)
  kInputsReady,    // consumer: the step's K and V have landed
  kTurn,           // consumer: the pingpong turn is this warpgroup's
  kIssued,         // consumer: the step's S and P V are issued and the turn passed on
  kScoresDone,     // consumer: S has retired (the first block's too)
  kSoftmaxDone,    // consumer: the row maxima, the exponentials and the row sums are done
  kOutputDone,     // consumer: the step's P V has retired
  kMainloopDone,   // consumer: the tile's last P V has retired and O is normalised
  kEpilogueDone,   // consumer: O and the LSE are handed to their stores
  kLoadK,          // producer: a K slot was free and its load is issued (arg: the key block)
  kLoadV,          // producer: likewise V
  kLoadQ,          // producer: Q's buffer was free and its load is issued
  kMaximaDone,     // consumer: the row maxima are known; the exponentials and sums follow
};

struct Timeline {
#ifdef HOPATTN_TIMELINE
  static constexpr bool kEnabled = true;
#else
  static constexpr bool kEnabled = false;
#endif
  // The record: a header of kHeaderWords (kMagic, kRolesPerCta, kEntries, the grid's CTAs, then the
  // tile's query rows, its keys per step, head_dim and the consumer warpgroups), then
  // kEntries words per CTA and role (role 0 the producer warp, 1.. the consumer warpgroups): a count,
  // then that many stamps, each the 32-bit clock in its low word and event << 24 | (arg & 0xffff)
  // in its high word.
  static constexpr int kHeaderWords = 32;  // 256 bytes, so that what follows keeps the workspace's alignment
  static constexpr int kMaxCtas = 160, kRolesPerCta = 4, kEntries = 16384;
  static constexpr uint64_t kMagic = 0x68746c6e'00000002ull;  // "htln", version 2
  static constexpr size_t kWorkspaceBytes =
      kEnabled ? (kHeaderWords + size_t(kMaxCtas) * kRolesPerCta * kEntries) * sizeof(uint64_t) : 0;

  // The kernel's parameters derive from this (an empty base in a normal build, so that their
  // layout is unchanged).
  struct Params {
#ifdef HOPATTN_TIMELINE
    uint64_t* timeline_record;
#endif
  };
  static Params to_params(void* workspace) {
#ifdef HOPATTN_TIMELINE
    return {static_cast<uint64_t*>(workspace)};
#else
    (void)workspace;
    return {};
#endif
  }
  // The kernel's own workspace, after the record.
  static void* kernel_workspace(void* workspace) {
    return kEnabled ? static_cast<char*>(workspace) + kWorkspaceBytes : workspace;
  }
};

// What one role stamps. Every thread of the role calls it (the clock read and the index are
// uniform); only the role's first thread writes. A stamp is a clock read, a compare, an address and
// a 64-bit store: the writer's state is two indices into the record, and its address is read from
// the kernel's parameters at each stamp (held in registers across the key loop, it cost FP8
// head_dim 256 up to 52 more bytes of spills).
class TimelineRole {
 public:
#ifdef HOPATTN_TIMELINE
  // `tile`: the kernel's block_m, block_n, head_dim and consumer warpgroups, for the header.
  __device__ TimelineRole(Timeline::Params const& params, int role, bool writer, int4 tile) : params_(params) {
    const bool writes = writer && blockIdx.x < Timeline::kMaxCtas && role < Timeline::kRolesPerCta;
    const int base = int(blockIdx.x * Timeline::kRolesPerCta + role) * Timeline::kEntries;
    index_ = writes ? base + 1 : 1;
    end_ = writes ? base + Timeline::kEntries : 0;
    if (writes && blockIdx.x == 0 && role == 0) {
      uint64_t* header = params.timeline_record;
      header[0] = Timeline::kMagic;
      header[1] = Timeline::kRolesPerCta;
      header[2] = Timeline::kEntries;
      header[3] = gridDim.x;
      header[4] = tile.x;
      header[5] = tile.y;
      header[6] = tile.z;
      header[7] = tile.w;
    }
  }
  // Past the slot's last entry the stamps are dropped.
  __device__ void stamp(TimelineEvent event, int arg = 0) {
    uint32_t clock;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(clock));
    if (index_ < end_) {
      reinterpret_cast<uint2*>(params_.timeline_record + Timeline::kHeaderWords)[index_] =
          make_uint2(clock, uint32_t(event) << 24 | (uint32_t(arg) & 0xffff));
    }
    ++index_;
  }
  // The count of stamps kept, once the role is done.
  __device__ void finish() const {
    const int base = end_ - Timeline::kEntries;
    if (end_ > 0) params_.timeline_record[Timeline::kHeaderWords + base] = min(index_, end_) - base - 1;
  }

 private:
  Timeline::Params const& params_;
  int index_;  // the next stamp's word of the record (after the header)
  int end_;    // one past the slot's last word; 0 where the thread does not write
#else
  __device__ TimelineRole(Timeline::Params const&, int, bool, int4) {}
  __device__ void stamp(TimelineEvent, int = 0) {}
  __device__ void finish() const {}
#endif
};

}  // namespace hopattn::sm90
