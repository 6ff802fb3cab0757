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
  // then that many stamps, each event << 56 | (arg & 0xffff) << 40 | the clock's low 40 bits.
  static constexpr int kHeaderWords = 32;  // 256 bytes, so that what follows keeps the workspace's alignment
  static constexpr int kMaxCtas = 160, kRolesPerCta = 4, kEntries = 16384;
  static constexpr uint64_t kMagic = 0x68746c6e'00000001ull;  // "htln", version 1
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

// What one role stamps. Every thread of the role calls it (the clock read and the count are
// uniform); only the role's first thread writes.
class TimelineRole {
 public:
#ifdef HOPATTN_TIMELINE
  // `tile`: the kernel's block_m, block_n, head_dim and consumer warpgroups, for the header.
  __device__ TimelineRole(Timeline::Params const& params, int role, bool writer, int4 tile)
      : record_(params.timeline_record + Timeline::kHeaderWords +
                (size_t(blockIdx.x) * Timeline::kRolesPerCta + role) * Timeline::kEntries),
        writer_(writer && blockIdx.x < Timeline::kMaxCtas && role < Timeline::kRolesPerCta) {
    if (writer && blockIdx.x == 0 && role == 0) {
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
  __device__ void stamp(TimelineEvent event, int arg = 0) {
    uint64_t clock;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(clock)::"memory");
    if (writer_ && count_ < Timeline::kEntries - 1) {
      record_[1 + count_] = uint64_t(event) << 56 | uint64_t(arg & 0xffff) << 40 | (clock & ((1ull << 40) - 1));
    }
    ++count_;
  }
  // The count, once the role is done (stamps past the capacity are counted, not kept).
  __device__ void finish() const {
    if (writer_) record_[0] = count_ < Timeline::kEntries - 1 ? count_ : Timeline::kEntries - 1;
  }

 private:
  uint64_t* record_;
  bool writer_;
  int count_ = 0;
#else
  __device__ TimelineRole(Timeline::Params const&, int, bool, int4) {}
  __device__ void stamp(TimelineEvent, int = 0) {}
  __device__ void finish() const {}
#endif
};

}  // namespace hopattn::sm90
