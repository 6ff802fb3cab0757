// The TMA descriptor limits of the SM90 backend (sm90/sm90_rules.cpp), without a GPU: through
// validate_forward with faked system
// queries that put every pointer in device memory, and on ForwardProblems directly. No tensor is
// dereferenced: their addresses are far apart and unmapped.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "api/abi.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/kernel/register_split.hpp"
#include "sm90/kernel/tile_size.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {
namespace {

constexpr int64_t kTwoTo40 = int64_t{1} << 40;

hopattn_tensor contiguous(uintptr_t address, int64_t batch, int64_t seqlen, int64_t heads,
                          int64_t head_dim) {
  return {reinterpret_cast<void*>(address), HOPATTN_DTYPE_BFLOAT16, batch, seqlen, heads,
          head_dim, seqlen * heads * head_dim, heads * head_dim, head_dim};
}

class Sm90TmaRules : public ::testing::Test {
 protected:
  void SetUp() override {
    // 2^46 bytes apart: room for strides of 2^40 bytes and more.
    q = contiguous(uintptr_t{1} << 46, 2, 64, 4, 64);
    k = contiguous(uintptr_t{2} << 46, 2, 80, 2, 64);
    v = contiguous(uintptr_t{3} << 46, 2, 80, 2, 64);
    o = contiguous(uintptr_t{4} << 46, 2, 64, 4, 64);
    options = default_forward_options();
    options.backend = HOPATTN_BACKEND_SM90;
  }

  static SystemQueries gpu() {
    SystemQueries queries;
    queries.memory_space_of = [](const void*) { return MemorySpace::Device; };
    queries.sm90_built = [] { return true; };
    queries.sm90_device_available = [] { return true; };
    queries.sm90_supports = [](DType dtype, int64_t head_dim) {
      return dtype != DType::kFloat32 && head_dim == 64;
    };
    queries.sm90_supported_list = [] { return std::string("bfloat16 with head_dim 64"); };
    queries.sm90_forward_workspace_size = [](const ForwardProblem&) { return size_t{0}; };
    return queries;
  }

  hopattn_status validate() {
    clear_error();
    return c_status(validate_forward(&q, &k, &v, &o, nullptr, &options, gpu(), call));
  }

  void expect_accepted() { ASSERT_EQ(validate(), HOPATTN_OK) << last_error(); }

  void expect_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  hopattn_tensor q{}, k{}, v{}, o{};
  hopattn_forward_options options{};
  ForwardCall call;
};

// What cuTensorMapEncodeTiled asks of the global part of a descriptor: address 16-byte aligned,
// every stride a multiple of 16 bytes in (0, 2^40), every dimension in [1, 2^32].
void expect_encodable(const ForwardProblem& launched) {
  const int64_t element = element_size(launched.dtype);
  const int64_t tensor_batch = launched.seqlens.varlen() ? 1 : launched.seqlens.batch;
  struct Tensor {
    const char* name;
    const void* data;
    Strides stride;
    int64_t rows, heads;
  };
  const Tensor tensors[] = {
      {"q", launched.q, launched.q_stride, launched.seqlens.total_q, launched.heads_q},
      {"k", launched.k, launched.k_stride, launched.seqlens.total_k, launched.heads_kv},
      {"v", launched.v, launched.v_stride, launched.seqlens.total_k, launched.heads_kv},
      {"o", launched.o, launched.o_stride, launched.seqlens.total_q, launched.heads_q}};
  for (const Tensor& t : tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 16, 0u);
    for (int64_t stride : {t.stride.seq, t.stride.head, t.stride.batch}) {
      const int64_t bytes = stride * element;
      EXPECT_GT(bytes, 0);
      EXPECT_LT(bytes, kTwoTo40);
      EXPECT_EQ(bytes % 16, 0);
    }
    for (int64_t dim : {launched.head_dim, t.rows, t.heads, tensor_batch}) {
      EXPECT_GE(dim, 1);
      EXPECT_LE(dim, int64_t{1} << 32);
    }
  }
}

TEST_F(Sm90TmaRules, ContiguousTensorsAreEncodableAsTheyAre) {
  expect_accepted();
  expect_encodable(call.problem);
}

TEST_F(Sm90TmaRules, RejectsASteppedStrideOf2To40Bytes) {
  q.seq_stride = kTwoTo40 / 2;  // bfloat16: 2^40 bytes
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "q.seq_stride is 549755813888 elements = 1099511627776 bytes; the SM90 "
                  "backend's TMA descriptors need strides below 2^40 bytes");
  SetUp();
  k.batch_stride = v.batch_stride = kTwoTo40;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "k.batch_stride is 1099511627776 elements");
  SetUp();
  expect_accepted();
  ForwardProblem p = call.problem;  // a head_stride alone (validation would see an overlap)
  p.o_stride.head = kTwoTo40 / 2;
  clear_error();
  EXPECT_EQ(sm90::check_forward_rules(p), Status::kUnsupported);
  EXPECT_NE(std::string(last_error()).find("o.head_stride is 549755813888 elements"),
            std::string::npos)
      << last_error();
}

TEST_F(Sm90TmaRules, AcceptsTheLargestSteppedStrideBelow2To40Bytes) {
  q.seq_stride = (kTwoTo40 - 16) / 2;
  q.batch = o.batch = k.batch = v.batch = 1;
  expect_accepted();
  expect_encodable(call.problem);
}

// The case: strides >= 2^40 bytes in size-1 dimensions passed validation and went into
// the descriptors, which the driver refuses (and CuTe only prints). Never stepped, but encoded.
TEST_F(Sm90TmaRules, SizeOneDimensionsNeedEncodableStridesToo) {
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->batch = 1;
  q.batch_stride = kTwoTo40;  // elements: >= 2^40 bytes
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "q.batch_stride is 1099511627776 elements");
  SetUp();
  q.heads = o.heads = k.heads = v.heads = 1;
  q.head_stride = 3;  // no multiple of 16 bytes
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q.head_stride is 3 elements = 6 bytes");
  SetUp();
  q.seqlen = o.seqlen = 1;  // decoding: one query row
  q.seq_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "q.seq_stride is 0; the SM90 backend's TMA descriptors need positive strides");
  SetUp();
  q.seqlen = o.seqlen = 1;
  q.seq_stride = o.seq_stride = 8;  // any positive multiple of 16 bytes
  expect_accepted();
  expect_encodable(call.problem);
}

TEST_F(Sm90TmaRules, SteppedStridesMustStillBeMultiplesOf16Bytes) {
  q.batch = o.batch = k.batch = v.batch = 1;
  q.seq_stride = 4 * 64 + 4;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "q.seq_stride is 260 elements = 520 bytes; the SM90 backend needs strides that "
                  "are multiples of 16 bytes for TMA");
}

TEST_F(Sm90TmaRules, VarlenTensorsAreOneBatchEntryOfTotalRows) {
  ForwardProblem p;
  p.dtype = DType::kBFloat16;
  alignas(16) static const int32_t cu_seqlens[3] = {0, 30, 64};
  p.seqlens.cu_seqlens_q = p.seqlens.cu_seqlens_k = cu_seqlens;
  p.seqlens.batch = 2;
  p.seqlens.seqlen_q = p.seqlens.seqlen_k = 34;
  p.seqlens.total_q = p.seqlens.total_k = 64;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 64;
  alignas(16) static const char memory[4][16] = {};
  p.q = memory[0];
  p.k = memory[1];
  p.v = memory[2];
  p.o = const_cast<char*>(memory[3]);
  for (Strides* s : {&p.q_stride, &p.k_stride, &p.v_stride, &p.o_stride}) {
    *s = {64 * 128, 128, 64};  // (1, total, heads, head_dim) packed
  }
  clear_error();
  ASSERT_EQ(sm90::check_forward_rules(p), Status::kOk) << last_error();
  expect_encodable(p);
  p.q_stride.batch = INT64_MAX;  // the batch entry is never stepped, but encoded
  clear_error();
  EXPECT_EQ(sm90::check_forward_rules(p), Status::kInvalidArgument);
}

// Validation rejects these first; the rules do not rely on it, and do not overflow.
TEST_F(Sm90TmaRules, RulesRejectNegativeAndOverflowingSteppedStridesOnTheirOwn) {
  expect_accepted();
  ForwardProblem p = call.problem;
  p.k_stride.seq = -64;
  clear_error();
  EXPECT_EQ(sm90::check_forward_rules(p), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("k.seq_stride is -64; the SM90 backend needs strides "
                                           ">= 0"),
            std::string::npos)
      << last_error();
  p = call.problem;
  p.v_stride.head = INT64_MAX;
  clear_error();
  EXPECT_EQ(sm90::check_forward_rules(p), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("v.head_stride is 9223372036854775807"),
            std::string::npos)
      << last_error();
}

TEST_F(Sm90TmaRules, BroadcastsOfSteppedDimensionsAreStillRefused) {
  k.seq_stride = v.seq_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "k.seq_stride is 0 (a broadcast view)");
}

// The setmaxnreg rule the kernels' configs assert (sm90/kernel/register_split.hpp), at the splits
// they use and at the one that hung on the H200.
TEST(Sm90RegisterSplit, StaysWithinTheLaunchAllocation) {
  using sm90::launch_registers_per_thread;
  using sm90::register_split_fits;
  EXPECT_EQ(launch_registers_per_thread(384), 168);
  EXPECT_EQ(launch_registers_per_thread(512), 128);
  EXPECT_EQ(launch_registers_per_thread(128), 255);
  EXPECT_TRUE(register_split_fits(24, 240, 2));   // 16-bit forward, backward
  EXPECT_TRUE(register_split_fits(40, 232, 2));   // FP8 forward
  EXPECT_TRUE(register_split_fits(32, 160, 3));   // 16-bit forward, three consumer warpgroups
  EXPECT_FALSE(register_split_fits(32, 240, 2));  // 65,536 > 168 x 384: hung
  EXPECT_FALSE(register_split_fits(20, 240, 2));  // not a multiple of 8
  EXPECT_FALSE(register_split_fits(16, 160, 3));  // below setmaxnreg's 24
  EXPECT_FALSE(register_split_fits(24, 264, 1));  // above its 256
}

// Which problems head_dim 64 runs on its short tile (tile_size.hpp): the measured winners (causal
// 512 and 1k; 16-bit also non-causal 512 and 1k) and tiny ones; the measured losers (causal 2k, FP8
// non-causal 512 and 1k) and long ones keep the long tile.
TEST(Sm90TileChoice, ShortTileWhereTheLongOneWastesMost) {
  static_assert(sm90::ShortTileSize<64, 2>::kExists && sm90::ShortTileSize<64, 1>::kExists &&
                !sm90::ShortTileSize<128, 2>::kExists);
  auto prefers = [](auto element_bytes, bool causal, int64_t seqlen) {
    constexpr int kBytes = decltype(element_bytes)::value;
    return sm90::takes_short_tile<sm90::TileSize<64, kBytes>, sm90::ShortTileSize<64, kBytes>>(false, causal, seqlen,
                                                                                               seqlen);
  };
  const std::integral_constant<int, 2> bits16;
  const std::integral_constant<int, 1> fp8;
  for (int64_t seqlen : {1, 100, 512, 1000, 1024}) {
    EXPECT_TRUE(prefers(bits16, true, seqlen)) << seqlen;
    EXPECT_TRUE(prefers(fp8, true, seqlen)) << seqlen;
    EXPECT_TRUE(prefers(bits16, false, seqlen)) << seqlen;
  }
  for (int64_t seqlen : {2048, 4096, 8192, 16384, 16385, 1 << 20}) {
    EXPECT_FALSE(prefers(bits16, true, seqlen)) << seqlen;
    EXPECT_FALSE(prefers(fp8, true, seqlen)) << seqlen;
  }
  for (int64_t seqlen : {1, 100}) EXPECT_TRUE(prefers(fp8, false, seqlen)) << seqlen;
  for (int64_t seqlen : {512, 1000, 1024}) EXPECT_FALSE(prefers(fp8, false, seqlen)) << seqlen;
  for (int64_t seqlen : {2048, 8192}) {
    EXPECT_FALSE(prefers(bits16, false, seqlen)) << seqlen;
    EXPECT_FALSE(prefers(fp8, false, seqlen)) << seqlen;
  }
}

// FP8 head_dim 128: V in rows runs 128 x 128 everywhere (no short tile); V given transposed runs
// 128 x 192 with 128 x 128 as its short tile, taken where the measured winners are (up to 1k, and
// causal 2k) and not where 128 x 128 lost or tied (non-causal 2k, 4k and longer). Variable-length
// batches keep the long tile.
TEST(Sm90TileChoice, Fp8HeadDim128ShortKeysWhereTheLongOnesWasteMost) {
  using Rows = sm90::TileSize<128, 1, sm90::kernel_transposes_v(1, false)>;
  using Transposed = sm90::TileSize<128, 1, sm90::kernel_transposes_v(1, true)>;
  using TransposedShort = sm90::ShortTileSize<128, 1, sm90::kernel_transposes_v(1, true)>;
  static_assert(Rows::kBlockM == 128 && Rows::kBlockN == 128 && Transposed::kBlockN == 192);
  static_assert(!sm90::ShortTileSize<128, 1, sm90::kernel_transposes_v(1, false)>::kExists);
  static_assert(TransposedShort::kExists && TransposedShort::kBlockN == 128);
  auto takes_short = [](bool varlen, bool causal, int64_t seqlen) {
    return sm90::takes_short_tile<Transposed, TransposedShort>(varlen, causal, seqlen, seqlen);
  };
  for (int64_t seqlen : {1, 100, 512, 1000, 1024}) {
    EXPECT_TRUE(takes_short(false, false, seqlen)) << seqlen;
    EXPECT_TRUE(takes_short(false, true, seqlen)) << seqlen;
    EXPECT_FALSE(takes_short(true, false, seqlen)) << seqlen;
  }
  EXPECT_TRUE(takes_short(false, true, 2048));
  EXPECT_FALSE(takes_short(false, false, 2048));
  for (int64_t seqlen : {4096, 8192, 16384, 1 << 20}) {
    EXPECT_FALSE(takes_short(false, false, seqlen)) << seqlen;
    EXPECT_FALSE(takes_short(false, true, seqlen)) << seqlen;
  }
}

}  // namespace
}  // namespace hopattn
