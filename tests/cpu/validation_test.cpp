// One test per validation rule, against validate_forward with faked system queries, so that the
// SM90 rules run without a GPU. Every tensor points into memory mapped PROT_NONE: a
// validation that read or wrote a tensor would crash the test.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "api/validate.hpp"
#include "core/error.hpp"

namespace hopattn {
namespace {

constexpr int64_t kSlotBytes = 1 << 20;

// Four tensor slots and one for lse, all inaccessible.
char* inaccessible_slots() {
  static void* region =
      mmap(nullptr, 5 * kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
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
    // What the SM90 kernels of this project compile.
    queries.sm90_supports = [](hopattn_dtype dtype, int64_t head_dim) {
      return dtype != HOPATTN_DTYPE_FLOAT32 &&
             (head_dim == 64 || head_dim == 128 || head_dim == 256);
    };
    return queries;
  }

  hopattn_status validate() {
    clear_error();
    return validate_forward(&q, &k, &v, &o, lse, &options, system(), call);
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

  hopattn_tensor q{}, k{}, v{}, o{};
  float* lse = nullptr;
  hopattn_forward_options options{};
  std::map<const void*, MemorySpace> spaces;
  bool sm90_built = false, sm90_device = false;
  ForwardCall call;
};

const char* const kTensorNames[] = {"q", "k", "v", "o"};

TEST_F(Validation, AcceptsAValidCallAndResolvesTheProblem) {
  options.causal = 1;
  options.softmax_scale = 0.25f;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  const AttentionProblem& p = call.problem;
  EXPECT_EQ(p.dtype, HOPATTN_DTYPE_BFLOAT16);
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seqlen_q, 64);
  EXPECT_EQ(p.seqlen_k, 80);
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
  EXPECT_EQ(validate_forward(&q, &k, &v, &o, nullptr, nullptr, system(), call), HOPATTN_OK);
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
              HOPATTN_ERROR_INVALID_ARGUMENT);
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
    tensor(name)->dtype = static_cast<hopattn_dtype>(3);
    expect_rejected(
        HOPATTN_ERROR_INVALID_ARGUMENT,
        std::string(name) + ".dtype is 3; allowed: 0 (float32), 1 (bfloat16), 2 (float16)");
  }
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
  k.seq_stride = int64_t{1} << 62;  // (80 - 1) * 2^62 overflows
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "k: the offset of its last element");
  SetUp();
  // The offset fits, its size in bytes (2 per bfloat16 element) does not.
  v.batch = 1;
  v.seqlen = 2;
  v.batch_stride = 0;
  v.seq_stride = (int64_t{1} << 62) + 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "v: the offset of its last element, or its extent in bytes");
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

}  // namespace
}  // namespace hopattn
