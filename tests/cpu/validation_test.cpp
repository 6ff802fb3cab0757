// One test per validation rule, against validate_forward / validate_forward_varlen /
// validate_forward_workspace_query with faked system queries, so that the SM90 rules
// (sm90/sm90_rules.cpp) run without a GPU. Every tensor points into memory mapped PROT_NONE: a
// validation that read or wrote a tensor would crash the test.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
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

// Four tensor slots, one for lse and one for varlen metadata and workspaces, all inaccessible.
char* inaccessible_slots() {
  static void* region =
      mmap(nullptr, 6 * kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(region, MAP_FAILED);
  return static_cast<char*>(region);
}

hopattn_tensor contiguous(void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen,
                          int64_t heads, int64_t head_dim) {
  return {
      data,    dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim, heads * head_dim,
      head_dim};
}

class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    char* slots = inaccessible_slots();
    q = contiguous(slots, HOPATTN_DTYPE_BFLOAT16, 2, 64, 4, 64);
    k = contiguous(slots + kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 2, 80, 2, 64);
    v = contiguous(slots + 2 * kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 2, 80, 2, 64);
    o = contiguous(slots + 3 * kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 2, 64, 4, 64);
    lse = reinterpret_cast<float*>(slots + 4 * kSlotBytes);
    options = default_forward_options();
  }

  SystemQueries system() {
    SystemQueries queries;
    queries.memory_space_of = [this](const void* p) {
      const auto found = spaces.find(p);
      return found == spaces.end() ? MemorySpace::Host : found->second;
    };
    queries.sm90_built = [this] { return sm90_built; };
    queries.sm90_device_available = [this] { return sm90_device; };
    // A build with some of the SM90 kernels of this project.
    queries.sm90_supports = [](DType dtype, int64_t head_dim) {
      return dtype != DType::kFloat32 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
    };
    queries.sm90_supported_list = [] {
      return std::string("bfloat16 with head_dim 64/128/256; float16 with head_dim 64/128/256");
    };
    queries.sm90_forward_workspace_size = [this](const ForwardProblem&) { return sm90_workspace; };
    return queries;
  }

  hopattn_status validate() {
    clear_error();
    return c_status(varlen_call ? validate_forward_varlen(&q, &k, &v, &o, lse, &varlen, &options,
                                                          system(), call)
                                : validate_forward(&q, &k, &v, &o, lse, &options, system(), call));
  }

  void expect_accepted() { EXPECT_EQ(validate(), HOPATTN_OK) << last_error(); }

  void expect_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  // The SM90 backend built, a Hopper GPU present and every pointer in device memory.
  void on_a_gpu() {
    sm90_built = sm90_device = true;
    for (const void* p : {q.data, k.data, v.data, o.data, static_cast<void*>(lse)}) {
      spaces[p] = MemorySpace::Device;
    }
  }

  hopattn_tensor* tensor(const char* name) {
    switch (name[0]) {
      case 'q': return &q;
      case 'k': return &k;
      case 'v': return &v;
    }
    return &o;
  }

  // validate() checks hopattn_forward_varlen with `varlen` over packed tensors: q and o
  // (1, 40, 4, 64), k and v (1, 70, 2, 64) in three sequences, one of them empty.
  void as_varlen() {
    varlen_call = true;
    char* slots = inaccessible_slots();
    q = contiguous(slots, HOPATTN_DTYPE_BFLOAT16, 1, 40, 4, 64);
    k = contiguous(slots + kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 1, 70, 2, 64);
    v = contiguous(slots + 2 * kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 1, 70, 2, 64);
    o = contiguous(slots + 3 * kSlotBytes, HOPATTN_DTYPE_BFLOAT16, 1, 40, 4, 64);
    cu_seqlens_q = {0, 10, 10, 40};
    cu_seqlens_k = {0, 30, 45, 70};
    seqused_k = {30, 0, 20};
    varlen = hopattn_varlen{};
    varlen.struct_size = sizeof(hopattn_varlen);
    varlen.batch = 3;
    varlen.cu_seqlens_q = cu_seqlens_q.data();
    varlen.cu_seqlens_k = cu_seqlens_k.data();
    varlen.max_seqlen_q = 30;
    varlen.max_seqlen_k = 30;
  }

  // Varlen metadata no one may read: the SM90 backend cannot without a device sync.
  void with_unreadable_varlen_metadata() {
    const auto* slot = reinterpret_cast<const int32_t*>(inaccessible_slots() + 5 * kSlotBytes);
    varlen.cu_seqlens_q = slot;
    varlen.cu_seqlens_k = slot + 64;
    varlen.seqused_k = slot + 128;
  }

  void* workspace_slot() { return inaccessible_slots() + 5 * kSlotBytes + 4096; }

  hopattn_tensor q{}, k{}, v{}, o{};
  float* lse = nullptr;
  hopattn_forward_options options{};
  std::map<const void*, MemorySpace> spaces;
  bool sm90_built = false, sm90_device = false;
  size_t sm90_workspace = 0;
  bool varlen_call = false;
  hopattn_varlen varlen{};
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k;
  ForwardCall call;
};

const char* const kTensorNames[] = {"q", "k", "v", "o"};

TEST_F(Validation, AcceptsAValidCallAndResolvesTheProblem) {
  options.causal = 1;
  options.softmax_scale = 0.25f;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  const ForwardProblem& p = call.problem;
  EXPECT_EQ(p.dtype, DType::kBFloat16);
  EXPECT_EQ(p.seqlens.batch, 2);
  EXPECT_EQ(p.seqlens.seqlen_q, 64);
  EXPECT_EQ(p.seqlens.seqlen_k, 80);
  EXPECT_EQ(p.seqlens.total_q, 64);
  EXPECT_EQ(p.seqlens.total_k, 80);
  EXPECT_FALSE(p.seqlens.varlen());
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(p.q, q.data);
  EXPECT_EQ(p.o, o.data);
  EXPECT_EQ(p.lse, lse);
  EXPECT_EQ(p.k_stride.seq, 2 * 64);
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.softmax_scale, 0.25f);
}

TEST_F(Validation, NullOptionsMeanDefaults) {
  EXPECT_EQ(validate_forward(&q, &k, &v, &o, nullptr, nullptr, system(), call), Status::kOk);
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  EXPECT_FALSE(call.problem.causal);
  EXPECT_EQ(call.problem.softmax_scale, 0.125f);
}

TEST_F(Validation, ZeroScaleMeansOneOverSqrtHeadDim) {
  options.softmax_scale = 0.f;
  expect_accepted();
  EXPECT_EQ(call.problem.softmax_scale, 0.125f);  // 1/sqrt(64)
}

TEST_F(Validation, RejectsNullTensorStruct) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    const hopattn_tensor* args[4] = {&q, &k, &v, &o};
    args[std::string("qkvo").find(name[0])] = nullptr;
    clear_error();
    EXPECT_EQ(validate_forward(args[0], args[1], args[2], args[3], lse, &options, system(), call),
              Status::kInvalidArgument);
    EXPECT_EQ(std::string(last_error()), std::string(name) + " is NULL");
  }
}

TEST_F(Validation, RejectsNullDataPointer) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->data = nullptr;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, std::string(name) + ".data is NULL");
  }
}

TEST_F(Validation, RejectsUnknownDtype) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->dtype = static_cast<hopattn_dtype>(4);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) +
                        ".dtype is 4; allowed: 0 (float32), 1 (bfloat16), 2 (float16), 3 "
                        "(float8_e4m3)");
  }
}

TEST_F(Validation, RejectsFloat8E4M3) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) +
                        ".dtype is float8_e4m3; hopattn_forward takes float32, bfloat16 or "
                        "float16 (float8_e4m3 is hopattn_quantize_fp8's output");
  }
  // Every tensor e4m3 (one dtype): refused before the shapes are compared.
  SetUp();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q.dtype is float8_e4m3; hopattn_forward");
}

TEST_F(Validation, RejectsDtypeMismatch) {
  for (const char* name : {"k", "v", "o"}) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->dtype = HOPATTN_DTYPE_FLOAT16;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) + ".dtype is float16 but q.dtype is bfloat16");
  }
}

TEST_F(Validation, RejectsZeroOrNegativeSizes) {
  for (const char* name : kTensorNames) {
    for (int field = 0; field < 4; ++field) {
      for (int64_t size : {0, -3}) {
        SetUp();
        hopattn_tensor* t = tensor(name);
        int64_t* sizes[] = {&t->batch, &t->seqlen, &t->heads, &t->head_dim};
        const char* fields[] = {"batch", "seqlen", "heads", "head_dim"};
        *sizes[field] = size;
        SCOPED_TRACE(std::string(name) + "." + fields[field]);
        expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, std::string(name) + "." + fields[field] +
                                                            " is " + std::to_string(size) +
                                                            "; it must be > 0");
      }
    }
  }
}

TEST_F(Validation, RejectsBatchMismatch) {
  for (const char* name : {"k", "v", "o"}) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->batch = 1;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) + ".batch is 1 but q.batch is 2");
  }
}

TEST_F(Validation, RejectsKAndVShapeMismatch) {
  v.seqlen = 79;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v must have k's shape");
  SetUp();
  v.heads = 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v is (2, 80, 1, 64) but k is (2, 80, 2, 64)");
  SetUp();
  v.head_dim = 32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v must have k's shape");
}

TEST_F(Validation, RejectsOutputShapeDifferentFromQ) {
  o.seqlen = 63;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o is (2, 63, 4, 64) but q is (2, 64, 4, 64)");
  SetUp();
  o.heads = 2;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o must have q's shape");
  SetUp();
  o.head_dim = 32;
  o.seq_stride = 4 * 32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o must have q's shape");
}

TEST_F(Validation, RejectsHeadDimMismatchBetweenQAndKv) {
  k.head_dim = v.head_dim = 128;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k.head_dim is 128 but q.head_dim is 64");
}

TEST_F(Validation, RejectsQueryHeadsNotAMultipleOfKvHeads) {
  k.heads = v.heads = 3;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q.heads (4) must be a multiple of k.heads (3)");
}

TEST_F(Validation, AcceptsMultiQueryAttention) {
  k.heads = v.heads = 1;
  expect_accepted();
}

TEST_F(Validation, CpuAcceptsAnyHeadDimFrom1To512) {
  for (int64_t head_dim : {1, 3, 96, 512}) {
    SCOPED_TRACE(head_dim);
    for (hopattn_tensor* t : {&q, &k, &v, &o}) t->head_dim = t->head_stride = head_dim;
    q.seq_stride = o.seq_stride = 4 * head_dim;
    k.seq_stride = v.seq_stride = 2 * head_dim;
    q.batch_stride = o.batch_stride = 64 * 4 * head_dim;
    k.batch_stride = v.batch_stride = 80 * 2 * head_dim;
    expect_accepted();
  }
}

TEST_F(Validation, CpuRejectsHeadDimAbove512) {
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->head_dim = t->head_stride = 513;
  q.seq_stride = o.seq_stride = 4 * 513;
  k.seq_stride = v.seq_stride = 2 * 513;
  q.batch_stride = o.batch_stride = 64 * 4 * 513;
  k.batch_stride = v.batch_stride = 80 * 2 * 513;
  expect_rejected(
      HOPATTN_ERROR_UNSUPPORTED,
      "head_dim 513 is not supported by the CPU backend (it supports any head_dim from 1 to 512)");
}

TEST_F(Validation, Sm90RejectsHeadDimItWasNotBuiltFor) {
  on_a_gpu();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->head_dim = t->head_stride = 96;
  q.seq_stride = o.seq_stride = 4 * 96;
  k.seq_stride = v.seq_stride = 2 * 96;
  q.batch_stride = o.batch_stride = 64 * 4 * 96;
  k.batch_stride = v.batch_stride = 80 * 2 * 96;
  expect_rejected(
      HOPATTN_ERROR_UNSUPPORTED,
      "dtype bfloat16 with head_dim 96 is not supported by the SM90 backend (it supports "
      "bfloat16 with head_dim 64/128/256; float16 with head_dim 64/128/256");
}

TEST_F(Validation, Sm90RejectsFloat32) {
  on_a_gpu();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT32;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "dtype float32 with head_dim 64 is not supported by the SM90 backend");
}

TEST_F(Validation, RejectsNegativeOrNonFiniteSoftmaxScale) {
  for (float scale :
       {-0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(scale);
    options.softmax_scale = scale;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "must be > 0 and finite, or 0 for 1/sqrt(head_dim)");
    EXPECT_EQ(std::string(last_error()).rfind("options.softmax_scale is ", 0), 0u);
  }
}

TEST_F(Validation, RejectsNegativeStrides) {
  const char* fields[] = {"batch_stride", "seq_stride", "head_stride"};
  for (const char* name : kTensorNames) {
    for (int field = 0; field < 3; ++field) {
      SetUp();
      hopattn_tensor* t = tensor(name);
      int64_t* strides[] = {&t->batch_stride, &t->seq_stride, &t->head_stride};
      *strides[field] = -1;
      SCOPED_TRACE(std::string(name) + "." + fields[field]);
      expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                      std::string(name) + "." + fields[field] + " is -1; strides must be >= 0");
    }
  }
}

TEST_F(Validation, RejectsExtentThatOverflowsInt64) {
  k.seq_stride = int64_t{1} << 61;  // (80 - 1) * 2^61 overflows
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k: the offset of its last element");
  SetUp();
  // The offset fits, its size in bytes (2 per bfloat16 element) does not.
  v.batch = 1;
  v.seqlen = 2;
  v.batch_stride = 0;
  v.seq_stride = (int64_t{1} << 62) - 32;  // 2^63 - 64 bytes: the stride fits, the extent not
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v: the offset of its last element, or its extent in bytes");
}

// --- Hardening (issue 10): every stride in bytes fits int64, data aligned to its element,
// enums read as integers, a bound on the CPU backend's work ---

TEST_F(Validation, RejectsStrideWhoseBytesOverflowInt64) {
  // A size-1 dimension's stride never enters the extent, but stride * element_size is computed
  // (sm90_rules: the TMA stride in bytes), and overflowed.
  q.batch = o.batch = k.batch = v.batch = 1;
  q.batch_stride = INT64_MAX;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "q.batch_stride is 9223372036854775807; a stride in bytes (2 per element) "
                  "must fit in int64");
  SetUp();
  k.heads = v.heads = 1;
  q.heads = o.heads = 2;
  q.head_stride = o.head_stride = 64;
  q.seq_stride = o.seq_stride = 128;
  q.batch_stride = o.batch_stride = 64 * 128;
  k.head_stride = INT64_MAX / 2 + 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k.head_stride is 4611686018427387904");
  k.head_stride = INT64_MAX / 2;  // 2^63 - 2 bytes: fits
  expect_accepted();
}

TEST_F(Validation, RejectsDataNotAlignedToTheElementSize) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    SetUp();
    tensor(name)->data = static_cast<char*>(tensor(name)->data) + 1;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) +
                        ".data is not 2-byte aligned; a bfloat16 tensor must start at a "
                        "multiple of its element size");
  }
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT32;
  for (int offset : {1, 2, 3}) {
    SetUp();
    for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT32;
    v.data = static_cast<char*>(v.data) + offset;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "v.data is not 4-byte aligned; a float32");
  }
  SetUp();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT32;
  k.data = static_cast<char*>(k.data) + 4;
  expect_accepted();
}

// A C caller may store any int in an enum field; validation reads it as an integer (under UBSan a
// load of an out-of-range enum object is an error, -fsanitize=enum).
TEST_F(Validation, ReadsEnumFieldsAsIntegers) {
  for (int value : {-1, 4, 255, INT32_MAX, INT32_MIN}) {
    SCOPED_TRACE(value);
    SetUp();
    std::memcpy(&k.dtype, &value, sizeof value);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "k.dtype is " + std::to_string(value) + "; allowed: 0 (float32)");
    SetUp();
    std::memcpy(&options.backend, &value, sizeof value);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "options.backend is " + std::to_string(value) + "; allowed: 0 (AUTO)");
  }
}

TEST_F(Validation, CpuRefusesCallsAboveTheWorkBound) {
  // One key broadcast to 2^40 and to 2^63 - 1 rows: a few bytes, unbounded work.
  for (int64_t keys : {int64_t{1} << 40, INT64_MAX}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(keys);
      SetUp();
      k.seqlen = v.seqlen = keys;
      k.seq_stride = v.seq_stride = 0;
      options.causal = causal;
      expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                      "exceeds the CPU backend's limit of 2^44 = 17592186044416 per call");
    }
  }
  SetUp();
  k.seqlen = v.seqlen = INT64_MAX;
  k.seq_stride = v.seq_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "the call's work, q.batch * q.heads * q.seqlen * k.seqlen * q.head_dim = more "
                  "than 2^63 multiply-adds");
  // At the bound exactly: 2 * 4 * 64 * 2^29 * 64 = 2^44.
  SetUp();
  k.seqlen = v.seqlen = int64_t{1} << 29;
  k.seq_stride = v.seq_stride = 0;
  k.batch_stride = v.batch_stride = 0;
  expect_accepted();
  k.seqlen = v.seqlen = (int64_t{1} << 29) + 1;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "= 17592186077184 multiply-adds");
  // The SM90 backend has its own (32-bit) bounds and refuses zero strides anyway.
}

TEST_F(Validation, CpuWorkBoundCountsVarlenSequences) {
  as_varlen();
  expect_accepted();  // 4 heads * 64 * (10 * 30 + 0 + 30 * 25)
  // Broadcast q, k and v rows: 2^21 queries over 2^31 - 1 keys in two sequences, 2^59 in all.
  lse = nullptr;
  q.seqlen = o.seqlen = int64_t{1} << 21;
  q.seq_stride = q.batch_stride = 0;
  o.seq_stride = 4 * 64;
  o.batch_stride = o.seqlen * o.seq_stride;
  o.data = reinterpret_cast<void*>(uintptr_t{1} << 44);  // never touched
  k.seqlen = v.seqlen = INT32_MAX;
  k.seq_stride = v.seq_stride = 0;
  k.batch_stride = v.batch_stride = 0;
  cu_seqlens_q = {0, 1 << 20, 1 << 20, 1 << 21};
  cu_seqlens_k = {0, 1 << 30, 1 << 30, INT32_MAX};
  varlen.cu_seqlens_q = cu_seqlens_q.data();
  varlen.cu_seqlens_k = cu_seqlens_k.data();
  varlen.max_seqlen_q = 1 << 20;
  varlen.max_seqlen_k = 1 << 30;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "q.heads * q.head_dim * (the sum over sequences of their query times key "
                  "lengths)");
}

TEST_F(Validation, RejectsTensorRunningPastTheAddressSpace) {
  q.data = reinterpret_cast<void*>(UINTPTR_MAX - 4096 + 1);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "bytes from q.data run past the end of the address space");
}

TEST_F(Validation, AcceptsBroadcastInputsWithZeroStrides) {
  k.batch_stride = v.batch_stride = 0;
  q.head_stride = 0;
  expect_accepted();
}

TEST_F(Validation, RejectsOverlappingOutputElements) {
  o.head_stride = 32;  // heads overlap half of each other's 64 elements
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o: o.head_stride is 32 but must exceed 63");
  SetUp();
  o.batch_stride = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o: o.batch_stride is 0");
}

TEST_F(Validation, AcceptsNonOverlappingPermutedOutput) {
  // (batch, heads, seqlen, head_dim) in memory, as a transposed view.
  o.head_stride = 64 * 64;
  o.seq_stride = 64;
  expect_accepted();
}

TEST_F(Validation, RejectsMisalignedLse) {
  lse = reinterpret_cast<float*>(reinterpret_cast<char*>(lse) + 2);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse is not 4-byte aligned");
}

TEST_F(Validation, RejectsLseLargerThanTheAddressSpace) {
  // o may be (1, 2^61, 1, 1) bfloat16 without overflow; its 2^61 float32 LSE values may not.
  for (hopattn_tensor* t : {&q, &k, &v, &o}) {
    *t = contiguous(t->data, HOPATTN_DTYPE_BFLOAT16, 1, int64_t{1} << 61, 1, 1);
  }
  q.data = k.data = v.data = o.data = reinterpret_cast<void*>(uintptr_t{4096});
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "lse: batch * heads_q * seqlen_q = 1 * 1 * 2305843009213693952");
}

TEST_F(Validation, RejectsOutputOverlappingAnInput) {
  o.data = static_cast<char*>(q.data) + 64;  // in place, shifted: still shares q's bytes
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o shares memory with q");
  o.data = v.data;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "o shares memory with v");
}

TEST_F(Validation, RejectsLseOverlappingATensor) {
  lse = static_cast<float*>(o.data);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse shares memory with o");
  lse = static_cast<float*>(k.data);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse shares memory with k");
}

TEST_F(Validation, RejectsUnknownBackend) {
  options.backend = static_cast<hopattn_backend>(7);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options.backend is 7; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
}

TEST_F(Validation, AutoChoosesCpuForHostMemory) {
  sm90_built = sm90_device = true;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
}

TEST_F(Validation, AutoChoosesSm90ForDeviceMemory) {
  on_a_gpu();
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
}

TEST_F(Validation, AutoRejectsTensorsInDifferentMemorySpaces) {
  on_a_gpu();
  spaces[v.data] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "backend AUTO: v.data is host memory but q.data is device memory");
  spaces[v.data] = MemorySpace::Device;
  spaces[lse] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "backend AUTO: lse is host memory");
}

TEST_F(Validation, AutoRejectsPointersOfUnknownMemorySpace) {
  spaces[k.data] = MemorySpace::Unknown;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "cannot tell whether k.data is host or device memory");
}

TEST_F(Validation, AutoWithDeviceMemoryButNoSm90BuildIsUnavailable) {
  on_a_gpu();
  sm90_built = false;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "backend AUTO chose it for device memory");
}

TEST_F(Validation, Sm90NotBuiltIsUnavailable) {
  options.backend = HOPATTN_BACKEND_SM90;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "the SM90 backend is not in this build");
}

TEST_F(Validation, Sm90WithoutAHopperGpuIsUnavailable) {
  on_a_gpu();
  sm90_device = false;
  options.backend = HOPATTN_BACKEND_SM90;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "needs a compute capability 9.0 GPU");
}

TEST_F(Validation, Sm90RejectsHostMemoryNamingTheTensor) {
  on_a_gpu();
  options.backend = HOPATTN_BACKEND_SM90;
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    spaces[tensor(name)->data] = MemorySpace::Host;
    expect_rejected(
        HOPATTN_ERROR_INVALID_ARGUMENT,
        std::string(name) + ".data is host memory; the SM90 backend needs device memory");
    spaces[tensor(name)->data] = MemorySpace::Device;
  }
  spaces[lse] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "lse is host memory; the SM90 backend needs device memory");
}

TEST_F(Validation, CpuRejectsDeviceMemoryNamingTheTensor) {
  options.backend = HOPATTN_BACKEND_CPU;
  spaces[o.data] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "o.data is device memory; the CPU backend needs host memory");
}

TEST_F(Validation, Sm90RejectsDataNotAlignedTo16Bytes) {
  on_a_gpu();
  options.backend = HOPATTN_BACKEND_SM90;
  k.data = static_cast<char*>(k.data) + 8;
  spaces[k.data] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "k.data is not 16-byte aligned; the SM90 backend loads tiles with TMA");
}

TEST_F(Validation, Sm90RejectsStridesNotMultiplesOf16Bytes) {
  on_a_gpu();
  options.backend = HOPATTN_BACKEND_SM90;
  q.seq_stride = 4 * 64 + 4;  // 520 bytes
  q.batch_stride = 64 * q.seq_stride;
  expect_rejected(
      HOPATTN_ERROR_INVALID_ARGUMENT,
      "q.seq_stride is 260 elements = 520 bytes; the SM90 backend needs strides that are "
      "multiples of 16 bytes for TMA");
}

TEST_F(Validation, TmaRulesDoNotApplyToTheCpuBackend) {
  q.data = static_cast<char*>(q.data) + 2;
  q.seq_stride = 4 * 64 + 1;
  q.batch_stride = 64 * q.seq_stride;
  expect_accepted();
}

// --- Growable structs: struct_size ---

TEST_F(Validation, RejectsOptionsWithStructSizeZero) {
  options.struct_size = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options->struct_size is 0");
  EXPECT_NE(std::string(last_error()).find("hopattn_default_forward_options()"), std::string::npos)
      << last_error();
}

TEST_F(Validation, RejectsOptionsWithStructSizeBelowTheFirstVersion) {
  options.struct_size = kForwardOptionsFirstSize - 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->struct_size is " + std::to_string(kForwardOptionsFirstSize - 1));
}

// A caller built against a newer hopattn.h: the fields this library knows are read; the newer
// ones must hold their defaults (zero), since this library cannot honour anything else.
TEST_F(Validation, ReadsOptionsFromANewerHeaderWithItsFieldsAtTheirDefaults) {
  struct NewerOptions {
    hopattn_forward_options known;
    int64_t added_later;
  } newer{default_forward_options(), 0};
  newer.known.struct_size = sizeof(NewerOptions);
  newer.known.causal = 1;
  newer.known.softmax_scale = 0.5f;
  EXPECT_EQ(validate_forward(&q, &k, &v, &o, lse, &newer.known, system(), call), Status::kOk)
      << last_error();
  EXPECT_TRUE(call.problem.causal);
  EXPECT_EQ(call.problem.softmax_scale, 0.5f);

  newer.added_later = int64_t{1} << 40;  // one byte set, the sixth of the field
  clear_error();
  EXPECT_EQ(validate_forward(&q, &k, &v, &o, lse, &newer.known, system(), call),
            Status::kInvalidArgument);
  EXPECT_EQ(last_error(), "options->struct_size is " + std::to_string(sizeof(NewerOptions)) +
                              " and byte " + std::to_string(sizeof(hopattn_forward_options) + 5) +
                              " is not zero: the caller's hopattn.h has fields that this library's "
                              "hopattn_forward_options (" +
                              std::to_string(sizeof(hopattn_forward_options)) +
                              " bytes) does not, and one of them is set; use a hopattn library at "
                              "least as new as the header, or leave those fields at their defaults");
}

// hopattn_init_forward_options from a newer header's caller: the fields this library does not
// know get their default, zero, so that the struct it filled is one it accepts.
TEST_F(Validation, InitZeroesTheFieldsOfANewerHeader) {
  struct NewerOptions {
    hopattn_forward_options known;
    int64_t added_later;
  } newer;
  std::memset(&newer, 0xab, sizeof newer);
  ASSERT_EQ(init_forward_options(&newer.known, sizeof newer), Status::kOk);
  EXPECT_EQ(newer.known.struct_size, sizeof newer);
  EXPECT_EQ(newer.added_later, 0);
  EXPECT_EQ(validate_forward(&q, &k, &v, &o, lse, &newer.known, system(), call), Status::kOk)
      << last_error();
}

// A caller of the first hopattn.h with the struct (no fp8_v_layout): whatever lies past its
// struct_size is not read, and v is in rows.
TEST_F(Validation, OptionsOfTheFirstVersionReadNoLayout) {
  const int garbage = 7;
  std::memcpy(&options.fp8_v_layout, &garbage, sizeof garbage);
  options.struct_size = kForwardOptionsFirstSize;
  expect_accepted();
}

// The V-transposed layout is hopattn_forward_fp8's: every form of the forward refuses it.
TEST_F(Validation, RefusesAnFp8VLayoutOtherThanRows) {
  for (int layout : {int{HOPATTN_FP8_LAYOUT_V_TRANSPOSED}, 2, -1}) {
    SCOPED_TRACE(layout);
    SetUp();
    varlen_call = false;
    std::memcpy(&options.fp8_v_layout, &layout, sizeof layout);
    const std::string message =
        "options->fp8_v_layout is " + std::to_string(layout) +
        "; hopattn_forward takes only 0 (HOPATTN_FP8_LAYOUT_ROWS, the default): the "
        "V-transposed layout is for hopattn_forward_fp8's e4m3 v";
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, message);
    clear_error();
    EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, nullptr, &options, system(), call),
              Status::kInvalidArgument);
    EXPECT_EQ(last_error(), message);
    as_varlen();
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, message);
    clear_error();
    EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, &varlen, &options, system(), call),
              Status::kInvalidArgument);
    EXPECT_EQ(last_error(), message);
  }
}

TEST_F(Validation, RejectsVarlenWithStructSizeZero) {
  as_varlen();
  varlen.struct_size = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->struct_size is 0");
  EXPECT_NE(std::string(last_error()).find("hopattn_default_varlen()"), std::string::npos)
      << last_error();
  varlen.struct_size = kVarlenFirstSize - 8;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->struct_size is");
}

// hopattn_init_* and the validation share one definition of the first version's size.
TEST_F(Validation, InitRefusesWhatValidationRefuses) {
  hopattn_forward_options init_options{};
  EXPECT_EQ(init_forward_options(&init_options, kForwardOptionsFirstSize), Status::kOk);
  EXPECT_EQ(init_options.struct_size, kForwardOptionsFirstSize);
  EXPECT_EQ(init_forward_options(&init_options, kForwardOptionsFirstSize - 1),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("struct_size is " +
                                           std::to_string(kForwardOptionsFirstSize - 1)),
            std::string::npos)
      << last_error();
  hopattn_varlen init_varlen_struct{};
  EXPECT_EQ(init_varlen(&init_varlen_struct, kVarlenFirstSize), Status::kOk);
  EXPECT_EQ(init_varlen_struct.struct_size, kVarlenFirstSize);
  EXPECT_EQ(init_varlen(&init_varlen_struct, kVarlenFirstSize - 1), Status::kInvalidArgument);
  EXPECT_EQ(init_varlen(nullptr, kVarlenFirstSize), Status::kInvalidArgument);
  EXPECT_EQ(std::string(last_error()).rfind("varlen is NULL", 0), 0u) << last_error();
}

TEST_F(Validation, DefaultStructsCarryTheirSize) {
  EXPECT_EQ(default_forward_options().struct_size, sizeof(hopattn_forward_options));
  EXPECT_EQ(default_forward_options().workspace, nullptr);
  EXPECT_EQ(default_forward_options().workspace_bytes, 0u);
  EXPECT_EQ(default_varlen().struct_size, sizeof(hopattn_varlen));
  EXPECT_EQ(default_varlen().batch, 0);
  EXPECT_EQ(default_varlen().cu_seqlens_q, nullptr);
}

// --- Workspace ---

TEST_F(Validation, CpuNeedsNoWorkspace) {
  expect_accepted();
  EXPECT_EQ(call.workspace_needed, 0u);
  EXPECT_EQ(call.problem.workspace, nullptr);
}

TEST_F(Validation, PassesTheCallersWorkspaceToTheBackend) {
  on_a_gpu();
  sm90_workspace = 4096;
  options.workspace = workspace_slot();
  options.workspace_bytes = 8192;
  spaces[options.workspace] = MemorySpace::Device;
  expect_accepted();
  EXPECT_EQ(call.workspace_needed, 4096u);
  EXPECT_EQ(call.problem.workspace, options.workspace);
  EXPECT_EQ(call.problem.workspace_bytes, 8192u);
}

TEST_F(Validation, RejectsWorkspaceSmallerThanNeeded) {
  on_a_gpu();
  sm90_workspace = 4096;
  options.workspace = workspace_slot();
  options.workspace_bytes = 4095;
  spaces[options.workspace] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->workspace_bytes is 4095 but the call needs 4096 bytes");
}

TEST_F(Validation, RejectsWorkspaceNotAlignedTo256Bytes) {
  options.workspace = static_cast<char*>(workspace_slot()) + 128;
  options.workspace_bytes = 1024;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options->workspace is not 256-byte aligned");
}

TEST_F(Validation, RejectsWorkspaceInTheOtherMemorySpace) {
  on_a_gpu();
  options.workspace = workspace_slot();
  options.workspace_bytes = 1024;
  spaces[options.workspace] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->workspace is host memory; the SM90 backend needs device memory");
  SetUp();
  spaces.clear();
  options.backend = HOPATTN_BACKEND_CPU;
  options.workspace = workspace_slot();
  options.workspace_bytes = 1024;
  spaces[options.workspace] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->workspace is device memory; the CPU backend needs host memory");
}

TEST_F(Validation, WorkspaceQueryAnswersTheSm90Size) {
  on_a_gpu();
  sm90_workspace = 12345;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, nullptr, &options, system(), call),
            Status::kOk)
      << last_error();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
  EXPECT_EQ(call.workspace_needed, 12345u);
  EXPECT_EQ(call.problem.o, nullptr);
}

TEST_F(Validation, WorkspaceQueryAnswersZeroOnTheCpu) {
  sm90_workspace = 12345;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, nullptr, &options, system(), call),
            Status::kOk)
      << last_error();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  EXPECT_EQ(call.workspace_needed, 0u);
}

TEST_F(Validation, WorkspaceQueryValidatesLikeTheCall) {
  k.heads = v.heads = 3;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, nullptr, &options, system(), call),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("must be a multiple of k.heads (3)"), std::string::npos);
  SetUp();
  on_a_gpu();
  q.seq_stride = 4 * 64 + 4;
  q.batch_stride = 64 * q.seq_stride;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, nullptr, &options, system(), call),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("q.seq_stride is 260 elements"), std::string::npos);
  SetUp();
  as_varlen();
  varlen.max_seqlen_q = 0;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, &varlen, &options, system(), call),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("varlen->max_seqlen_q is 0"), std::string::npos);
}

TEST_F(Validation, WorkspaceQueryOfAVarlenCall) {
  as_varlen();
  on_a_gpu();
  with_unreadable_varlen_metadata();
  for (const void* p : {static_cast<const void*>(varlen.cu_seqlens_q),
                        static_cast<const void*>(varlen.cu_seqlens_k)}) {
    spaces[p] = MemorySpace::Device;
  }
  spaces[varlen.seqused_k] = MemorySpace::Device;
  sm90_workspace = 256;
  EXPECT_EQ(validate_forward_workspace_query(&q, &k, &v, &varlen, &options, system(), call),
            Status::kOk)
      << last_error();
  EXPECT_TRUE(call.problem.seqlens.varlen());
  EXPECT_EQ(call.workspace_needed, 256u);
}

// --- Variable-length batches ---

TEST_F(Validation, AcceptsAVarlenCallAndResolvesTheProblem) {
  as_varlen();
  varlen.seqused_k = seqused_k.data();
  options.causal = 1;
  expect_accepted();
  const SeqlenLayout& s = call.problem.seqlens;
  EXPECT_TRUE(s.varlen());
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seqlen_q, 30);
  EXPECT_EQ(s.seqlen_k, 30);
  EXPECT_EQ(s.total_q, 40);
  EXPECT_EQ(s.total_k, 70);
  EXPECT_EQ(s.cu_seqlens_q, cu_seqlens_q.data());
  EXPECT_EQ(s.cu_seqlens_k, cu_seqlens_k.data());
  EXPECT_EQ(s.seqused_k, seqused_k.data());
  const Sequence third = sequence_of(s, 2);
  EXPECT_EQ(third.q_begin, 10);
  EXPECT_EQ(third.seqlen_q, 30);
  EXPECT_EQ(third.k_begin, 45);
  EXPECT_EQ(third.seqlen_k, 20);  // seqused_k
}

TEST_F(Validation, RejectsNullVarlen) {
  clear_error();
  EXPECT_EQ(validate_forward_varlen(&q, &k, &v, &o, lse, nullptr, &options, system(), call),
            Status::kInvalidArgument);
  EXPECT_STREQ(last_error(), "varlen is NULL");
}

TEST_F(Validation, VarlenTensorsMustHaveBatchOne) {
  for (const char* name : kTensorNames) {
    SCOPED_TRACE(name);
    SetUp();
    as_varlen();
    hopattn_tensor* t = tensor(name);
    t->batch = 2;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) +
                        ".batch is 2; a variable-length batch packs its sequences "
                        "along seqlen, so q, k, v and o have batch 1");
  }
}

TEST_F(Validation, RejectsVarlenBatchBelowOne) {
  as_varlen();
  for (int64_t batch : {0, -1}) {
    varlen.batch = batch;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "varlen->batch is " + std::to_string(batch) + "; it must be >= 1");
  }
}

TEST_F(Validation, RejectsNullPrefixSums) {
  as_varlen();
  varlen.cu_seqlens_q = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->cu_seqlens_q is NULL");
  as_varlen();
  varlen.cu_seqlens_k = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->cu_seqlens_k is NULL");
}

TEST_F(Validation, RejectsVarlenArraysNotAlignedTo4Bytes) {
  const char* names[] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    as_varlen();
    varlen.seqused_k = seqused_k.data();
    const int32_t** arrays[] = {&varlen.cu_seqlens_q, &varlen.cu_seqlens_k, &varlen.seqused_k};
    *arrays[i] = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(*arrays[i]) + 2);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string("varlen->") + names[i] + " is not 4-byte aligned");
  }
}

TEST_F(Validation, RejectsMaxSeqlenBelowOne) {
  as_varlen();
  varlen.max_seqlen_q = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->max_seqlen_q is 0; it must be >= 1");
  as_varlen();
  varlen.max_seqlen_k = -5;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->max_seqlen_k is -5; it must be >= 1");
}

TEST_F(Validation, RejectsFirstPrefixSumOtherThanZero) {
  as_varlen();
  cu_seqlens_q[0] = 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->cu_seqlens_q[0] is 1; it must be 0");
  as_varlen();
  cu_seqlens_k[0] = -1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->cu_seqlens_k[0] is -1; it must be 0");
}

TEST_F(Validation, RejectsDecreasingPrefixSums) {
  as_varlen();
  cu_seqlens_q = {0, 10, 5, 40};
  varlen.cu_seqlens_q = cu_seqlens_q.data();
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_q[2] is 5 but varlen->cu_seqlens_q[1] is 10; the prefix "
                  "sums must not decrease");
  as_varlen();
  cu_seqlens_k = {0, 30, 29, 70};
  varlen.cu_seqlens_k = cu_seqlens_k.data();
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->cu_seqlens_k[2] is 29");
}

TEST_F(Validation, RejectsLastPrefixSumOtherThanTheTotal) {
  as_varlen();
  cu_seqlens_q[3] = 39;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_q[3] is 39 but q.seqlen (total_q) is 40");
  as_varlen();
  cu_seqlens_k[3] = 71;
  varlen.max_seqlen_k = 100;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_k[3] is 71 but k.seqlen (total_k) is 70");
}

TEST_F(Validation, RejectsASequenceLongerThanMaxSeqlen) {
  as_varlen();
  varlen.max_seqlen_q = 29;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "sequence 2 has 30 queries (varlen->cu_seqlens_q[3] - varlen->cu_seqlens_q[2]) "
                  "but varlen->max_seqlen_q is 29");
  as_varlen();
  varlen.max_seqlen_k = 25;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "sequence 0 has 30 keys (varlen->cu_seqlens_k[1] - varlen->cu_seqlens_k[0]) but "
                  "varlen->max_seqlen_k is 25");
}

TEST_F(Validation, RejectsSequsedKOutsideTheKeyLength) {
  as_varlen();
  varlen.seqused_k = seqused_k.data();
  seqused_k[2] = 26;  // sequence 2 has 25 keys
  expect_rejected(
      HOPATTN_ERROR_INVALID_ARGUMENT,
      "varlen->seqused_k[2] is 26; it must be in [0, 25], the key length of sequence 2");
  seqused_k[2] = 25;
  seqused_k[0] = -1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->seqused_k[0] is -1");
}

TEST_F(Validation, AcceptsEmptySequencesAndLargerMaxSeqlens) {
  as_varlen();
  cu_seqlens_q = {0, 0, 40, 40};
  cu_seqlens_k = {0, 0, 0, 70};
  varlen.cu_seqlens_q = cu_seqlens_q.data();
  varlen.cu_seqlens_k = cu_seqlens_k.data();
  varlen.max_seqlen_q = varlen.max_seqlen_k = 1000;
  expect_accepted();
}

TEST_F(Validation, VarlenLseIsHeadsByTotalQ) {
  as_varlen();
  // lse is (heads_q, total_q) = 160 floats: right behind it may start another buffer.
  lse = reinterpret_cast<float*>(static_cast<char*>(o.data) - 160 * sizeof(float));
  expect_accepted();
  lse = reinterpret_cast<float*>(static_cast<char*>(o.data) - 159 * sizeof(float));
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse shares memory with o");
}

TEST_F(Validation, CpuRejectsVarlenMetadataInDeviceMemory) {
  as_varlen();
  spaces[varlen.cu_seqlens_k] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_k is device memory; the CPU backend needs host memory");
}

TEST_F(Validation, Sm90RejectsVarlenMetadataInHostMemory) {
  as_varlen();
  on_a_gpu();
  spaces[varlen.cu_seqlens_k] = MemorySpace::Device;
  // AUTO chose SM90 for the tensors; cu_seqlens_q is still host memory.
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_q is host memory; the SM90 backend needs device memory");
}

// The SM90 backend cannot read the metadata without a device sync: validation must not either.
TEST_F(Validation, Sm90DoesNotReadVarlenMetadata) {
  as_varlen();
  on_a_gpu();
  with_unreadable_varlen_metadata();
  spaces[varlen.cu_seqlens_q] = spaces[varlen.cu_seqlens_k] = spaces[varlen.seqused_k] =
      MemorySpace::Device;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
}

// --- The SM90 rules (sm90/sm90_rules.cpp), through validation with a faked GPU ---

TEST_F(Validation, Sm90RejectsBroadcastViews) {
  on_a_gpu();
  k.batch_stride = v.batch_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "k.batch_stride is 0 (a broadcast view), which the SM90 backend does not "
                  "support; pass a materialised tensor");
  SetUp();
  on_a_gpu();
  q.head_stride = 0;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED, "q.head_stride is 0 (a broadcast view)");
}

// A size-1 dimension is never stepped, but its stride still goes into the TMA descriptor, which
// takes only positive multiples of 16 bytes (sm90_rules.hpp); the CPU backend takes any.
TEST_F(Validation, Sm90RejectsZeroStridesOfSizeOneDimensionsTheCpuTakesThem) {
  for (hopattn_tensor* t : {&q, &k, &v, &o}) {
    t->batch = 1;
    t->batch_stride = 0;
  }
  expect_accepted();
  on_a_gpu();
  EXPECT_EQ(validate(), HOPATTN_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(last_error()).find("q.batch_stride is 0; the SM90 backend's TMA descriptors need positive strides"),
            std::string::npos)
      << last_error();
}

// Tensors too large for the slots: addresses far apart that nothing dereferences.
void spread_far_apart(std::initializer_list<hopattn_tensor*> tensors) {
  uintptr_t address = uintptr_t{1} << 46;
  for (hopattn_tensor* t : tensors) {
    t->data = reinterpret_cast<void*>(address);
    address += uintptr_t{1} << 46;
  }
}

TEST_F(Validation, Sm90RejectsSeqlenAbove32Bits) {
  spread_far_apart({&q, &k, &v, &o});
  lse = nullptr;
  on_a_gpu();
  for (hopattn_tensor* t : {&q, &o}) {
    *t = contiguous(t->data, HOPATTN_DTYPE_BFLOAT16, 1, int64_t{1} << 31, 1, 64);
  }
  for (hopattn_tensor* t : {&k, &v}) {
    *t = contiguous(t->data, HOPATTN_DTYPE_BFLOAT16, 1, 64, 1, 64);
  }
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "q.seqlen is 2147483648; the SM90 backend needs it below 2^31");
}

TEST_F(Validation, Sm90RejectsAGridOf2To31Ctas) {
  spread_far_apart({&q, &k, &v, &o});
  lse = nullptr;
  on_a_gpu();
  // 2^16 sequences of 64 queries with 2^15 heads: 2^31 CTAs of 64 rows.
  for (hopattn_tensor* t : {&q, &k, &v, &o}) {
    *t = contiguous(t->data, HOPATTN_DTYPE_BFLOAT16, int64_t{1} << 16, 64, int64_t{1} << 15, 64);
  }
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "ceil(q.seqlen / 64) * q.heads * q.batch is 2147483648; the SM90 backend's "
                  "grid needs it below 2^31");
}

TEST_F(Validation, Sm90RejectsVarlenSizesAbove32Bits) {
  // Straight to the rules: a problem with such sizes needs no memory to describe.
  ForwardProblem p;
  p.dtype = DType::kBFloat16;
  p.heads_q = p.heads_kv = 1;
  p.head_dim = 64;
  static const int32_t metadata[4] = {};
  p.seqlens.cu_seqlens_q = p.seqlens.cu_seqlens_k = metadata;
  const auto reset = [&] {
    p.seqlens.batch = 2;
    p.seqlens.seqlen_q = p.seqlens.seqlen_k = 64;
    p.seqlens.total_q = p.seqlens.total_k = 128;
  };
  struct Limit {
    int64_t* field;
    int64_t value;
    const char* message;
  };
  const Limit limits[] = {
      {&p.seqlens.total_q, int64_t{1} << 31, "q.seqlen is 2147483648"},
      {&p.seqlens.total_k, int64_t{1} << 31, "k.seqlen is 2147483648"},
      {&p.seqlens.batch, INT32_MAX, "varlen->batch + 1 is 2147483648"},
      {&p.seqlens.seqlen_q, int64_t{1} << 31, "varlen->max_seqlen_q is 2147483648"},
      {&p.seqlens.seqlen_k, int64_t{1} << 32, "varlen->max_seqlen_k is 4294967296"}};
  for (const Limit& limit : limits) {
    SCOPED_TRACE(limit.message);
    reset();
    EXPECT_EQ(sm90::check_forward_rules(p), Status::kOk) << last_error();
    *limit.field = limit.value;
    clear_error();
    EXPECT_EQ(sm90::check_forward_rules(p), Status::kUnsupported);
    EXPECT_NE(std::string(last_error()).find(limit.message), std::string::npos) << last_error();
  }
}

TEST_F(Validation, Sm90ListsWhatItSupportsFromTheBuild) {
  on_a_gpu();
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->dtype = HOPATTN_DTYPE_FLOAT16;
  for (hopattn_tensor* t : {&q, &k, &v, &o}) t->head_dim = t->head_stride = 32;
  q.seq_stride = o.seq_stride = 4 * 32;
  k.seq_stride = v.seq_stride = 2 * 32;
  q.batch_stride = o.batch_stride = 64 * 4 * 32;
  k.batch_stride = v.batch_stride = 80 * 2 * 32;
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "dtype float16 with head_dim 32 is not supported by the SM90 backend (it "
                  "supports bfloat16 with head_dim 64/128/256; float16 with head_dim 64/128/256; "
                  "the CPU backend supports every dtype with head_dim 1 to 512)");
}

}  // namespace
}  // namespace hopattn
