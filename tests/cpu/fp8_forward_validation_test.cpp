// One test per rule of hopattn_forward_fp8's validation (api/validate_forward_fp8.cpp, the
// forward rules it shares, and sm90/sm90_rules.cpp's check_forward_fp8_rules), with faked system
// queries so that the SM90 rules run without a GPU. q, k, v, o and lse point into memory mapped
// PROT_NONE: a validation that read or wrote them would crash the test. The scales are readable
// host arrays for the CPU backend, which reads them, and PROT_NONE on the SM90 backend, which
// must not.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "api/abi.hpp"
#include "api/validate.hpp"
#include "core/error.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {
namespace {

constexpr int64_t kSlotBytes = 1 << 20;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Five tensor slots (q, k, v, o, lse) and one for device-side scales and workspaces.
char* inaccessible_slots() {
  static void* region =
      mmap(nullptr, 6 * kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(region, MAP_FAILED);
  return static_cast<char*>(region);
}

hopattn_tensor contiguous(void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen,
                          int64_t heads, int64_t head_dim) {
  return {data,  dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim,
          heads * head_dim, head_dim};
}

class Fp8ForwardValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    char* slots = inaccessible_slots();
    q = contiguous(slots, HOPATTN_DTYPE_FLOAT8_E4M3, 2, 300, 4, 64);
    k = contiguous(slots + kSlotBytes, HOPATTN_DTYPE_FLOAT8_E4M3, 2, 200, 2, 64);
    v = contiguous(slots + 2 * kSlotBytes, HOPATTN_DTYPE_FLOAT8_E4M3, 2, 200, 2, 64);
    o = contiguous(slots + 3 * kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 2, 300, 4, 64);
    lse = reinterpret_cast<float*>(slots + 4 * kSlotBytes);
    // q per block of 128 rows (2 x 4 x 3), k per block of 128 (2 x 2 x 2), v per head (2 x 2).
    q_values.assign(24, 0.5f);
    k_values.assign(8, 0.25f);
    v_values.assign(4, 2.f);
    q_scales = {q_values.data(), HOPATTN_FP8_SCALE_BLOCK, 128};
    k_scales = {k_values.data(), HOPATTN_FP8_SCALE_BLOCK, 128};
    v_scales = {v_values.data(), HOPATTN_FP8_SCALE_HEAD, 0};
    options = default_forward_options();
    spaces.clear();
    sm90_built = sm90_device = false;
    sm90_workspace = 0;
  }

  SystemQueries system() {
    SystemQueries queries;
    queries.memory_space_of = [this](const void* p) {
      const auto found = spaces.find(p);
      return found == spaces.end() ? MemorySpace::Host : found->second;
    };
    queries.sm90_built = [this] { return sm90_built; };
    queries.sm90_device_available = [this] { return sm90_device; };
    // A build with FP8 kernels for some head_dims (the 16-bit queries are not asked).
    queries.sm90_supports_fp8 = [](DType out, int64_t head_dim) {
      return (out == DType::kBFloat16 || out == DType::kFloat16) &&
             (head_dim == 64 || head_dim == 128 || head_dim == 256);
    };
    queries.sm90_fp8_supported_list = [] {
      return std::string("bfloat16 with head_dim 64/128/256; float16 with head_dim 64/128/256");
    };
    queries.sm90_forward_fp8_workspace_size = [this](const Fp8ForwardProblem&) {
      return sm90_workspace;
    };
    return queries;
  }

  // is_varlen: hopattn_forward_fp8_varlen's rules, with `varlen`.
  hopattn_status validate(bool is_varlen = false) {
    clear_error();
    return c_status(validate_forward_fp8(&q, &q_scales, &k, &k_scales, &v, &v_scales, &o, lse,
                                         is_varlen ? varlen_or_null : nullptr, is_varlen, &options,
                                         system(), call));
  }

  hopattn_status query(int o_dtype = HOPATTN_DTYPE_BFLOAT16, bool is_varlen = false) {
    clear_error();
    return c_status(validate_forward_fp8_workspace_query(&q, &k, &v, o_dtype,
                                                         is_varlen ? varlen_or_null : nullptr,
                                                         is_varlen, &options, system(), call));
  }

  // The tensors packed as two sequences of q rows 100 + 500 (of 600) and k rows 150 + 250 (of
  // 400), batch 1; the scales of the packed tensors.
  void packed() {
    q.batch = k.batch = v.batch = o.batch = 1;
    q.seqlen = o.seqlen = 600;
    k.seqlen = v.seqlen = 400;
    q.batch_stride = o.batch_stride = 600 * 4 * 64;
    k.batch_stride = v.batch_stride = 400 * 2 * 64;
    q_values.assign(4 * 5, 0.5f);  // 1 x 4 heads x ceil(600 / 128) blocks
    k_values.assign(2 * 4, 0.25f);
    v_values.assign(2, 2.f);
    q_scales.data = q_values.data();
    k_scales.data = k_values.data();
    v_scales.data = v_values.data();
    varlen = default_varlen();
    varlen.batch = 2;
    varlen.cu_seqlens_q = cu_q;
    varlen.cu_seqlens_k = cu_k;
    varlen.max_seqlen_q = 500;
    varlen.max_seqlen_k = 250;
    varlen_or_null = &varlen;
  }
  void expect_varlen_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(true), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }
  int32_t cu_q[3] = {0, 100, 600}, cu_k[3] = {0, 150, 400};
  hopattn_varlen varlen{};
  const hopattn_varlen* varlen_or_null = nullptr;

  void expect_accepted() { EXPECT_EQ(validate(), HOPATTN_OK) << last_error(); }

  void expect_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  void expect_query_rejected(int o_dtype, hopattn_status status,
                             const std::string& fragment) {
    EXPECT_EQ(query(o_dtype), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  // The SM90 backend built, a Hopper GPU present, every pointer in device memory, and the
  // scales unreadable (the SM90 backend cannot read device scales without a sync).
  void on_a_gpu() {
    sm90_built = sm90_device = true;
    const auto* slot = reinterpret_cast<const float*>(inaccessible_slots() + 5 * kSlotBytes);
    q_scales.data = slot;
    k_scales.data = slot + 1024;
    v_scales.data = slot + 2048;
    for (const void* p : std::initializer_list<const void*>{q.data, k.data, v.data, o.data, lse,
                                                            q_scales.data, k_scales.data,
                                                            v_scales.data}) {
      spaces[p] = MemorySpace::Device;
    }
  }

  // v in HOPATTN_FP8_LAYOUT_V_TRANSPOSED, with its layout's strides: pitch 208 for 200 rows.
  void v_transposed() {
    options.fp8_v_layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
    v.seq_stride = 1;
    v.head_stride = 64 * 208;
    v.batch_stride = 2 * 64 * 208;
  }

  hopattn_tensor* tensor(const char* name) {
    switch (name[0]) {
      case 'q': return &q;
      case 'k': return &k;
      case 'v': return &v;
    }
    return &o;
  }
  hopattn_fp8_scales* scales(const char* name) {
    switch (name[0]) {
      case 'q': return &q_scales;
      case 'k': return &k_scales;
    }
    return &v_scales;
  }
  std::vector<float>& values(const char* name) {
    switch (name[0]) {
      case 'q': return q_values;
      case 'k': return k_values;
    }
    return v_values;
  }

  hopattn_tensor q{}, k{}, v{}, o{};
  float* lse = nullptr;
  std::vector<float> q_values, k_values, v_values;
  hopattn_fp8_scales q_scales{}, k_scales{}, v_scales{};
  hopattn_forward_options options{};
  std::map<const void*, MemorySpace> spaces;
  bool sm90_built = false, sm90_device = false;
  size_t sm90_workspace = 0;
  Fp8ForwardCall call;
};

constexpr const char* kInputNames[] = {"q", "k", "v"};

TEST_F(Fp8ForwardValidation, AcceptsAValidCallAndBuildsTheProblem) {
  options.causal = 1;
  ASSERT_EQ(validate(), HOPATTN_OK) << last_error();
  EXPECT_STREQ(last_error(), "");
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  const Fp8ForwardProblem& p = call.problem;
  EXPECT_EQ(p.dtype, DType::kBFloat16);  // o's
  EXPECT_EQ(p.seqlens.batch, 2);
  EXPECT_EQ(p.seqlens.seqlen_q, 300);
  EXPECT_EQ(p.seqlens.seqlen_k, 200);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_TRUE(p.causal);
  EXPECT_FLOAT_EQ(p.softmax_scale, 0.125f);
  EXPECT_EQ(p.q, q.data);
  EXPECT_EQ(p.o, o.data);
  EXPECT_EQ(p.lse, lse);
  EXPECT_EQ(p.k_stride.seq, 2 * 64);
  EXPECT_EQ(p.q_scales.data, q_values.data());
  EXPECT_EQ(p.q_scales.scaling, Fp8Scaling::kBlock);
  EXPECT_EQ(p.q_scales.heads, 4);
  EXPECT_EQ(p.q_scales.blocks_per_head, 3);  // ceil(300 / 128)
  EXPECT_EQ(p.q_scales.index(1, 2, 299), (1 * 4 + 2) * 3 + 2);
  EXPECT_EQ(p.k_scales.heads, 2);
  EXPECT_EQ(p.k_scales.blocks_per_head, 2);
  EXPECT_EQ(p.v_scales.scaling, Fp8Scaling::kHead);
  EXPECT_EQ(p.v_scales.blocks_per_head, 1);
  EXPECT_EQ(p.v_scales.block_rows, 200);  // a head's rows, as QuantizeProblem's
  EXPECT_EQ(p.v_scales.index(1, 1, 150), 3);
  EXPECT_EQ(call.workspace_needed, 0u);
}

TEST_F(Fp8ForwardValidation, NullOptionsAndLseAreAccepted) {
  clear_error();
  EXPECT_EQ(c_status(validate_forward_fp8(&q, &q_scales, &k, &k_scales, &v, &v_scales, &o,
                                          nullptr, nullptr, false, nullptr, system(), call)),
            HOPATTN_OK)
      << last_error();
  EXPECT_FALSE(call.problem.causal);
  EXPECT_EQ(call.problem.lse, nullptr);
}

TEST_F(Fp8ForwardValidation, RejectsNullStructs) {
  const auto run = [&](const hopattn_tensor* tq, const hopattn_fp8_scales* sq,
                       const hopattn_tensor* tk, const hopattn_fp8_scales* sk,
                       const hopattn_tensor* tv, const hopattn_fp8_scales* sv,
                       const hopattn_tensor* to) {
    clear_error();
    EXPECT_EQ(c_status(validate_forward_fp8(tq, sq, tk, sk, tv, sv, to, lse, nullptr, false,
                                            &options, system(), call)),
              HOPATTN_ERROR_INVALID_ARGUMENT);
    return std::string(last_error());
  };
  EXPECT_EQ(run(&q, nullptr, &k, &k_scales, &v, &v_scales, &o),
            "q_scales is NULL; it must point to the hopattn_fp8_scales of q (its scales array, "
            "scaling and block_rows)");
  EXPECT_EQ(run(&q, &q_scales, &k, nullptr, &v, &v_scales, &o).rfind("k_scales is NULL", 0), 0u);
  EXPECT_EQ(run(&q, &q_scales, &k, &k_scales, &v, nullptr, &o).rfind("v_scales is NULL", 0), 0u);
  EXPECT_EQ(run(&q, &q_scales, &k, &k_scales, &v, &v_scales, nullptr), "o is NULL");
  EXPECT_EQ(run(nullptr, &q_scales, &k, &k_scales, &v, &v_scales, &o), "q is NULL");
  EXPECT_EQ(run(&q, &q_scales, &k, &k_scales, nullptr, &v_scales, &o), "v is NULL");
}

TEST_F(Fp8ForwardValidation, TensorRulesNameTheArgument) {
  for (const char* name : {"q", "k", "v", "o"}) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->data = nullptr;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, std::string(name) + ".data is NULL");
    SetUp();
    tensor(name)->seq_stride = -1;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) + ".seq_stride is -1; strides must be >= 0");
  }
}

TEST_F(Fp8ForwardValidation, InputsMustBeE4m3) {
  for (const char* name : kInputNames) {
    for (hopattn_dtype dtype :
         {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16, HOPATTN_DTYPE_FLOAT32}) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(dtype));
      SetUp();
      tensor(name)->dtype = dtype;  // the extent grows, within the slot
      expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                      std::string(name) +
                          ".dtype must be HOPATTN_DTYPE_FLOAT8_E4M3 (e4m3 codes, as "
                          "hopattn_quantize_fp8 writes them) for hopattn_forward_fp8, not ");
    }
  }
  SetUp();
  const int unknown = 9;
  std::memcpy(&k.dtype, &unknown, sizeof unknown);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k.dtype is 9; allowed: 0 (float32)");
}

TEST_F(Fp8ForwardValidation, OutputIsBfloat16OrFloat16) {
  o.dtype = HOPATTN_DTYPE_FLOAT16;
  expect_accepted();
  EXPECT_EQ(call.problem.dtype, DType::kFloat16);
  o.dtype = HOPATTN_DTYPE_FLOAT32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "o.dtype is float32; hopattn_forward_fp8 writes bfloat16 or float16 (1, "
                  "HOPATTN_DTYPE_BFLOAT16, or 2, HOPATTN_DTYPE_FLOAT16)");
  o.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o.dtype is float8_e4m3; hopattn_forward_fp8");
}

TEST_F(Fp8ForwardValidation, SharesTheForwardsShapeRules) {
  k.heads = v.heads = 3;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q.heads (4) must be a multiple of k.heads (3)");
  SetUp();
  v.seqlen = 199;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v is (2, 199, 2, 64) but k is (2, 200, 2, 64); v must have k's shape");
  SetUp();
  o.seqlen = 299;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o is (2, 299, 4, 64) but q is (2, 300, 4, 64)");
  SetUp();
  k.batch = 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k.batch is 1 but q.batch is 2");
  SetUp();
  k.head_dim = v.head_dim = 32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k.head_dim is 32 but q.head_dim is 64");
  SetUp();
  o.seq_stride = 8;  // rows overlap one another
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o: o.seq_stride is 8 but must exceed");
  SetUp();
  k.heads = v.heads = 1;  // MQA
  k_values.resize(4);
  expect_accepted();
}

TEST_F(Fp8ForwardValidation, SharesTheForwardsOptions) {
  options.softmax_scale = -1.f;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options.softmax_scale is -1");
  options.softmax_scale = 0.5f;
  expect_accepted();
  EXPECT_FLOAT_EQ(call.problem.softmax_scale, 0.5f);
  options.struct_size = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->struct_size is 0; it must be sizeof(hopattn_forward_options)");
  SetUp();
  const int backend = 7;
  std::memcpy(&options.backend, &backend, sizeof backend);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options.backend is 7");
}

TEST_F(Fp8ForwardValidation, VLayoutIsRowsOrVTransposed) {
  for (int layout : {2, -1}) {
    SCOPED_TRACE(layout);
    SetUp();
    std::memcpy(&options.fp8_v_layout, &layout, sizeof layout);
    const std::string message = "options->fp8_v_layout is " + std::to_string(layout) +
                                "; allowed: 0 (HOPATTN_FP8_LAYOUT_ROWS), 1 "
                                "(HOPATTN_FP8_LAYOUT_V_TRANSPOSED)";
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, message);
    expect_query_rejected(HOPATTN_DTYPE_BFLOAT16, HOPATTN_ERROR_INVALID_ARGUMENT, message);
    packed();
    expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, message);
  }
  // A caller of the first hopattn.h with the struct: the field lies past its struct_size, unread.
  SetUp();
  const int transposed = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
  std::memcpy(&options.fp8_v_layout, &transposed, sizeof transposed);
  options.struct_size = kForwardOptionsFirstSize;
  expect_accepted();
  EXPECT_EQ(call.problem.v_layout, Fp8Layout::kRows);
}

TEST_F(Fp8ForwardValidation, VTransposedStatesItsLayoutsStrides) {
  v_transposed();
  expect_accepted();
  EXPECT_EQ(call.problem.v_layout, Fp8Layout::kVTransposed);
  EXPECT_EQ(call.problem.k_stride.seq, 2 * 64);  // q and k stay in rows
  ASSERT_EQ(query(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.v_layout, Fp8Layout::kVTransposed);
  const std::string layout =
      ": in HOPATTN_FP8_LAYOUT_V_TRANSPOSED v has seq_stride 1, head_stride = head_dim * pitch = "
      "13312 and batch_stride = heads * head_stride = 26624, with pitch 208 (seqlen 200 rounded "
      "up to a multiple of 16)";
  SetUp();
  options.fp8_v_layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;  // v's strides those of rows
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v.seq_stride is 128 but must be 1" + layout);
  expect_query_rejected(HOPATTN_DTYPE_BFLOAT16, HOPATTN_ERROR_INVALID_ARGUMENT,
                        "v.seq_stride is 128 but must be 1" + layout);
  v_transposed();
  v.head_stride = 64 * 200;  // the rows without the pad
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v.head_stride is 12800 but must be 13312" + layout);
  v_transposed();
  v.batch_stride += 16;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v.batch_stride is 26640 but must be 26624" + layout);
  // The logical shape follows the forward's rules (199 rows have the same pitch).
  v_transposed();
  v.seqlen = 199;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v is (2, 199, 2, 64) but k is (2, 200, 2, 64); v must have k's shape");
  // Packed: the pitch of all 400 rows; batch 1 states its batch_stride too.
  packed();
  options.backend = HOPATTN_BACKEND_CPU;
  options.fp8_v_layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
  v.seq_stride = 1;
  v.head_stride = 64 * 400;
  v.batch_stride = 2 * 64 * 400;
  EXPECT_EQ(validate(true), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.v_layout, Fp8Layout::kVTransposed);
  v.batch_stride = 0;
  expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v.batch_stride is 0 but must be 51200");
}

// The layout's extent, pad included: 2 x 2 x 64 x 208 = 53248 bytes (rows' rule on the same strides
// would end v at 26624 + 13312 + 199 + 64 = 40199).
TEST_F(Fp8ForwardValidation, VTransposedExtentIsItsLayouts) {
  v_transposed();
  o.data = static_cast<char*>(v.data) + 45000;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "o shares memory with v; outputs must not overlap the inputs");
  o.data = static_cast<char*>(v.data) + 53248;
  expect_accepted();
  v.data = reinterpret_cast<void*>(UINTPTR_MAX - 50000);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v: its 53248 bytes from v.data run past the end of the address space");
  for (int64_t rows : {std::numeric_limits<int64_t>::max() - 3, int64_t{1} << 60}) {
    SCOPED_TRACE(rows);
    SetUp();
    v_transposed();
    v.seqlen = rows;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "v: the offset of its last element, or its extent in bytes, overflows int64");
  }
}

TEST_F(Fp8ForwardValidation, EachScalesLayoutIsChecked) {
  for (const char* name : kInputNames) {
    const std::string owner = std::string(name) + "_scales";
    SCOPED_TRACE(owner);
    for (int value : {-1, 3, 255}) {
      SetUp();
      // Through a local copy: GCC's -Wstringop-overflow mistakes the member a pointer from
      // scales() points into once the switch is inlined.
      hopattn_fp8_scales bad = *scales(name);
      std::memcpy(&bad.scaling, &value, sizeof value);  // a value outside the enum, without UB
      *scales(name) = bad;
      expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                      owner + "->scaling is " + std::to_string(value) +
                          "; allowed: 0 (HOPATTN_FP8_SCALE_TENSOR), 1 (HOPATTN_FP8_SCALE_HEAD), "
                          "2 (HOPATTN_FP8_SCALE_BLOCK)");
    }
    for (int64_t rows : {int64_t{0}, int64_t{-128}}) {
      SetUp();
      *scales(name) = {values(name).data(), HOPATTN_FP8_SCALE_BLOCK, rows};
      expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                      owner + "->block_rows is " + std::to_string(rows) +
                          "; with HOPATTN_FP8_SCALE_BLOCK it must be > 0");
    }
    // block_rows is read only for BLOCK.
    SetUp();
    *scales(name) = {values(name).data(), HOPATTN_FP8_SCALE_TENSOR, -5};
    expect_accepted();
    EXPECT_EQ(call.problem.q_scales.scaling,
              name[0] == 'q' ? Fp8Scaling::kTensor : Fp8Scaling::kBlock);
  }
}

TEST_F(Fp8ForwardValidation, EachScalesArrayIsChecked) {
  for (const char* name : kInputNames) {
    const std::string data = std::string(name) + "_scales->data";
    SCOPED_TRACE(data);
    SetUp();
    scales(name)->data = nullptr;
    const std::string n = std::string(name) + ".";
    const std::string layout =
        name[0] == 'v' ? n + "batch * " + n + "heads (HOPATTN_FP8_SCALE_HEAD)"
                       : n + "batch * " + n + "heads * ceil(" + n + "seqlen / " + name +
                             "_scales->block_rows) (HOPATTN_FP8_SCALE_BLOCK)";
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    data + " is NULL; it must point to " + layout + " float32 values");
    SetUp();
    scales(name)->data = reinterpret_cast<const float*>(
        reinterpret_cast<const char*>(values(name).data()) + 2);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    data + " is not 4-byte aligned; it must point to float32 values");
    SetUp();
    scales(name)->data = reinterpret_cast<const float*>(UINTPTR_MAX - 15);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    data + ": " + layout + " float32 values do not fit in the address space");
  }
  SetUp();
  q_scales = {nullptr, HOPATTN_FP8_SCALE_TENSOR, 0};
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "q_scales->data is NULL; it must point to 1 (HOPATTN_FP8_SCALE_TENSOR) float32 "
                  "values");
}

TEST_F(Fp8ForwardValidation, OutputsMustNotOverlapTheScales) {
  // Placed in o's or lse's slot: refused before the CPU backend would read them.
  q_scales.data = reinterpret_cast<const float*>(static_cast<char*>(o.data) + 1024);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "o shares memory with q_scales->data; outputs must not overlap the inputs");
  SetUp();
  v_scales.data = lse + 100;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse shares memory with v_scales->data");
  SetUp();
  o.data = static_cast<char*>(k.data) + 64;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o shares memory with k");
  // Inputs may share memory: one array for the three, per tensor.
  SetUp();
  q_scales = k_scales = v_scales = {q_values.data(), HOPATTN_FP8_SCALE_TENSOR, 0};
  expect_accepted();
  // o just past the end of q's 24 block scales: no overlap (on the SM90 backend, which reads
  // neither; o 16-byte aligned for TMA).
  SetUp();
  on_a_gpu();
  char* scales_slot = inaccessible_slots() + 5 * kSlotBytes;
  k_scales.data = v_scales.data = reinterpret_cast<const float*>(scales_slot + 512 * 1024);
  o.data = scales_slot + 24 * sizeof(float);
  spaces[o.data] = spaces[k_scales.data] = MemorySpace::Device;
  expect_accepted();
  o.data = scales_slot + 16 * sizeof(float);
  spaces[o.data] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o shares memory with q_scales->data");
}

TEST_F(Fp8ForwardValidation, CpuRefusesZeroNegativeAndMinusInfinityScales) {
  for (const char* name : kInputNames) {
    for (const auto& [value, printed] :
         {std::pair<float, const char*>{0.f, "0"}, {-0.f, "-0"}, {-2.f, "-2"}, {-kInf, "-inf"}}) {
      SCOPED_TRACE(std::string(name) + " " + printed);
      SetUp();
      values(name)[3] = value;
      expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                      std::string(name) + "_scales->data[3] is " + printed +
                          "; a scale must be > 0 (NaN or +inf, which mark a block that held NaN "
                          "or inf, give NaN in the rows that see it)");
    }
  }
  // NaN and +inf mark non-finite blocks: used, not refused; and so are tiny and huge scales.
  SetUp();
  q_values[0] = kNaN;
  k_values[7] = kInf;
  v_values[1] = 1e-30f;
  v_values[2] = 3e38f;
  expect_accepted();
  // Only the scales the layout covers are read: the last one of each array counts.
  SetUp();
  k_values.back() = 0.f;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k_scales->data[7] is 0");
}

TEST_F(Fp8ForwardValidation, CpuRefusesScalesInDeviceMemory) {
  spaces[k_scales.data] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "k_scales->data is device memory; the CPU backend needs host memory");
}

TEST_F(Fp8ForwardValidation, CpuTakesAnyHeadDimUpTo512AndEveryScaleLayout) {
  v_values.assign(6, 2.f);  // 1 x 2 heads x ceil(8 / 3) blocks
  for (int64_t head_dim : {1, 80, 512}) {
    SCOPED_TRACE(head_dim);
    for (hopattn_tensor* t : {&q, &k, &v, &o}) *t = contiguous(t->data, t->dtype, 1, 8, t->heads, head_dim);
    v_scales = {v_values.data(), HOPATTN_FP8_SCALE_BLOCK, 3};  // V per block: the CPU takes it
    expect_accepted();
  }
  for (hopattn_tensor* t : {&q, &k, &v, &o}) *t = contiguous(t->data, t->dtype, 1, 8, t->heads, 513);
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "head_dim 513 is not supported by the CPU backend (it supports any head_dim "
                  "from 1 to 512)");
}

TEST_F(Fp8ForwardValidation, CpuRefusesCallsAboveTheWorkBound) {
  k.seqlen = v.seqlen = int64_t{1} << 40;  // broadcast keys: a few bytes, 2^40 rows
  k.seq_stride = v.seq_stride = 0;
  k.batch_stride = v.batch_stride = 0;
  k_scales = v_scales = {k_values.data(), HOPATTN_FP8_SCALE_TENSOR, 0};
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "exceeds the CPU backend's limit of 2^44 = 17592186044416 per call");
}

TEST_F(Fp8ForwardValidation, AutoChoosesSm90ForDeviceMemoryAndReadsNoScale) {
  on_a_gpu();
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
  EXPECT_EQ(call.problem.k_scales.data, k_scales.data);
}

TEST_F(Fp8ForwardValidation, Sm90AvailabilityAndMemorySpaces) {
  on_a_gpu();
  sm90_device = false;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                  "the SM90 backend needs a compute capability 9.0 GPU");
  sm90_built = false;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "the SM90 backend is not in this build");
  on_a_gpu();
  spaces[v_scales.data] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v_scales->data is host memory; the SM90 backend needs device memory");
  on_a_gpu();
  spaces[o.data] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "backend AUTO: o.data is host memory but q.data is device memory");
}

TEST_F(Fp8ForwardValidation, Sm90SupportsTheHeadDimsOfItsKernels) {
  on_a_gpu();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) *t = contiguous(t->data, t->dtype, 1, 8, t->heads, 96);
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "output dtype bfloat16 with head_dim 96 is not supported by the SM90 backend's "
                  "FP8 forward (it supports bfloat16 with head_dim 64/128/256; float16 with "
                  "head_dim 64/128/256; the CPU backend supports bfloat16 and float16 outputs "
                  "with head_dim 1 to 512)");
  for (hopattn_tensor* t : {&q, &k, &v, &o}) *t = contiguous(t->data, t->dtype, 1, 8, t->heads, 128);
  o.dtype = HOPATTN_DTYPE_FLOAT16;
  expect_accepted();
}

TEST_F(Fp8ForwardValidation, Sm90KeyBlockScalesCoverWholeKeyTiles) {
  on_a_gpu();
  for (int64_t rows : {int64_t{64}, int64_t{100}, int64_t{192}}) {
    SCOPED_TRACE(rows);
    k_scales.block_rows = rows;
    expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                    "k_scales->block_rows is " + std::to_string(rows) +
                        "; the SM90 FP8 kernel needs K block scales over a multiple of 128 rows");
  }
  for (int64_t rows : {int64_t{128}, int64_t{256}, int64_t{1} << 40}) {
    k_scales.block_rows = rows;
    expect_accepted();
  }
  k_scales.scaling = HOPATTN_FP8_SCALE_HEAD;
  k_scales.block_rows = 64;  // not read
  expect_accepted();
  // Q scales of any block size.
  q_scales.block_rows = 1;
  expect_accepted();
}

TEST_F(Fp8ForwardValidation, Sm90TakesVScalesPerTensorOrPerHead) {
  on_a_gpu();
  v_scales.scaling = HOPATTN_FP8_SCALE_BLOCK;
  v_scales.block_rows = 128;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "v_scales->scaling is HOPATTN_FP8_SCALE_BLOCK; the SM90 FP8 kernel takes V "
                  "scales per tensor or per head (HOPATTN_FP8_SCALE_TENSOR or "
                  "HOPATTN_FP8_SCALE_HEAD), which it folds into the output; the CPU backend takes "
                  "block V scales");
  v_scales.scaling = HOPATTN_FP8_SCALE_TENSOR;
  expect_accepted();
}

TEST_F(Fp8ForwardValidation, Sm90TmaRulesForOneByteElements) {
  on_a_gpu();
  // e4m3: a stride of 8 elements is 8 bytes, no multiple of 16.
  q.head_stride = 72;
  q.seq_stride = 4 * 72;
  q.batch_stride = 300 * q.seq_stride;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "q.head_stride is 72 elements = 72 bytes; the SM90 backend needs strides that "
                  "are multiples of 16 bytes for TMA");
  q.head_stride = 80;  // 16-byte multiples in elements
  q.seq_stride = 4 * 80;
  q.batch_stride = 300 * q.seq_stride;
  expect_accepted();
  SetUp();
  on_a_gpu();
  k.data = static_cast<char*>(k.data) + 8;
  spaces[k.data] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "k.data is not 16-byte aligned; the SM90 backend loads tiles with TMA");
  SetUp();
  on_a_gpu();
  // o is bfloat16: 2-byte elements, so a stride of 8 elements is 16 bytes.
  o.head_stride = 72;
  o.seq_stride = 4 * 72 + 4;  // 584 bytes
  o.batch_stride = 300 * o.seq_stride;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o.seq_stride is 292 elements = 584 bytes");
  SetUp();
  on_a_gpu();
  v.seq_stride = 0;  // a broadcast view
  k.seq_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "k.seq_stride is 0 (a broadcast view), which the SM90 backend does not support");
}

TEST_F(Fp8ForwardValidation, Sm90RulesNeed32BitSizes) {
  on_a_gpu();
  expect_accepted();
  Fp8ForwardProblem p = call.problem;
  p.seqlens.total_k = p.seqlens.seqlen_k = int64_t{1} << 31;
  p.k_stride = p.v_stride = {int64_t{1} << 36, 128, 64};
  clear_error();
  EXPECT_EQ(sm90::check_forward_fp8_rules(p), Status::kUnsupported);
  EXPECT_STREQ(last_error(),
               "k.seqlen is 2147483648; the SM90 backend needs it below 2^31 (32-bit indices)");
}

TEST_F(Fp8ForwardValidation, WorkspaceOfTheCall) {
  on_a_gpu();
  sm90_workspace = 4096;
  expect_accepted();
  EXPECT_EQ(call.workspace_needed, 4096u);
  char* slot = inaccessible_slots() + 5 * kSlotBytes + 65536;
  options.workspace = slot;
  options.workspace_bytes = 100;
  spaces[slot] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->workspace_bytes is 100 but the call needs 4096 bytes "
                  "(hopattn_forward_fp8_workspace_size)");
  options.workspace_bytes = 4096;
  expect_accepted();
  EXPECT_EQ(call.problem.workspace, slot);
  options.workspace = slot + 16;
  spaces[slot + 16] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options->workspace is not 256-byte aligned");
}

TEST_F(Fp8ForwardValidation, WorkspaceQueryValidatesLikeTheCall) {
  ASSERT_EQ(query(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.workspace_needed, 0u);
  EXPECT_EQ(call.problem.o, nullptr);
  EXPECT_EQ(call.problem.dtype, DType::kBFloat16);
  EXPECT_EQ(call.problem.q_scales.data, nullptr);
  EXPECT_EQ(query(HOPATTN_DTYPE_FLOAT16), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.problem.dtype, DType::kFloat16);
  expect_query_rejected(HOPATTN_DTYPE_FLOAT32, HOPATTN_ERROR_INVALID_ARGUMENT,
                        "o_dtype is float32; hopattn_forward_fp8 writes bfloat16 or float16");
  expect_query_rejected(9, HOPATTN_ERROR_INVALID_ARGUMENT,
                        "o_dtype is 9; hopattn_forward_fp8 writes");
  q.dtype = HOPATTN_DTYPE_BFLOAT16;
  expect_query_rejected(HOPATTN_DTYPE_BFLOAT16, HOPATTN_ERROR_INVALID_ARGUMENT,
                        "q.dtype must be HOPATTN_DTYPE_FLOAT8_E4M3");
  SetUp();
  v.seqlen = 1;
  expect_query_rejected(HOPATTN_DTYPE_BFLOAT16, HOPATTN_ERROR_INVALID_ARGUMENT,
                        "v must have k's shape");
  SetUp();
  on_a_gpu();
  sm90_workspace = 1 << 20;
  ASSERT_EQ(query(), HOPATTN_OK) << last_error();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
  EXPECT_EQ(call.workspace_needed, size_t{1} << 20);
  for (hopattn_tensor* t : {&q, &k, &v}) *t = contiguous(t->data, t->dtype, 1, 8, t->heads, 80);
  expect_query_rejected(HOPATTN_DTYPE_BFLOAT16, HOPATTN_ERROR_UNSUPPORTED,
                        "output dtype bfloat16 with head_dim 80 is not supported by the SM90");
}

// hopattn_forward_fp8_varlen: the forward's varlen rules, the scales those of the packed tensors.
TEST_F(Fp8ForwardValidation, VarlenPacksTheSequencesAndCountsTheScalesOfThePackedTensors) {
  packed();
  options.backend = HOPATTN_BACKEND_CPU;
  EXPECT_EQ(validate(true), HOPATTN_OK) << last_error();
  EXPECT_TRUE(call.problem.seqlens.varlen());
  EXPECT_EQ(call.problem.seqlens.batch, 2);
  EXPECT_EQ(call.problem.seqlens.seqlen_q, 500);
  EXPECT_EQ(call.problem.seqlens.total_k, 400);
  EXPECT_EQ(call.problem.q_scales.blocks_per_head, 5);  // of the 600 packed rows
  EXPECT_EQ(query(HOPATTN_DTYPE_BFLOAT16, true), HOPATTN_OK) << last_error();

  varlen_or_null = nullptr;
  expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen is NULL");
  packed();
  cu_q[2] = 599;  // the CPU reads the metadata: it must end at the tensors' rows
  expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q");
  cu_q[2] = 600;
  q_scales.data = nullptr;
  expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q_scales->data");
  packed();
  k.batch = v.batch = 2;
  expect_varlen_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "have batch 1");
}

TEST_F(Fp8ForwardValidation, Sm90TakesFp8VarlenWithBlockScalesOfQAndK) {
  packed();
  on_a_gpu();
  spaces[cu_q] = spaces[cu_k] = MemorySpace::Device;
  EXPECT_EQ(validate(true), HOPATTN_OK) << last_error();
  EXPECT_EQ(query(HOPATTN_DTYPE_BFLOAT16, true), HOPATTN_OK) << last_error();
}

}  // namespace
}  // namespace hopattn
