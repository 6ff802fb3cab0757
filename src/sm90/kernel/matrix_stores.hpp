// stmatrix from 32-bit shared-memory addresses, plain (the FP8 V transpose) or transposing (the
// backward's dS^T and P^T), and a thread's transposing stores into the buffers of a swizzled tile
// with those addresses taken once.
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
// The same, each matrix transposed.
__device__ __forceinline__ void store_matrix_x4_transposed(uint32_t address, uint32_t a, uint32_t b, uint32_t c,
                                                           uint32_t d) {
  asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(a),
               "r"(b), "r"(c), "r"(d));
}

// A thread's transposing stmatrix x4 stores of a fragment into buffer `b` of a swizzled shared-memory
// tile (the backward's dS^T and P^T, held keys x queries, into tiles with the keys contiguous).
// CuTe's copy into partition(_, _, _, b) builds each address anew at every call, as a 64-bit generic
// pointer with the swizzle applied (in the backward's step about 35 instructions). Addresses a whole
// number of swizzle periods (at most 1024 bytes: bits 4-9 decide the swizzle) apart swizzle alike.
// So buffer b's addresses are buffer 0's, taken once as 32-bit shared addresses, plus b buffers;
// and where the tile puts a thread's stores whole periods apart as well (16 rows of a tile with
// 128-byte rows), the stores take one address plus constant offsets, and hold one register.
//
// A thread's values in a partition, read in order (the copy's value mode first, then its tiles),
// come 16 bytes to a store, as CuTe's copy hands them to the atom: store i takes values [8i, 8i + 8)
// of a 16-bit fragment.
template <int kStores_, uint32_t kBufferBytes_, class StoreLayout>
struct BufferedMatrixStores {
  static constexpr int kStores = kStores_;
  static constexpr uint32_t kBufferBytes = kBufferBytes_;
  static constexpr uint32_t kSwizzlePeriod = 1024;
  static_assert(kBufferBytes % kSwizzlePeriod == 0, "buffers a whole number of swizzle periods apart");
  // Bytes from store 0 to store i, before the swizzle.
  static constexpr uint32_t unswizzled_distance(int i) {
    return uint32_t(StoreLayout{}(8 * i) - StoreLayout{}(0)) * 2;
  }
  static constexpr bool stores_swizzle_alike() {
    for (int i = 1; i < kStores; ++i)
      if (unswizzled_distance(i) % kSwizzlePeriod != 0) return false;
    return true;
  }
  static constexpr bool kOneAddress = stores_swizzle_alike();
  static constexpr int kFirstAddresses = kOneAddress ? 1 : kStores;
  // Buffer 0's shared addresses of the stores (of store 0 only, with kOneAddress).
  uint32_t first[kFirstAddresses];

  // `partition`: (CPY, CPY_M, CPY_N, buffer) of 16-bit values, a SM90_U16x8_STSM_T copy's partition_D.
  template <class Partition>
  __device__ explicit BufferedMatrixStores(Partition const& partition) {
    Tensor buffer0 = partition(_, _, _, 0);
    CUTE_UNROLL
    for (int i = 0; i < kFirstAddresses; ++i) first[i] = cast_smem_ptr_to_uint(&buffer0(8 * i));
  }
  // With `first` set by the caller (the host tests: shared addresses exist on the device only).
  BufferedMatrixStores() = default;

  CUTE_HOST_DEVICE uint32_t address(int i, uint32_t buffer_offset) const {
    return kOneAddress ? first[0] + buffer_offset + unswizzled_distance(i) : first[i] + buffer_offset;
  }

  // `values`: the fragment as that copy's retile_S gives it.
  template <class Values>
  __device__ void store(Values const& values, int buffer) const {
    Tensor words = recast<uint32_t>(values);
    static_assert(decltype(size(words))::value == 4 * kStores);
    const uint32_t offset = uint32_t(buffer) * kBufferBytes;
    CUTE_UNROLL
    for (int i = 0; i < kStores; ++i) {
      store_matrix_x4_transposed(address(i, offset), words(4 * i), words(4 * i + 1), words(4 * i + 2),
                                 words(4 * i + 3));
    }
  }
};

// The BufferedMatrixStores of a partition type, whose buffers lie a static distance apart.
template <class Partition>
struct BufferedMatrixStoresFor {
  using Element = typename Partition::value_type;
  static_assert(sizeof(Element) == 2, "stmatrix stores 16-bit values");
  using StoreLayout = decltype(declval<Partition>()(_, _, _, 0).layout());
  static_assert(is_static<StoreLayout>::value, "the swizzle is the pointer's: a thread's layout is static");
  static constexpr int kStores = decltype(size(StoreLayout{}))::value / 8;
  static constexpr uint32_t kBufferBytes =
      decltype(layout<3>(declval<Partition>())(Int<1>{}))::value * sizeof(Element);
  using type = BufferedMatrixStores<kStores, kBufferBytes, StoreLayout>;
};

// The stores of `partition` (see BufferedMatrixStores).
template <class Partition>
__device__ auto make_buffered_matrix_stores(Partition const& partition) {
  return typename BufferedMatrixStoresFor<Partition>::type(partition);
}

}  // namespace hopattn::sm90
