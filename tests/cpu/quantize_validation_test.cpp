// One test per rule of hopattn_quantize_fp8's validation (api/validate_quantize.cpp), with faked
// system queries. x, out and scales point into memory mapped PROT_NONE: a validation that read or
// wrote them would crash the test.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <string>

#include "api/abi.hpp"
#include "api/validate.hpp"
#include "core/error.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {
namespace {

constexpr int64_t kSlotBytes = 1 << 20;

char* inaccessible_slots() {
  static void* region =
      mmap(nullptr, 3 * kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(region, MAP_FAILED);
  return static_cast<char*>(region);
}

hopattn_tensor contiguous(void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen,
                          int64_t heads, int64_t head_dim) {
  return {data,  dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim,
          heads * head_dim, head_dim};
}

class QuantizeValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    char* slots = inaccessible_slots();
    x = contiguous(slots, HOPATTN_DTYPE_BFLOAT16, 2, 300, 4, 64);
    out = contiguous(slots + kSlotBytes, HOPATTN_DTYPE_FLOAT8_E4M3, 2, 300, 4, 64);
    scales = reinterpret_cast<float*>(slots + 2 * kSlotBytes);
    options = default_quantize_options();
    spaces.clear();
    sm90_built = sm90_device = false;
  }

  SystemQueries system() {
    SystemQueries queries;
    queries.memory_space_of = [this](const void* p) {
      const auto found = spaces.find(p);
      return found == spaces.end() ? MemorySpace::Host : found->second;
    };
    queries.sm90_built = [this] { return sm90_built; };
    queries.sm90_device_available = [this] { return sm90_device; };
    return queries;
  }

  hopattn_status validate(const hopattn_quantize_options* with = nullptr, bool null_options = false) {
    clear_error();
    return c_status(validate_quantize(&x, &out, scales, null_options ? nullptr : with ? with : &options,
                                      system(), call));
  }

  void expect_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  // out in HOPATTN_FP8_LAYOUT_V_TRANSPOSED (unrotated), with its layout's strides: pitch 304 for
  // 300 rows.
  void out_v_transposed() {
    options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
    options.hadamard = 0;
    out.seq_stride = 1;
    out.head_stride = 64 * 304;
    out.batch_stride = 4 * 64 * 304;
  }

  hopattn_tensor x{}, out{};
  float* scales = nullptr;
  hopattn_quantize_options options{};
  std::map<const void*, MemorySpace> spaces;
  bool sm90_built = false, sm90_device = false;
  QuantizeCall call;
};

TEST_F(QuantizeValidation, AcceptsTheDefaultsAndBuildsTheProblem) {
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  const QuantizeProblem& p = call.problem;
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  EXPECT_EQ(p.dtype, DType::kBFloat16);
  EXPECT_EQ(p.scaling, Fp8Scaling::kBlock);
  EXPECT_EQ(p.block_rows, 128);
  EXPECT_EQ(p.blocks_per_head(), 3);  // ceil(300 / 128)
  EXPECT_EQ(p.scale_count(), 2 * 4 * 3);
  EXPECT_TRUE(p.hadamard);
  EXPECT_EQ(p.seed, 0u);
  EXPECT_EQ(p.x_stride.seq, 4 * 64);
  EXPECT_EQ(p.out, out.data);
  EXPECT_EQ(p.scales, scales);
}

TEST_F(QuantizeValidation, NullOptionsTakeTheDefaults) {
  ASSERT_EQ(validate(nullptr, true), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.scaling, Fp8Scaling::kBlock);
  EXPECT_EQ(call.problem.block_rows, 128);
  EXPECT_TRUE(call.problem.hadamard);
}

TEST_F(QuantizeValidation, TensorAndHeadScalingCoverWholeHeads) {
  options.scaling = HOPATTN_FP8_SCALE_TENSOR;
  options.block_rows = 0;  // read only for BLOCK
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.block_rows, 300);
  EXPECT_EQ(call.problem.scale_count(), 1);
  options.scaling = HOPATTN_FP8_SCALE_HEAD;
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.scale_count(), 8);
}

TEST_F(QuantizeValidation, RejectsStructSizesOfNoHeader) {
  for (size_t size : {size_t{0}, size_t{8}, kQuantizeOptionsFirstSize - 1}) {
    SCOPED_TRACE(size);
    options.struct_size = size;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "options->struct_size is " + std::to_string(size) +
                        "; it must be sizeof(hopattn_quantize_options)");
  }
}

TEST_F(QuantizeValidation, ReadsANewerHeadersStructWithItsFieldsAtTheirDefaults) {
  // A larger struct from a newer header: the known fields are read, and the newer ones must hold
  // their defaults (zero).
  struct Newer {
    hopattn_quantize_options known;
    int64_t later_field;
  } newer{};
  newer.known = default_quantize_options();
  newer.known.struct_size = sizeof newer;
  newer.known.scaling = HOPATTN_FP8_SCALE_HEAD;
  ASSERT_EQ(validate(&newer.known), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.scaling, Fp8Scaling::kHead);
  newer.later_field = -1;
  EXPECT_EQ(validate(&newer.known), HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(last_error()).find("options->struct_size is " + std::to_string(sizeof newer) +
                                           " and byte " +
                                           std::to_string(sizeof(hopattn_quantize_options)) +
                                           " is not zero"),
            std::string::npos)
      << last_error();
}

TEST_F(QuantizeValidation, InitWritesTheDefaultsUpToStructSize) {
  hopattn_quantize_options filled;
  std::memset(&filled, 0xab, sizeof filled);
  ASSERT_EQ(c_status(init_quantize_options(&filled, sizeof filled)), HOPATTN_OK);
  const hopattn_quantize_options defaults = hopattn_default_quantize_options();
  EXPECT_EQ(std::memcmp(&filled, &defaults, sizeof filled), 0);
  EXPECT_EQ(filled.scaling, HOPATTN_FP8_SCALE_BLOCK);
  EXPECT_EQ(filled.block_rows, 128);
  EXPECT_EQ(filled.hadamard, 1);
  EXPECT_EQ(filled.seed, 0u);
  EXPECT_EQ(filled.backend, HOPATTN_BACKEND_AUTO);
  EXPECT_EQ(filled.layout, HOPATTN_FP8_LAYOUT_ROWS);
  EXPECT_EQ(c_status(init_quantize_options(nullptr, sizeof filled)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c_status(init_quantize_options(&filled, kQuantizeOptionsFirstSize - 1)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
}

TEST_F(QuantizeValidation, ReadsEnumFieldsAsIntegers) {
  // Each enum field set to `value` on fresh arguments (the bytes, not an enum conversion).
  const auto expect_refused = [&](auto field_of, const std::string& name, int value, const std::string& allowed) {
    SetUp();
    std::memcpy(field_of(), &value, sizeof value);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, name + " is " + std::to_string(value) + "; allowed: " + allowed);
  };
  for (int value : {-1, 3, 255}) {
    SCOPED_TRACE(value);
    expect_refused([&] { return &options.scaling; }, "options->scaling", value,
                   "0 (HOPATTN_FP8_SCALE_TENSOR), 1 (HOPATTN_FP8_SCALE_HEAD), 2 (HOPATTN_FP8_SCALE_BLOCK)");
    expect_refused([&] { return &options.backend; }, "options->backend", value, "0 (AUTO)");
    expect_refused([&] { return &options.layout; }, "options->layout", value,
                   "0 (HOPATTN_FP8_LAYOUT_ROWS), 1 (HOPATTN_FP8_LAYOUT_V_TRANSPOSED)");
    // 3 names a dtype (an e4m3 one): 4 stands in for it.
    expect_refused([&] { return &out.dtype; }, "out.dtype", value == 3 ? 4 : value, "0 (float32)");
  }
}

// A caller of the first hopattn.h with the struct: the layout lies past its struct_size, unread.
TEST_F(QuantizeValidation, LayoutPastAnOlderStructSizeIsUnread) {
  const int garbage = 9;
  std::memcpy(&options.layout, &garbage, sizeof garbage);
  options.struct_size = kQuantizeOptionsFirstSize;
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.out_layout, Fp8Layout::kRows);
}

TEST_F(QuantizeValidation, VTransposedIsNeverRotated) {
  out_v_transposed();
  options.hadamard = 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->hadamard is 1 but options->layout is 1 "
                  "(HOPATTN_FP8_LAYOUT_V_TRANSPOSED), V's layout, and V is never rotated: set "
                  "hadamard = 0 (its default is 1)");
}

TEST_F(QuantizeValidation, VTransposedOutStatesItsLayoutsStrides) {
  out_v_transposed();
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.out_layout, Fp8Layout::kVTransposed);
  EXPECT_FALSE(call.problem.hadamard);
  const std::string layout =
      ": in HOPATTN_FP8_LAYOUT_V_TRANSPOSED out has seq_stride 1, head_stride = head_dim * pitch "
      "= 19456 and batch_stride = heads * head_stride = 77824, with pitch 304 (seqlen 300 "
      "rounded up to a multiple of 16)";
  SetUp();
  options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
  options.hadamard = 0;  // out's strides those of rows
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "out.seq_stride is 256 but must be 1" + layout);
  out_v_transposed();
  out.head_stride = 64 * 300;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "out.head_stride is 19200 but must be 19456" + layout);
  out_v_transposed();
  out.batch_stride = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "out.batch_stride is 0 but must be 77824" + layout);
}

// The layout's extent, pad included: 2 x 4 x 64 x 304 = 155648 bytes (rows' rule on the same
// strides would end out at 77824 + 3 x 19456 + 299 + 64 = 136555).
TEST_F(QuantizeValidation, VTransposedOutExtentIsItsLayouts) {
  out_v_transposed();
  scales = reinterpret_cast<float*>(static_cast<char*>(out.data) + 140000);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "scales shares memory with out");
  scales = reinterpret_cast<float*>(static_cast<char*>(out.data) + 155648);
  EXPECT_EQ(validate(), HOPATTN_OK) << last_error();
  out.data = reinterpret_cast<void*>(UINTPTR_MAX - 150000);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "out: its 155648 bytes from out.data run past the end of the address space");
}

TEST_F(QuantizeValidation, RejectsBlockRowsOfNoBlock) {
  for (int64_t rows : {int64_t{0}, int64_t{-128}}) {
    options.block_rows = rows;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "options->block_rows is " + std::to_string(rows) +
                        "; with HOPATTN_FP8_SCALE_BLOCK it must be > 0");
  }
}

TEST_F(QuantizeValidation, RejectsNullArguments) {
  EXPECT_EQ(c_status(validate_quantize(&x, nullptr, scales, &options, system(), call)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(last_error(), "out is NULL");
  EXPECT_EQ(c_status(validate_quantize(nullptr, &out, scales, &options, system(), call)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(last_error(), "x is NULL");
  x.data = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "x.data is NULL");
  SetUp();
  scales = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "scales is NULL; it must point to batch * heads * ceil(seqlen / block_rows) "
                  "(HOPATTN_FP8_SCALE_BLOCK) float32 values");
  options.scaling = HOPATTN_FP8_SCALE_TENSOR;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "scales is NULL; it must point to 1");
}

TEST_F(QuantizeValidation, RejectsTheWrongDtypes) {
  x.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "x.dtype is float8_e4m3; hopattn_quantize_fp8 takes float32, bfloat16 or "
                  "float16");
  SetUp();
  out.dtype = HOPATTN_DTYPE_BFLOAT16;
  out.batch_stride *= 2, out.seq_stride *= 2, out.head_stride *= 2;  // 2-byte elements
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "out.dtype is bfloat16; hopattn_quantize_fp8 writes float8_e4m3 "
                  "(HOPATTN_DTYPE_FLOAT8_E4M3)");
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_FLOAT16}) {
    SetUp();
    x.dtype = dtype;
    EXPECT_EQ(validate(), HOPATTN_OK) << last_error();
  }
}

TEST_F(QuantizeValidation, RejectsShapesThatDisagree) {
  for (int64_t hopattn_tensor::*field :
       {&hopattn_tensor::batch, &hopattn_tensor::seqlen, &hopattn_tensor::heads}) {
    SetUp();
    out.*field -= 1;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "but x is (2, 300, 4, 64); out must have x's shape");
  }
  SetUp();
  out.head_dim = 32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "out is (2, 300, 4, 32) but x is (2, 300, 4, 64); out must have x's shape");
}

TEST_F(QuantizeValidation, HadamardNeedsAPowerOfTwoHeadDim) {
  x = contiguous(x.data, HOPATTN_DTYPE_BFLOAT16, 2, 300, 4, 96);
  out = contiguous(out.data, HOPATTN_DTYPE_FLOAT8_E4M3, 2, 300, 4, 96);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "x.head_dim is 96 but options->hadamard is set; the Hadamard rotation needs a "
                  "power-of-two head_dim");
  options.hadamard = 0;
  EXPECT_EQ(validate(), HOPATTN_OK) << last_error();
}

TEST_F(QuantizeValidation, RejectsAnOutputWhoseElementsShareAddresses) {
  out.seq_stride = 10;  // rows overlap one another
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "out: out.seq_stride is 10 but must exceed");
  SetUp();
  x.seq_stride = 0;  // x may broadcast
  x.batch_stride = 0;
  EXPECT_EQ(validate(), HOPATTN_OK) << last_error();
}

TEST_F(QuantizeValidation, RejectsOverlaps) {
  out.data = static_cast<char*>(x.data) + 64;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "out shares memory with x");
  SetUp();
  scales = reinterpret_cast<float*>(static_cast<char*>(out.data) + 1000);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "scales shares memory with out");
  SetUp();
  scales = reinterpret_cast<float*>(x.data);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "scales shares memory with x");
  // Just past out's last byte: no overlap.
  SetUp();
  scales = reinterpret_cast<float*>(static_cast<char*>(out.data) + 2 * 300 * 4 * 64);
  EXPECT_EQ(validate(), HOPATTN_OK) << last_error();
}

TEST_F(QuantizeValidation, RejectsMisalignedOrUnaddressableScales) {
  scales = reinterpret_cast<float*>(static_cast<char*>(inaccessible_slots()) + 2 * kSlotBytes + 2);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "scales is not 4-byte aligned");
  SetUp();
  scales = reinterpret_cast<float*>(UINTPTR_MAX - 15);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "scales: batch * heads * ceil(seqlen / block_rows) (HOPATTN_FP8_SCALE_BLOCK) "
                  "float32 values do not fit in the address space");
}

TEST_F(QuantizeValidation, TensorRulesNameTheArgument) {
  out.head_stride = -1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "out.head_stride is -1; strides must be >= 0");
  SetUp();
  x.seqlen = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "x.seqlen is 0; it must be > 0");
}

TEST_F(QuantizeValidation, AutoPicksTheSm90BackendForDeviceMemory) {
  spaces = {{x.data, MemorySpace::Device},
            {out.data, MemorySpace::Device},
            {scales, MemorySpace::Device}};
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "the SM90 backend is not in this build");
  sm90_built = true;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                  "the SM90 backend needs a compute capability 9.0 GPU");
  sm90_device = true;
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
  EXPECT_EQ(call.problem.scale_count(), 2 * 4 * 3);
  options.backend = HOPATTN_BACKEND_SM90;
  options.cuda_stream = reinterpret_cast<void*>(0x1234);
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.cuda_stream, options.cuda_stream);
}

// The GPU quantisation uses no TMA: the natural alignment of check_tensor is all it needs.
TEST_F(QuantizeValidation, Sm90NeedsOnlyNaturalAlignment) {
  sm90_built = sm90_device = true;
  options.backend = HOPATTN_BACKEND_SM90;
  spaces = {{x.data, MemorySpace::Device}, {out.data, MemorySpace::Device}};
  out.data = static_cast<char*>(out.data) + 1;  // 1-byte elements: any address
  x.data = static_cast<char*>(x.data) + 2;      // bfloat16: 2-byte aligned
  x.seq_stride += 1;
  x.batch_stride = 301 * x.seq_stride;
  spaces[x.data] = spaces[out.data] = spaces[scales] = MemorySpace::Device;
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  x.data = static_cast<char*>(x.data) + 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "x.data is not 2-byte aligned");
}

TEST_F(QuantizeValidation, Sm90RejectsHostMemoryNamingTheArgument) {
  sm90_built = sm90_device = true;
  options.backend = HOPATTN_BACKEND_SM90;
  spaces = {{x.data, MemorySpace::Device}, {out.data, MemorySpace::Device}};
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "scales is host memory; the SM90 backend needs device memory");
}

TEST_F(QuantizeValidation, Sm90RulesNeed32BitSizes) {
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  QuantizeProblem p = call.problem;
  clear_error();
  EXPECT_EQ(sm90::check_quantize_rules(p), Status::kOk) << last_error();
  p.seqlen = int64_t{1} << 31;
  clear_error();
  EXPECT_EQ(sm90::check_quantize_rules(p), Status::kUnsupported);
  EXPECT_STREQ(last_error(),
               "x.seqlen is 2147483648; the SM90 backend needs it below 2^31 (32-bit indices)");
  p = call.problem;
  p.heads = INT32_MAX;  // each size fits, their scales do not
  clear_error();
  EXPECT_EQ(sm90::check_quantize_rules(p), Status::kUnsupported);
  EXPECT_NE(std::string(last_error()).find("the number of scales is "), std::string::npos)
      << last_error();
  p = call.problem;
  p.batch = int64_t{1} << 40;
  clear_error();
  EXPECT_EQ(sm90::check_quantize_rules(p), Status::kUnsupported);
  EXPECT_NE(std::string(last_error()).find("x.batch is 1099511627776"), std::string::npos)
      << last_error();
}

TEST_F(QuantizeValidation, RejectsMemorySpaceMixUps) {
  spaces = {{scales, MemorySpace::Device}};
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "backend AUTO: scales is device memory but x.data is host memory");
  options.backend = HOPATTN_BACKEND_CPU;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "scales is device memory; the CPU backend needs host memory");
}

}  // namespace
}  // namespace hopattn
