// stmatrix from 32-bit shared-memory addresses (the FP8 V transpose, the backward's dS^T and P^T),
// and a thread's stmatrix stores into the buffers of a swizzled tile with those addresses taken once.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

namespace hopattn::sm90 {

using namespace cute;

// Four 8 x 8 matrices of 16-bit values: this lane gives `address`, the start of one 16-byte row.
__device__ __forceinline__ void store_matrix_x4(uint32_t address, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(a), "r"(b),
               "r"(c), "r"(d));
}

// A thread's stmatrix x4 stores of a fragment into buffer `b` of a swizzled shared-memory tile.
// CuTe's copy into partition(_, _, _, b) builds each address anew at every call, as a 64-bit generic
// pointer with the swizzle applied (in the backward's step about 35 instructions). Buffers a whole
// number of swizzle periods apart swizzle alike, so buffer b's addresses are buffer 0's, taken once
// as 32-bit shared addresses, plus b buffers.
//
// A thread's values in a partition, read in order (the copy's value mode first, then its tiles),
// come 16 bytes to a store, as CuTe's copy hands them to the atom: store i takes values [8i, 8i + 8)
// of a 16-bit fragment.
template <int kStores, uint32_t kBufferBytes>
struct BufferedMatrixStores {
  static_assert(kBufferBytes % 1024 == 0, "buffers a whole number of swizzle periods (at most 1024 bytes) apart");
  uint32_t first[kStores];

  // `partition`: (CPY, CPY_M, CPY_N, buffer) of 16-bit values, a SM90_U32x4_STSM_N copy's partition_D.
  template <class Partition>
  __device__ explicit BufferedMatrixStores(Partition const& partition) {
    Tensor buffer0 = partition(_, _, _, 0);
    CUTE_UNROLL
    for (int i = 0; i < kStores; ++i) first[i] = cast_smem_ptr_to_uint(&buffer0(8 * i));
  }

  // `values`: the fragment as that copy's retile_S gives it.
  template <class Values>
  __device__ void store(Values const& values, int buffer) const {
    Tensor words = recast<uint32_t>(values);
    static_assert(decltype(size(words))::value == 4 * kStores);
    const uint32_t offset = uint32_t(buffer) * kBufferBytes;
    CUTE_UNROLL
    for (int i = 0; i < kStores; ++i) {
      store_matrix_x4(first[i] + offset, words(4 * i), words(4 * i + 1), words(4 * i + 2), words(4 * i + 3));
    }
  }
};

// The stores of `partition` (see BufferedMatrixStores), whose buffers lie a static distance apart.
template <class Partition>
__device__ auto make_buffered_matrix_stores(Partition const& partition) {
  using Element = typename Partition::value_type;
  static_assert(sizeof(Element) == 2, "stmatrix stores 16-bit values");
  constexpr int kStores = decltype(size(partition(_, _, _, 0)))::value / 8;
  constexpr uint32_t kBufferBytes = decltype(layout<3>(partition)(Int<1>{}))::value * sizeof(Element);
  return BufferedMatrixStores<kStores, kBufferBytes>(partition);
}

}  // namespace hopattn::sm90
