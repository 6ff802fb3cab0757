// A warpgroup that keeps the SM's tensor cores busy beside another warpgroup's measured work
// (pipe_rates.cu, exp_block_rate.cu): batches of eight HGMMA 64x128x16 (Q K^T's shape at head_dim
// 128) on the zeros at the start of shared memory, from shared memory (SS, as Q K^T) or with A in
// registers (RS, as P V), each batch waited for, until the measured warpgroup raises a flag.
#pragma once

#include <cstdint>
#include <utility>

#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

namespace gemm_neighbour {

constexpr int kOperandBytes = 65536;  // A, then B: zeros
constexpr int kSharedBytes = kOperandBytes + 128;  // and the measured warpgroup's done flag after them
using SsMma = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
using RsMma = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;

template <size_t... I>
__device__ __forceinline__ void ss_mma(uint64_t a, uint64_t b, float (&accumulator)[64], std::index_sequence<I...>) {
  SsMma::fma(a, b, accumulator[I]..., cute::SM90::GMMA::ScaleOut::One);
}
template <size_t... I>
__device__ __forceinline__ void rs_mma(uint32_t const (&a)[4], uint64_t b, float (&accumulator)[64],
                                       std::index_sequence<I...>) {
  RsMma::fma(a[0], a[1], a[2], a[3], b, accumulator[I]..., cute::SM90::GMMA::ScaleOut::One);
}

__device__ inline uint64_t k_major_sw128_descriptor(uint32_t smem_address) {
  cute::GmmaDescriptor desc;
  desc.desc_ = 0;
  desc.bitfield.start_address_ = smem_address >> 4;
  desc.bitfield.leading_byte_offset_ = 1;
  desc.bitfield.stride_byte_offset_ = 1024 >> 4;  // eight 128-byte rows
  desc.bitfield.layout_type_ = 1;                 // 128-byte swizzle
  return desc.desc_;
}

// Run by all 128 threads of one warpgroup: batches until `done` is set; returns how many ran, and
// in `checksum` the thread's accumulator sum (for the caller to store, keeping the GEMMs live).
template <bool kAInRegisters>
__device__ long long issue_batches_until(volatile int const* done, char const* smem, float& checksum) {
  float accumulator[64] = {};
  const uint32_t a_registers[4] = {0u, 0u, 0u, 0u};
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem)), b = a + kOperandBytes / 2;
  long long batches = 0;
  // The four warps must agree on the last batch (an HGMMA some of them skip is an illegal
  // instruction): the flag is read by each and OR-reduced over the warpgroup.
  auto all_see_done = [&] {
    int seen;
    asm volatile("{ .reg .pred seen, any; setp.ne.s32 seen, %1, 0; bar.red.or.pred any, 2, 128, seen;"
                 " selp.s32 %0, 1, 0, any; }" : "=r"(seen) : "r"(*done));
    return seen != 0;
  };
  while (!all_see_done()) {
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if constexpr (kAInRegisters) {
        rs_mma(a_registers, k_major_sw128_descriptor(b + 32 * k), accumulator, std::make_index_sequence<64>{});
      } else {
        ss_mma(k_major_sw128_descriptor(a + 32 * k), k_major_sw128_descriptor(b + 32 * k), accumulator,
               std::make_index_sequence<64>{});
      }
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    ++batches;
  }
  checksum = 0.f;
  for (float value : accumulator) checksum += value;
  return batches;
}

__device__ inline volatile int* done_flag(char* smem) { return reinterpret_cast<volatile int*>(smem + kOperandBytes); }

// Run by every thread of a 256-thread block with kSharedBytes of dynamic shared memory: zeroes the
// operands and the flag; warpgroup 0 then issues batches until warpgroup 1 calls finish(), or none
// when `gemms` is false, stores its checksum and batch count, and gets true (it should return);
// warpgroup 1 gets false and runs the measured work.
template <bool kAInRegisters>
__device__ bool run_beside(char* smem, bool gemms, float* sink, long long* batches) {
  for (int i = threadIdx.x; i < kOperandBytes / 4; i += blockDim.x) reinterpret_cast<float*>(smem)[i] = 0.f;
  if (threadIdx.x == 0) *done_flag(smem) = 0;
  __syncthreads();
  if (threadIdx.x >= 128) return false;
  if (gemms) {
    float checksum;
    const long long batch_count = issue_batches_until<kAInRegisters>(done_flag(smem), smem, checksum);
    sink[blockIdx.x * blockDim.x + threadIdx.x] = checksum;
    if (threadIdx.x == 0) batches[blockIdx.x] = batch_count;
  }
  return true;
}

// Warpgroup 1, after its measured work: every one of its warps is done, then the GEMMs may stop.
__device__ inline void finish(char* smem) {
  asm volatile("bar.sync 1, 128;");
  if (threadIdx.x == 128) *done_flag(smem) = 1;
}

}  // namespace gemm_neighbour
