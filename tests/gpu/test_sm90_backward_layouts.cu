// The backward's layouts on the host, no GPU needed, for the tile of every backward head_dim and mask:
// - dS (sm90/kernel/matrix_stores.hpp, kernel/backward/config.hpp): every value of every consumer
//   thread's dS^T fragment, stored by transposing stmatrix from BufferedMatrixStores' addresses,
//   lands at dS(query, key) of the layout dQ and dK read, once, in each buffer; and the one-address
//   form's constant offsets equal CuTe's own addresses.
// - dQ's accumulator (Config::dq_accum_offset): the value the mainloop stores for a (query row,
//   head_dim column), pass by pass, is the one the postprocess reads back for it, and every slot
//   of the block's accumulator holds one value.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "sm90/launch_backward.cuh"

namespace hopattn::sm90 {
namespace {

// Check::run<Config>() for the backward config of every head_dim of src/sm90/instantiations/
// generate.py, with each mask.
template <class Check, int kHeadDim, bool kCausal>
void run_on_tile() {
  SCOPED_TRACE("head_dim " + std::to_string(kHeadDim) + (kCausal ? ", causal" : ""));
  Check::template run<BackwardConfigFor<cutlass::bfloat16_t, kHeadDim, kCausal>>();
}
template <class Check, int... kHeadDims>
void run_on_every_tile_of(std::integer_sequence<int, kHeadDims...>) {
  (run_on_tile<Check, kHeadDims, false>(), ...);
  (run_on_tile<Check, kHeadDims, true>(), ...);
}
template <class Check>
void run_on_every_backward_tile() {
  run_on_every_tile_of<Check>(std::integer_sequence<int, 64, 96, 128, 192, 256>{});
}

// Where the consumers' transposing stores put dS.
struct DsStores {
  template <class Config>
  static void run() {
    using Element = typename Config::Element;
    constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
    typename Config::TiledMmaSdP mma_sdp;
    // Never dereferenced: only addresses are compared. 1024-byte aligned, as the kernel's buffers.
    Element* const base = reinterpret_cast<Element*>(uintptr_t(1) << 24);
    Tensor sdSt = make_tensor(make_smem_ptr(base), typename Config::SmemLayoutdSt{});
    Tensor sdS = make_tensor(make_smem_ptr(base), typename Config::SmemLayoutdS{});
    auto ds_copy = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, mma_sdp);  // the mainloop's
    // The mainloop's make_buffered_matrix_stores type.
    using Stores = typename BufferedMatrixStoresFor<decltype(ds_copy.get_thread_slice(0).partition_D(sdSt))>::type;
    constexpr int kStores = Stores::kStores;
    EXPECT_TRUE(Stores::kOneAddress) << "a warp's stores no longer lie whole swizzle periods apart";

    for (int buffer = 0; buffer < Config::kdSBuffers; ++buffer) {
      std::map<uintptr_t, int> writes;
      for (int warp = 0; warp < Config::kNumMmaThreads / 32; ++warp) {
        uintptr_t address[32][kStores];  // each lane's, per store, from BufferedMatrixStores::address
        for (int lane = 0; lane < 32; ++lane) {
          auto partition = ds_copy.get_thread_slice(warp * 32 + lane).partition_D(sdSt);
          Tensor buffer0 = partition(_, _, _, 0);
          Tensor this_buffer = partition(_, _, _, buffer);
          Stores stores;  // the device constructor's `first`, from the host's addresses (below 2^32)
          for (int i = 0; i < Stores::kFirstAddresses; ++i) {
            stores.first[i] = uint32_t(reinterpret_cast<uintptr_t>(&buffer0(8 * i)));
          }
          for (int i = 0; i < kStores; ++i) {
            address[lane][i] = stores.address(i, buffer * Stores::kBufferBytes);
            ASSERT_EQ(address[lane][i], reinterpret_cast<uintptr_t>(&this_buffer(8 * i)))
                << "thread " << warp * 32 + lane << ", store " << i;
          }
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int thread = warp * 32 + lane;
          Tensor coords = mma_sdp.get_thread_slice(thread).partition_C(
              make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
          // Each fragment value tagged with its index, read back in the order the stores take them.
          Tensor tags = make_tensor<int>(partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{}).layout());
          for (int k = 0; k < size(tags); ++k) tags(k) = k;
          Tensor store_order = ds_copy.get_thread_slice(thread).retile_S(tags);
          ASSERT_EQ(int(size(store_order)), 8 * kStores);
          for (int i = 0; i < kStores; ++i) {
            for (int matrix = 0; matrix < 4; ++matrix) {
              for (int half = 0; half < 2; ++half) {
                const auto coord = coords(store_order(8 * i + 2 * matrix + half));
                const int key = get<0>(coord), query = get<1>(coord);
                // stmatrix .trans: this lane's element (row lane / 4, column 2 (lane % 4) + half) of
                // the matrix goes to its row 2 (lane % 4) + half, whose address lane 8 matrix + that
                // row gives, at element lane / 4.
                const int row = 2 * (lane % 4) + half;
                const uintptr_t stored = address[8 * matrix + row][i] + sizeof(Element) * (lane / 4);
                ASSERT_EQ(stored, reinterpret_cast<uintptr_t>(&sdS(query, key, buffer)))
                    << "thread " << thread << ", store " << i << ", key " << key << ", query " << query;
                ++writes[stored];
              }
            }
          }
        }
      }
      EXPECT_EQ(writes.size(), size_t(kBlockM) * kBlockN) << "buffer " << buffer;
      for (auto const& [stored, count] : writes) ASSERT_EQ(count, 1) << "buffer " << buffer;
    }
  }
};

// What the mainloop stores of dQ against what the postprocess reads back.
struct DqAccumulator {
  template <class Config>
  static void run() {
    constexpr int kHeadDim = Config::kHeadDim, kBlockM = Config::kBlockM, kPassColumns = Config::kdQPassColumns;
    typename Config::TiledMmadQ mma_dq;
    // The accumulator slot each (row, column) of the block is stored to by the mainloop.
    std::map<std::pair<int, int>, int> stored;
    std::map<int, int> slot_writes;
    for (int thread = 0; thread < Config::kNumMmaThreads; ++thread) {
      // The mainloop: pass p's fragment over dQPassShape, its columns p * kPassColumns on.
      Tensor pass_coords =
          mma_dq.get_thread_slice(thread).partition_C(make_identity_tensor(typename Config::dQPassShape{}));
      constexpr int kPassValues = decltype(size(pass_coords))::value;
      for (int pass = 0; pass < Config::kdQPasses; ++pass) {
        for (int i = 0; i < kPassValues; ++i) {
          const auto [row, column] = Config::dq_row_column(pass_coords(i));
          ASSERT_TRUE(row < kBlockM && column < kPassColumns) << "(row, column) outside the pass's tile";
          const int slot = Config::dq_accum_offset(thread, pass * kPassValues + i);
          ASSERT_TRUE(stored.emplace(std::make_pair(int(row), int(column) + pass * kPassColumns), slot).second)
              << "thread " << thread << " pass " << pass << " value " << i << ": (row, column) stored twice";
          ++slot_writes[slot];
        }
      }
    }
    ASSERT_EQ(stored.size(), size_t(kBlockM) * kHeadDim);
    ASSERT_EQ(slot_writes.size(), size_t(kBlockM) * kHeadDim);
    for (auto const& [slot, count] : slot_writes) {
      ASSERT_TRUE(slot >= 0 && slot < kBlockM * kHeadDim && count == 1) << "slot " << slot;
    }
    // The postprocess: the whole block's fragment, read back from the same slots.
    for (int thread = 0; thread < Config::kNumMmaThreads; ++thread) {
      Tensor coords =
          mma_dq.get_thread_slice(thread).partition_C(make_identity_tensor(typename Config::dQBlockShape{}));
      for (int i = 0; i < Config::kdQAccumPerThread; ++i) {
        const auto [row, column] = Config::dq_row_column(coords(i));
        ASSERT_EQ(stored.at(std::make_pair(int(row), int(column))), Config::dq_accum_offset(thread, i))
            << "thread " << thread << " value " << i << " (row " << row << ", column " << column << ")";
      }
    }
  }
};

TEST(Sm90BackwardLayouts, DsStoresLandWhereDqAndDkReadThem) { run_on_every_backward_tile<DsStores>(); }

TEST(Sm90BackwardLayouts, DqAccumulatorReadsBackWhatTheMainloopStored) {
  run_on_every_backward_tile<DqAccumulator>();
}

}  // namespace
}  // namespace hopattn::sm90
