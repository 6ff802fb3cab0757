// One test per rule of the backward's validation (validate_backward.cpp, and the shared rules as
// the backward applies them), against validate_backward / validate_backward_varlen /
// validate_backward_workspace_query with faked system queries, so that the SM90 rules run without
// a GPU. Every tensor points into memory mapped PROT_NONE: a validation that read or wrote one
// would crash the test.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/abi.hpp"
#include "api/validate.hpp"
#include "core/error.hpp"

namespace hopattn {
namespace {

constexpr int64_t kSlotBytes = 1 << 20;
constexpr int kTensorSlots = 8;  // q, k, v, o, d_o, dq, dk, dv; then lse, then varlen/workspace

char* inaccessible_slots() {
  static void* region = mmap(nullptr, (kTensorSlots + 2) * kSlotBytes, PROT_NONE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(region, MAP_FAILED);
  return static_cast<char*>(region);
}

hopattn_tensor contiguous(void* data, int64_t batch, int64_t seqlen, int64_t heads,
                          int64_t head_dim) {
  return {data,     HOPATTN_DTYPE_BFLOAT16,   batch,           seqlen, heads,
          head_dim, seqlen * heads * head_dim, heads * head_dim, head_dim};
}

const char* const kNames[] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};
constexpr bool kQueryShaped[] = {true, false, false, true, true, true, false, false};

class BackwardValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    shape(2, 64, 80, 4, 2);
    spaces.clear();
    sm90_built = sm90_device = varlen_call = false;
    sm90_workspace = 0;
  }

  // Fixed lengths (batch > 0) or, with `batch` 1, the packed tensors of a varlen call.
  void shape(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t heads_kv) {
    char* slots = inaccessible_slots();
    for (int i = 0; i < kTensorSlots; ++i) {
      tensors[i] = kQueryShaped[i] ? contiguous(slots + i * kSlotBytes, batch, seqlen_q, heads_q, 64)
                                   : contiguous(slots + i * kSlotBytes, batch, seqlen_k, heads_kv, 64);
    }
    lse = reinterpret_cast<float*>(slots + kTensorSlots * kSlotBytes);
    options = default_backward_options();
  }

  hopattn_tensor& t(const std::string& name) {
    for (int i = 0; i < kTensorSlots; ++i) {
      if (name == kNames[i]) return tensors[i];
    }
    throw std::invalid_argument(name);
  }

  SystemQueries system() {
    SystemQueries queries;
    queries.memory_space_of = [this](const void* p) {
      const auto found = spaces.find(p);
      return found == spaces.end() ? MemorySpace::Host : found->second;
    };
    queries.sm90_built = [this] { return sm90_built; };
    queries.sm90_device_available = [this] { return sm90_device; };
    queries.sm90_supports = [](DType dtype, int64_t) { return dtype != DType::kFloat32; };
    queries.sm90_supported_list = [] { return std::string("bfloat16 with head_dim 64"); };
    queries.sm90_forward_workspace_size = [](const ForwardProblem&) { return size_t{0}; };
    // A build whose backward kernels cover head_dim 64 only.
    queries.sm90_supports_backward = [](DType dtype, int64_t head_dim) {
      return dtype != DType::kFloat32 && head_dim == 64;
    };
    queries.sm90_backward_supported_list = [] {
      return std::string("bfloat16 with head_dim 64; float16 with head_dim 64");
    };
    queries.sm90_backward_workspace_size = [this](const BackwardProblem&) {
      return sm90_workspace;
    };
    return queries;
  }

  hopattn_status validate() {
    clear_error();
    hopattn_tensor* x = tensors;
    return c_status(varlen_call
                        ? validate_backward_varlen(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5],
                                                   &x[6], &x[7], &varlen, &options, system(), call)
                        : validate_backward(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5], &x[6],
                                            &x[7], &options, system(), call));
  }

  void expect_accepted() { EXPECT_EQ(validate(), HOPATTN_OK) << last_error(); }

  void expect_rejected(hopattn_status status, const std::string& fragment) {
    EXPECT_EQ(validate(), status) << last_error();
    EXPECT_NE(std::string(last_error()).find(fragment), std::string::npos)
        << "message \"" << last_error() << "\" lacks \"" << fragment << "\"";
  }

  void on_a_gpu() {
    sm90_built = sm90_device = true;
    for (const hopattn_tensor& x : tensors) spaces[x.data] = MemorySpace::Device;
    spaces[lse] = MemorySpace::Device;
  }

  // q, o, d_o, dq (1, 40, 4, 64); k, v, dk, dv (1, 70, 2, 64) in three sequences, one empty.
  void as_varlen() {
    varlen_call = true;
    shape(1, 40, 70, 4, 2);
    cu_seqlens_q = {0, 10, 10, 40};
    cu_seqlens_k = {0, 30, 45, 70};
    varlen = default_varlen();
    varlen.batch = 3;
    varlen.cu_seqlens_q = cu_seqlens_q.data();
    varlen.cu_seqlens_k = cu_seqlens_k.data();
    varlen.max_seqlen_q = 30;
    varlen.max_seqlen_k = 30;
  }

  void* workspace_slot() { return inaccessible_slots() + (kTensorSlots + 1) * kSlotBytes; }

  hopattn_tensor tensors[kTensorSlots]{};
  float* lse = nullptr;
  hopattn_backward_options options{};
  std::map<const void*, MemorySpace> spaces;
  bool sm90_built = false, sm90_device = false;
  size_t sm90_workspace = 0;
  bool varlen_call = false;
  hopattn_varlen varlen{};
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;
  BackwardCall call;
};

TEST_F(BackwardValidation, AcceptsAValidCallAndResolvesTheProblem) {
  options.causal = 1;
  options.softmax_scale = 0.25f;
  options.deterministic = 1;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  const BackwardProblem& p = call.problem;
  EXPECT_EQ(p.dtype, DType::kBFloat16);
  EXPECT_EQ(p.seqlens.batch, 2);
  EXPECT_EQ(p.seqlens.seqlen_q, 64);
  EXPECT_EQ(p.seqlens.seqlen_k, 80);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.q, t("q").data);
  EXPECT_EQ(p.d_o, t("d_o").data);
  EXPECT_EQ(p.dk, t("dk").data);
  EXPECT_EQ(p.lse, lse);
  EXPECT_EQ(p.dv_stride.seq, 2 * 64);
  EXPECT_EQ(p.dq_stride.seq, 4 * 64);
  EXPECT_TRUE(p.causal);
  EXPECT_TRUE(p.deterministic);
  EXPECT_EQ(p.softmax_scale, 0.25f);
}

TEST_F(BackwardValidation, NullOptionsMeanDefaults) {
  hopattn_tensor* x = tensors;
  EXPECT_EQ(validate_backward(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5], &x[6], &x[7],
                              nullptr, system(), call),
            Status::kOk);
  EXPECT_FALSE(call.problem.causal);
  EXPECT_FALSE(call.problem.deterministic);
  EXPECT_EQ(call.problem.softmax_scale, 0.125f);
}

TEST_F(BackwardValidation, RejectsEachNullTensorStructNamingIt) {
  for (int i = 0; i < kTensorSlots; ++i) {
    SCOPED_TRACE(kNames[i]);
    const hopattn_tensor* x[kTensorSlots];
    for (int j = 0; j < kTensorSlots; ++j) x[j] = &tensors[j];
    x[i] = nullptr;
    clear_error();
    EXPECT_EQ(validate_backward(x[0], x[1], x[2], x[3], x[4], lse, x[5], x[6], x[7], &options,
                                system(), call),
              Status::kInvalidArgument);
    EXPECT_EQ(std::string(last_error()), std::string(kNames[i]) + " is NULL");
  }
}

TEST_F(BackwardValidation, RejectsEachNullDataPointer) {
  for (const char* name : kNames) {
    SCOPED_TRACE(name);
    SetUp();
    t(name).data = nullptr;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, std::string(name) + ".data is NULL");
  }
}

TEST_F(BackwardValidation, LseIsRequired) {
  lse = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "lse is NULL; the backward needs the forward's float32 LSE, (batch, heads_q, "
                  "seqlen_q)");
  as_varlen();
  lse = nullptr;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse is NULL; the backward needs the forward's "
                                                  "float32 LSE, (heads_q, total_q)");
}

TEST_F(BackwardValidation, RejectsEachTensorOfAnotherDtype) {
  for (const char* name : kNames) {
    if (std::string(name) == "q") continue;
    SCOPED_TRACE(name);
    SetUp();
    t(name).dtype = HOPATTN_DTYPE_FLOAT16;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) + ".dtype is float16 but q.dtype is bfloat16");
  }
}

TEST_F(BackwardValidation, RejectsFloat8E4M3) {
  for (const char* name : kNames) {
    SCOPED_TRACE(name);
    SetUp();
    t(name).dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string(name) +
                        ".dtype is float8_e4m3; hopattn_backward takes float32, bfloat16 or "
                        "float16");
  }
}

TEST_F(BackwardValidation, ReadsEnumFieldsAsIntegers) {
  for (int value : {-1, 4, 255}) {
    SCOPED_TRACE(value);
    SetUp();
    std::memcpy(&t("dv").dtype, &value, sizeof value);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "dv.dtype is " + std::to_string(value) + "; allowed: 0 (float32)");
    SetUp();
    std::memcpy(&options.backend, &value, sizeof value);
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    "options.backend is " + std::to_string(value) + "; allowed: 0 (AUTO)");
  }
}

TEST_F(BackwardValidation, RejectsShapesThatDisagreeNamingTheField) {
  struct Mismatch {
    const char* name;
    int64_t hopattn_tensor::*field;
    const char* message;
  };
  for (const Mismatch& m :
       {Mismatch{"o", &hopattn_tensor::seqlen, "o.seqlen is 65 but q.seqlen is 64; o must have "
                                               "q's shape (batch, seqlen_q, heads_q, head_dim)"},
        {"d_o", &hopattn_tensor::seqlen, "d_o.seqlen is 65 but q.seqlen is 64"},
        {"dq", &hopattn_tensor::heads, "dq.heads is 5 but q.heads is 4"},
        {"v", &hopattn_tensor::seqlen, "v.seqlen is 81 but k.seqlen is 80; v must have k's shape "
                                       "(batch, seqlen_k, heads_kv, head_dim)"},
        {"dk", &hopattn_tensor::heads, "dk.heads is 3 but k.heads is 2"},
        {"dv", &hopattn_tensor::seqlen, "dv.seqlen is 81 but k.seqlen is 80"},
        {"dq", &hopattn_tensor::head_dim, "dq.head_dim is 65 but q.head_dim is 64"},
        {"k", &hopattn_tensor::head_dim, "k.head_dim is 65 but q.head_dim is 64"},
        {"dv", &hopattn_tensor::batch, "dv.batch is 3 but q.batch is 2"}}) {
    SCOPED_TRACE(m.message);
    SetUp();
    hopattn_tensor& x = t(m.name);
    x.*m.field += 1;
    x.batch_stride = x.seqlen * x.heads * x.head_dim;
    x.seq_stride = x.heads * x.head_dim;
    x.head_stride = x.head_dim;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, m.message);
  }
}

TEST_F(BackwardValidation, RejectsQueryHeadsNotAMultipleOfKvHeads) {
  for (const char* name : {"k", "v", "dk", "dv"}) t(name).heads = 3;
  for (const char* name : {"k", "v", "dk", "dv"}) t(name).batch_stride = 80 * 3 * 64;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "q.heads (4) must be a multiple of k.heads (3)");
}

TEST_F(BackwardValidation, RejectsStridesAndExtentsLikeEveryTensor) {
  t("dk").seq_stride = -1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dk.seq_stride is -1; strides must be >= 0");
  SetUp();
  t("d_o").batch_stride = INT64_MAX / 2;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "d_o: the offset of its last element");
  SetUp();
  t("dq").data = static_cast<char*>(t("dq").data) + 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dq.data is not 2-byte aligned");
}

TEST_F(BackwardValidation, RejectsGradientsWhoseElementsOverlap) {
  t("dq").head_stride = 32;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dq: dq.head_stride is 32 but must exceed 63");
  SetUp();
  t("dk").seq_stride = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dk: dk.seq_stride is 0");
  SetUp();
  t("dv").batch_stride = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dv: dv.batch_stride is 0");
}

TEST_F(BackwardValidation, AcceptsBroadcastInputs) {
  t("k").batch_stride = t("v").batch_stride = 0;
  t("d_o").head_stride = 0;
  expect_accepted();
}

TEST_F(BackwardValidation, RejectsGradientsSharingMemoryWithAnInputOrEachOther) {
  for (const char* input : {"q", "k", "v", "o", "d_o"}) {
    SCOPED_TRACE(input);
    SetUp();
    t("dq").data = static_cast<char*>(t(input).data) + 128;
    expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                    std::string("dq shares memory with ") + input +
                        "; outputs must not overlap the inputs");
  }
  SetUp();
  t("dk").data = lse;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dk shares memory with lse");
  SetUp();
  t("dv").data = t("dk").data;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "dv shares memory with dk; each output must be a buffer of its own");
  SetUp();
  t("dq").data = t("dv").data;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dv shares memory with dq");
}

TEST_F(BackwardValidation, RejectsMisalignedOrOversizedLse) {
  lse = reinterpret_cast<float*>(reinterpret_cast<char*>(lse) + 2);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse is not 4-byte aligned");
  SetUp();
  lse = reinterpret_cast<float*>(UINTPTR_MAX - 1023);
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "lse: batch * heads_q * seqlen_q = 2 * 4 * 64 float32 values do not fit");
}

TEST_F(BackwardValidation, GrowableOptions) {
  options.struct_size = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->struct_size is 0; it must be sizeof(hopattn_backward_options)");
  options.struct_size = kBackwardOptionsFirstSize - 1;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "hopattn_default_backward_options() or "
                                                  "hopattn_init_backward_options()");
  // From a newer header: a bigger struct whose unknown tail holds its defaults (zero) is read;
  // one that sets a field this library does not know is refused.
  struct Newer {
    hopattn_backward_options known;
    int64_t added_later;
  } newer{};
  newer.known = default_backward_options();
  newer.known.struct_size = sizeof newer;
  newer.known.causal = 1;
  hopattn_tensor* x = tensors;
  clear_error();
  EXPECT_EQ(validate_backward(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5], &x[6], &x[7],
                              &newer.known, system(), call),
            Status::kOk)
      << last_error();
  EXPECT_TRUE(call.problem.causal);
  newer.added_later = 42;
  EXPECT_EQ(validate_backward(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5], &x[6], &x[7],
                              &newer.known, system(), call),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("byte " + std::to_string(sizeof(hopattn_backward_options)) +
                                           " is not zero"),
            std::string::npos)
      << last_error();
}

TEST_F(BackwardValidation, InitWritesTheDefaultsIntoTheCallersSizeOnly) {
  unsigned char bytes[sizeof(hopattn_backward_options) + 8];
  std::memset(bytes, 0xab, sizeof bytes);
  auto* written = reinterpret_cast<hopattn_backward_options*>(bytes);
  ASSERT_EQ(init_backward_options(written, kBackwardOptionsFirstSize), Status::kOk);
  EXPECT_EQ(written->struct_size, kBackwardOptionsFirstSize);
  EXPECT_EQ(written->backend, HOPATTN_BACKEND_AUTO);
  EXPECT_EQ(written->deterministic, 0);
  EXPECT_EQ(written->workspace_bytes, 0u);
  for (size_t i = kBackwardOptionsFirstSize; i < sizeof bytes; ++i) EXPECT_EQ(bytes[i], 0xab);
  EXPECT_EQ(init_backward_options(written, kBackwardOptionsFirstSize - 1),
            Status::kInvalidArgument);
  EXPECT_EQ(init_backward_options(nullptr, sizeof(hopattn_backward_options)),
            Status::kInvalidArgument);
  EXPECT_EQ(default_backward_options().struct_size, sizeof(hopattn_backward_options));
}

TEST_F(BackwardValidation, RejectsNegativeOrNonFiniteSoftmaxScale) {
  options.softmax_scale = -1.f;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options.softmax_scale is -1");
}

TEST_F(BackwardValidation, AutoChoosesByMemorySpace) {
  sm90_built = sm90_device = true;
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_CPU);
  on_a_gpu();
  expect_accepted();
  EXPECT_EQ(call.backend, HOPATTN_BACKEND_SM90);
  spaces[t("dv").data] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "backend AUTO: dv.data is host memory but q.data is device memory");
}

TEST_F(BackwardValidation, ExplicitBackendsNameThePointerInTheWrongSpace) {
  options.backend = HOPATTN_BACKEND_CPU;
  spaces[lse] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "lse is device memory; the CPU backend needs "
                                                  "host memory");
  SetUp();
  on_a_gpu();
  options.backend = HOPATTN_BACKEND_SM90;
  spaces[t("d_o").data] = MemorySpace::Host;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "d_o.data is host memory; the SM90 backend");
}

TEST_F(BackwardValidation, Sm90NeedsABackwardKernelForTheShape) {
  on_a_gpu();
  for (int i = 0; i < kTensorSlots; ++i) {
    tensors[i] = kQueryShaped[i] ? contiguous(tensors[i].data, 2, 64, 4, 128)
                                 : contiguous(tensors[i].data, 2, 80, 2, 128);
  }
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "dtype bfloat16 with head_dim 128 is not supported by the SM90 backend's "
                  "backward pass (it supports bfloat16 with head_dim 64; float16 with head_dim 64");
  SetUp();
  sm90_built = false;
  on_a_gpu();
  sm90_built = false;
  expect_rejected(HOPATTN_ERROR_BACKEND_UNAVAILABLE, "the SM90 backend is not in this build");
}

TEST_F(BackwardValidation, Sm90RulesNameTheBackwardsTensors) {
  struct Rule {
    const char* name;
    void (*break_it)(hopattn_tensor&);
    hopattn_status status;
    const char* message;
  };
  for (const Rule& rule :
       {Rule{"q", [](hopattn_tensor& x) { x.data = static_cast<char*>(x.data) + 2; },
             HOPATTN_ERROR_INVALID_ARGUMENT, "q.data is not 16-byte aligned"},
        {"d_o", [](hopattn_tensor& x) { x.data = static_cast<char*>(x.data) + 2; },
         HOPATTN_ERROR_INVALID_ARGUMENT, "d_o.data is not 16-byte aligned"},
        {"dq",
         [](hopattn_tensor& x) {
           x.seq_stride += 1;
           x.batch_stride += 64;
         },
         HOPATTN_ERROR_INVALID_ARGUMENT, "dq.seq_stride is 257 elements = 514 bytes"},
        {"dk",
         [](hopattn_tensor& x) {
           x.head_stride = 68;  // 136 bytes; seq_stride 272 and batch_stride 21760 bytes are fine
           x.seq_stride = 2 * 68;
           x.batch_stride = 80 * 2 * 68;
         },
         HOPATTN_ERROR_INVALID_ARGUMENT, "dk.head_stride is 68 elements = 136 bytes"},
        {"dv", [](hopattn_tensor& x) { x.data = static_cast<char*>(x.data) + 8; },
         HOPATTN_ERROR_INVALID_ARGUMENT, "dv.data is not 16-byte aligned"},
        {"d_o", [](hopattn_tensor& x) { x.seq_stride = 0; },
         HOPATTN_ERROR_UNSUPPORTED, "d_o.seq_stride is 0 (a broadcast view)"}}) {
    SCOPED_TRACE(rule.message);
    SetUp();
    on_a_gpu();
    rule.break_it(t(rule.name));
    spaces[t(rule.name).data] = MemorySpace::Device;
    expect_rejected(rule.status, rule.message);
  }
  // The same tensors on the CPU: no TMA rules there.
  SetUp();
  t("dk").head_stride = 68;
  t("dk").seq_stride = 2 * 68;
  t("dk").batch_stride = 80 * 2 * 68;
  t("d_o").seq_stride = 0;
  expect_accepted();
}

TEST_F(BackwardValidation, CpuRefusesCallsAboveTheWorkBound) {
  t("k").seqlen = t("v").seqlen = int64_t{1} << 40;
  t("k").seq_stride = t("v").seq_stride = 0;
  t("k").batch_stride = t("v").batch_stride = 0;
  // dk and dv must have k's shape: of 2^40 rows each, overlapping nothing (never touched).
  for (const char* name : {"dk", "dv"}) {
    t(name).seqlen = int64_t{1} << 40;
    t(name).batch_stride = t(name).seqlen * t(name).seq_stride;
  }
  t("dk").data = reinterpret_cast<void*>(uintptr_t{1} << 50);
  t("dv").data = reinterpret_cast<void*>(uintptr_t{1} << 52);
  expect_rejected(HOPATTN_ERROR_UNSUPPORTED,
                  "exceeds the CPU backend's limit of 2^44 = 17592186044416 per call");
}

TEST_F(BackwardValidation, Workspace) {
  on_a_gpu();
  sm90_workspace = 4096;
  hopattn_tensor* x = tensors;
  clear_error();
  ASSERT_EQ(validate_backward_workspace_query(&x[0], &x[1], &x[2], nullptr, &options, system(),
                                              call),
            Status::kOk)
      << last_error();
  EXPECT_EQ(call.workspace_needed, 4096u);
  EXPECT_EQ(call.problem.dq, nullptr);
  EXPECT_EQ(call.problem.dk_stride.seq, t("k").seq_stride);
  options.workspace = workspace_slot();
  spaces[options.workspace] = MemorySpace::Device;
  options.workspace_bytes = 4095;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "options->workspace_bytes is 4095 but the call needs 4096 bytes "
                  "(hopattn_backward_workspace_size)");
  options.workspace_bytes = 4096;
  expect_accepted();
  EXPECT_EQ(call.problem.workspace, options.workspace);
  options.workspace = static_cast<char*>(workspace_slot()) + 16;
  spaces[options.workspace] = MemorySpace::Device;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "options->workspace is not 256-byte aligned");
  // The CPU needs none, and the query validates like the call.
  SetUp();
  EXPECT_EQ(validate_backward_workspace_query(&x[0], &x[1], &x[2], nullptr, &options, system(),
                                              call),
            Status::kOk);
  EXPECT_EQ(call.workspace_needed, 0u);
  t("v").seqlen = 79;
  EXPECT_EQ(validate_backward_workspace_query(&x[0], &x[1], &x[2], nullptr, &options, system(),
                                              call),
            Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error()).find("v.seqlen is 79 but k.seqlen is 80"),
            std::string::npos);
}

TEST_F(BackwardValidation, AcceptsAVarlenCallAndResolvesTheProblem) {
  as_varlen();
  expect_accepted();
  const BackwardProblem& p = call.problem;
  EXPECT_TRUE(p.seqlens.varlen());
  EXPECT_EQ(p.seqlens.batch, 3);
  EXPECT_EQ(p.seqlens.total_q, 40);
  EXPECT_EQ(p.seqlens.total_k, 70);
  EXPECT_EQ(p.seqlens.cu_seqlens_k, cu_seqlens_k.data());
}

TEST_F(BackwardValidation, VarlenRules) {
  as_varlen();
  hopattn_tensor* x = tensors;
  clear_error();
  EXPECT_EQ(validate_backward_varlen(&x[0], &x[1], &x[2], &x[3], &x[4], lse, &x[5], &x[6], &x[7],
                                     nullptr, &options, system(), call),
            Status::kInvalidArgument);
  EXPECT_STREQ(last_error(), "varlen is NULL");
  // Tensors of batch 1.
  t("dv").batch = 2;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "dv.batch is 2; a variable-length batch packs");
  // The metadata, read on the CPU.
  as_varlen();
  cu_seqlens_k[3] = 69;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_k[3] is 69 but k.seqlen (total_k) is 70");
  as_varlen();
  varlen.max_seqlen_q = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->max_seqlen_q is 0");
  as_varlen();
  varlen.struct_size = 0;
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT, "varlen->struct_size is 0");
  // On a GPU, metadata must be device memory (and is not read).
  as_varlen();
  on_a_gpu();
  expect_rejected(HOPATTN_ERROR_INVALID_ARGUMENT,
                  "varlen->cu_seqlens_q is host memory; the SM90 backend needs device memory");
}

}  // namespace
}  // namespace hopattn
