// libFuzzer harness of the C ABI (issue 10): bytes become hopattn_tensor / options / varlen
// descriptors, mostly a coherent small problem with a few fields replaced by adversarial values
// (sizes, strides, dtypes, enums, scales, struct sizes, misaligned or shared buffers), and are
// passed to hopattn_forward, hopattn_forward_varlen and hopattn_forward_workspace_size with the
// CPU and AUTO backends, then to hopattn_backward / hopattn_backward_varlen, q to
// hopattn_quantize_fp8 and its codes to hopattn_forward_fp8 (or, with the varlen metadata,
// hopattn_forward_fp8_varlen). Built with -fsanitize=fuzzer,address,undefined: any crash, memory
// error or undefined behaviour is a finding. Beyond that it checks what the ABI promises about
// every call: a known status, and an error message exactly when the status is not OK.
//
// Every buffer is allocated at the size its descriptor names, so reading one element past a
// tensor, its lse row or its cu_seqlens is caught. Two things the library cannot know are kept
// out: a well-formed descriptor naming more memory than the harness allocates (kMaxBytes), and
// a problem with more work than a fuzzer iteration can afford (kMaxWork); those calls go to
// hopattn_forward_workspace_size only (which must not touch memory) and are counted as skipped.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 20;
constexpr double kMaxWork = 1 << 21;  // multiply-adds of Q K^T and P V

// What happened, printed at exit: the evidence that the fuzzer exercised the paths.
std::map<std::string, uint64_t>& outcomes() {
  static auto* counts = new std::map<std::string, uint64_t>();
  return *counts;
}
void count(const std::string& what) { ++outcomes()[what]; }

void print_outcomes() {
  uint64_t calls = 0;
  for (const auto& [what, n] : outcomes())
    if (what.rfind("skipped", 0) != 0) calls += n;
  std::fprintf(stderr, "[fuzz] %llu C ABI calls; outcomes:\n", static_cast<unsigned long long>(calls));
  for (const auto& [what, n] : outcomes())
    std::fprintf(stderr, "[fuzz]   %-48s %llu\n", what.c_str(), static_cast<unsigned long long>(n));
}

const char* status_word(hopattn_status status) {
  switch (status) {
    case HOPATTN_OK: return "OK";
    case HOPATTN_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case HOPATTN_ERROR_UNSUPPORTED: return "UNSUPPORTED";
    case HOPATTN_ERROR_BACKEND_UNAVAILABLE: return "BACKEND_UNAVAILABLE";
    case HOPATTN_ERROR_CUDA: return "CUDA";
    case HOPATTN_ERROR_INTERNAL: return "INTERNAL";
  }
  return nullptr;
}

void check_and_count(const char* entry, hopattn_status status) {
  const char* word = status_word(status);
  if (word == nullptr) {
    std::fprintf(stderr, "%s returned unknown status %d\n", entry, static_cast<int>(status));
    std::abort();
  }
  const char* message = hopattn_last_error();
  if (message == nullptr || (status == HOPATTN_OK) != (message[0] == '\0')) {
    std::fprintf(stderr, "%s: status %s with message '%s'\n", entry, word,
                 message ? message : "(null)");
    std::abort();
  }
  count(std::string(entry) + " " + word);
}

// A value for an int64 field: mostly `sane`, sometimes one that validation must survive.
int64_t adversarial_int64(FuzzedDataProvider& in) {
  static const int64_t kValues[] = {0, -1, 1, 2, 3, -2, 255, 256, 65535, 65536,
                                    int64_t{1} << 31, (int64_t{1} << 31) - 1, int64_t{1} << 32,
                                    int64_t{1} << 40, int64_t{1} << 62, int64_t{1} << 63 >> 1,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max() / 2 + 1};
  if (in.ConsumeBool()) return in.PickValueInArray(kValues);
  return in.ConsumeIntegral<int64_t>();
}

struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
};

int64_t element_size(int dtype) {
  return dtype == HOPATTN_DTYPE_FLOAT32 ? 4 : (dtype == HOPATTN_DTYPE_FLOAT8_E4M3 ? 1 : 2);
}

// One tensor's descriptor plus where its data lives: `buffer` (0..3, tensors may share one, as a
// packed QKV does) at byte `offset` (which may misalign it).
struct TensorPlan {
  hopattn_tensor t{};
  int buffer = 0;
  int64_t offset = 0;
};

void dense_strides(hopattn_tensor& t, int layout) {
  // 0: dense; 1: padded; 2: heads outermost; 3: zero strides (broadcast) where size allows.
  const int64_t pad = layout == 1 ? 3 : 0;
  t.head_stride = t.head_dim + pad;
  t.seq_stride = t.heads * t.head_stride + pad;
  t.batch_stride = t.seqlen * t.seq_stride + pad;
  if (layout == 2) {
    t.seq_stride = t.head_dim;
    t.head_stride = t.seqlen * t.head_dim;
    t.batch_stride = t.heads * t.head_stride;
  }
  if (layout == 3) {
    t.batch_stride = 0, t.head_stride = 0;
  }
}

// The bytes a well-formed descriptor reaches from its data pointer, or -1 when it is not
// well formed (the library must reject it, so it may point anywhere) or names more than kMaxBytes.
int64_t extent_bytes(const hopattn_tensor& t, bool* well_formed) {
  *well_formed = false;
  int32_t dtype;  // read as an integer: the field may hold a value that is no hopattn_dtype
  std::memcpy(&dtype, &t.dtype, sizeof dtype);
  if (dtype < 0 || dtype > 3) return -1;
  const int64_t sizes[] = {t.batch, t.seqlen, t.heads, t.head_dim};
  const int64_t strides[] = {t.batch_stride, t.seq_stride, t.head_stride, 1};
  for (int i = 0; i < 4; ++i)
    if (sizes[i] < 1 || strides[i] < 0) return -1;
  *well_formed = true;
  __int128 last = 0;  // each term < 2^126; the sum is checked after each one
  for (int i = 0; i < 4; ++i) {
    last += static_cast<__int128>(sizes[i] - 1) * strides[i];
    if (last >= kMaxBytes) return -1;
  }
  return static_cast<int64_t>((last + 1) * element_size(dtype));
}

struct Allocation {
  std::vector<void*> blocks;
  ~Allocation() {
    for (void* p : blocks) std::free(p);
  }
  // `bytes` bytes, `misalign` bytes past a malloc'd block's start (16-byte aligned, or 256 with
  // `workspace_aligned`, the workspace's rule); without it the block ends with the last byte,
  // so that ASan's redzone follows it.
  uint8_t* take(int64_t bytes, int64_t misalign, FuzzedDataProvider& in,
                bool workspace_aligned = false) {
    const size_t n = static_cast<size_t>(bytes + misalign);
    auto* block = static_cast<uint8_t*>(
        workspace_aligned ? std::aligned_alloc(256, (n + 256) / 256 * 256) : std::malloc(std::max<size_t>(n, 1)));
    blocks.push_back(block);
    // Contents: small finite floats mostly, the fuzzer's bytes (NaN, inf, huge) sometimes.
    const bool raw = in.ConsumeBool();
    for (size_t i = 0; i + 4 <= n; i += 4) {
      float f = static_cast<float>(static_cast<int>((i * 2654435761u) >> 20) % 17 - 8) / 8.f;
      if (raw && in.remaining_bytes() >= 4) {
        const uint32_t bits = in.ConsumeIntegral<uint32_t>();
        std::memcpy(&f, &bits, 4);
      }
      std::memcpy(block + i, &f, 4);
    }
    return block + misalign;
  }
};

Shape pick_shape(FuzzedDataProvider& in) {
  Shape s;
  s.batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  s.seqlen_q = in.ConsumeIntegralInRange<int64_t>(1, 40);
  s.seqlen_k = in.ConsumeIntegralInRange<int64_t>(1, 40);
  s.heads_kv = in.ConsumeIntegralInRange<int64_t>(1, 3);
  s.heads_q = s.heads_kv * in.ConsumeIntegralInRange<int64_t>(1, 3);
  static const int64_t kHeadDims[] = {1, 7, 8, 16, 32, 40, 64, 96, 128, 256, 512, 513};
  s.head_dim = in.PickValueInArray(kHeadDims);
  return s;
}

void mutate(FuzzedDataProvider& in, TensorPlan (&plans)[4]) {
  const int mutations = in.ConsumeIntegralInRange(0, 3);
  for (int m = 0; m < mutations; ++m) {
    hopattn_tensor& t = plans[in.ConsumeIntegralInRange(0, 3)].t;
    switch (in.ConsumeIntegralInRange(0, 8)) {
      case 0: t.batch = adversarial_int64(in); break;
      case 1: t.seqlen = adversarial_int64(in); break;
      case 2: t.heads = adversarial_int64(in); break;
      case 3: t.head_dim = adversarial_int64(in); break;
      case 4: t.batch_stride = adversarial_int64(in); break;
      case 5: t.seq_stride = adversarial_int64(in); break;
      case 6: t.head_stride = adversarial_int64(in); break;
      case 7: t.dtype = static_cast<hopattn_dtype>(in.ConsumeIntegralInRange(-2, 5)); break;
      case 8: t.dtype = static_cast<hopattn_dtype>(in.ConsumeIntegral<int32_t>()); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::atexit(print_outcomes);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool varlen_call = in.ConsumeBool();
  const Shape s = pick_shape(in);
  const int dtype = in.ConsumeIntegralInRange(0, 2);

  // q, k, v, o as a coherent problem, then a few fields replaced.
  TensorPlan plans[4];
  const int64_t seqlens[4] = {s.seqlen_q, s.seqlen_k, s.seqlen_k, s.seqlen_q};
  const int64_t heads[4] = {s.heads_q, s.heads_kv, s.heads_kv, s.heads_q};
  for (int i = 0; i < 4; ++i) {
    hopattn_tensor& t = plans[i].t;
    t.dtype = static_cast<hopattn_dtype>(dtype);
    t.batch = varlen_call ? 1 : s.batch;
    t.seqlen = seqlens[i];
    t.heads = heads[i];
    t.head_dim = s.head_dim;
    dense_strides(t, in.ConsumeIntegralInRange(0, 3));
    // Mostly a buffer of its own; k and v may share q's, o may (and must then be refused).
    plans[i].buffer = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegralInRange(0, 3) : i;
    plans[i].offset = in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange(1, 7) : 0;
  }
  mutate(in, plans);

  // Buffers sized by the descriptors that use them.
  bool every_tensor_fits = true;
  int64_t buffer_bytes[4] = {0, 0, 0, 0};
  for (const TensorPlan& p : plans) {
    bool well_formed = false;
    const int64_t bytes = extent_bytes(p.t, &well_formed);
    if (well_formed && bytes < 0) every_tensor_fits = false;
    const int64_t need = bytes < 0 ? 64 : bytes;
    buffer_bytes[p.buffer] = std::max(buffer_bytes[p.buffer], need + p.offset);
  }
  Allocation memory;
  uint8_t* buffers[4];
  for (int b = 0; b < 4; ++b)
    buffers[b] = buffer_bytes[b] > 0 ? memory.take(buffer_bytes[b], 0, in) : nullptr;
  // A buffer no tensor uses is null; a tensor's pointer is its buffer's start plus its offset.
  for (TensorPlan& p : plans) {
    p.t.data = buffers[p.buffer] + p.offset;
    if (in.ConsumeIntegralInRange(0, 63) == 0) p.t.data = nullptr;
  }

  // Options: each field sane or adversarial.
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = in.ConsumeBool() ? HOPATTN_BACKEND_CPU : HOPATTN_BACKEND_AUTO;
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    options.backend = static_cast<hopattn_backend>(in.ConsumeIntegral<int32_t>());
  options.causal = in.ConsumeBool();
  if (in.ConsumeIntegralInRange(0, 15) == 0) options.causal = in.ConsumeIntegral<int>();
  if (in.ConsumeIntegralInRange(0, 3) == 0) {
    const uint32_t bits = in.ConsumeIntegral<uint32_t>();
    std::memcpy(&options.softmax_scale, &bits, 4);
  }
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    options.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof options);
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    options.cuda_stream = reinterpret_cast<void*>(uintptr_t{0xdead0000});
  if (in.ConsumeIntegralInRange(0, 7) == 0) {
    options.workspace_bytes = in.ConsumeIntegralInRange<size_t>(0, 1 << 16);
    const int64_t misalign = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange(1, 255);
    options.workspace =
        memory.take(static_cast<int64_t>(options.workspace_bytes), misalign, in, true);
  }
  const bool null_options = in.ConsumeIntegralInRange(0, 31) == 0;

  // The varlen metadata: prefix sums of random lengths over q's and k's rows, or adversarial.
  hopattn_varlen varlen = hopattn_default_varlen();
  std::vector<int32_t> cu_q, cu_k, used_k;
  if (varlen_call) {
    varlen.batch = in.ConsumeIntegralInRange<int64_t>(0, 6);
    if (in.ConsumeIntegralInRange(0, 15) == 0) varlen.batch = in.ConsumeIntegralInRange<int64_t>(-3, 64);
    const int64_t n = std::max<int64_t>(varlen.batch, 0) + 1;
    cu_q.assign(static_cast<size_t>(n), 0), cu_k.assign(static_cast<size_t>(n), 0);
    const int64_t total_q = plans[0].t.seqlen, total_k = plans[1].t.seqlen;
    for (int64_t b = 1; b < n; ++b) {
      cu_q[b] = static_cast<int32_t>(b == n - 1 ? total_q
                                                : in.ConsumeIntegralInRange<int64_t>(cu_q[b - 1], std::max<int64_t>(cu_q[b - 1], std::min<int64_t>(total_q, INT32_MAX))));
      cu_k[b] = static_cast<int32_t>(b == n - 1 ? total_k
                                                : in.ConsumeIntegralInRange<int64_t>(cu_k[b - 1], std::max<int64_t>(cu_k[b - 1], std::min<int64_t>(total_k, INT32_MAX))));
    }
    if (in.ConsumeIntegralInRange(0, 7) == 0) cu_q[in.ConsumeIntegralInRange<size_t>(0, cu_q.size() - 1)] = in.ConsumeIntegral<int32_t>();
    if (in.ConsumeIntegralInRange(0, 7) == 0) cu_k[in.ConsumeIntegralInRange<size_t>(0, cu_k.size() - 1)] = in.ConsumeIntegral<int32_t>();
    varlen.cu_seqlens_q = cu_q.data();
    varlen.cu_seqlens_k = cu_k.data();
    if (in.ConsumeIntegralInRange(0, 31) == 0) varlen.cu_seqlens_q = nullptr;
    if (in.ConsumeIntegralInRange(0, 31) == 0) varlen.cu_seqlens_k = nullptr;
    if (in.ConsumeIntegralInRange(0, 3) == 0 && varlen.batch > 0) {
      used_k.resize(static_cast<size_t>(varlen.batch));
      for (int32_t& u : used_k) u = in.ConsumeIntegralInRange<int32_t>(-1, 45);
      varlen.seqused_k = used_k.data();
    }
    varlen.max_seqlen_q = varlen.max_seqlen_k = 0;
    for (int64_t b = 0; b + 1 < n; ++b) {
      varlen.max_seqlen_q = std::max<int64_t>(varlen.max_seqlen_q, int64_t{cu_q[b + 1]} - cu_q[b]);
      varlen.max_seqlen_k = std::max<int64_t>(varlen.max_seqlen_k, int64_t{cu_k[b + 1]} - cu_k[b]);
    }
    if (in.ConsumeIntegralInRange(0, 15) == 0) varlen.max_seqlen_q = adversarial_int64(in);
    if (in.ConsumeIntegralInRange(0, 15) == 0) varlen.max_seqlen_k = adversarial_int64(in);
    if (in.ConsumeIntegralInRange(0, 31) == 0)
      varlen.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof varlen);
  }

  // lse: NULL, or exactly the floats q's shape asks for (possibly misaligned).
  float* lse = nullptr;
  if (in.ConsumeBool()) {
    const hopattn_tensor& q = plans[0].t;
    const auto fits = [](int64_t n) { return n > 0 && n <= kMaxBytes; };
    const __int128 rows = fits(q.batch) && fits(q.seqlen) && fits(q.heads)
                              ? static_cast<__int128>(q.batch) * q.seqlen * q.heads
                              : (q.batch > 0 && q.seqlen > 0 && q.heads > 0 ? kMaxBytes : 16);
    if (rows * 4 <= kMaxBytes) {
      const int64_t misalign = in.ConsumeIntegralInRange(0, 31) == 0 ? 2 : 0;
      lse = reinterpret_cast<float*>(memory.take(static_cast<int64_t>(rows) * 4, misalign, in));
    } else {
      every_tensor_fits = false;
    }
  }

  const hopattn_forward_options* opts = null_options ? nullptr : &options;
  const hopattn_varlen* vl = varlen_call ? &varlen : nullptr;
  size_t bytes = 0;
  check_and_count(varlen_call ? "workspace_size(varlen)" : "workspace_size",
                  hopattn_forward_workspace_size(&plans[0].t, &plans[1].t, &plans[2].t, vl, opts,
                                                 &bytes));

  // The work a call accepted as given would do, and whether its memory is all the harness's.
  const hopattn_tensor& q = plans[0].t;
  const double work = 2.0 * static_cast<double>(q.batch) * static_cast<double>(q.heads) *
                      static_cast<double>(q.seqlen) * static_cast<double>(plans[1].t.seqlen) *
                      static_cast<double>(q.head_dim);
  if (!every_tensor_fits) {
    count("skipped: descriptor beyond the harness's buffers");
    return 0;
  }
  if (!(work <= kMaxWork) && q.batch > 0 && q.heads > 0 && q.seqlen > 0 && q.head_dim > 0 &&
      plans[1].t.seqlen > 0) {
    count("skipped: more work than an iteration affords");
    return 0;
  }
  if (varlen_call)
    check_and_count("forward_varlen", hopattn_forward_varlen(&plans[0].t, &plans[1].t, &plans[2].t,
                                                             &plans[3].t, lse, vl, opts));
  else
    check_and_count("forward",
                    hopattn_forward(&plans[0].t, &plans[1].t, &plans[2].t, &plans[3].t, lse, opts));

  // The backward of the same call: d_o shaped like o, dq/dk/dv like q/k/v, each in a buffer of its
  // own (or, sometimes, one of the inputs', which must be refused), the forward's lse, the same
  // options plus `deterministic`. About three and a half times the forward's work.
  if (!(work * 3.5 <= kMaxWork)) {
    count("skipped: backward, more work than an iteration affords");
    return 0;
  }
  hopattn_tensor d_o = plans[3].t, grads[3] = {plans[0].t, plans[1].t, plans[2].t};
  for (hopattn_tensor* t : {&d_o, &grads[0], &grads[1], &grads[2]}) {
    bool well_formed = false;
    const int64_t bytes = extent_bytes(*t, &well_formed);
    t->data = memory.take(bytes < 0 ? 64 : bytes, 0, in);
  }
  if (in.ConsumeIntegralInRange(0, 15) == 0) grads[in.ConsumeIntegralInRange(0, 2)].data = plans[0].t.data;
  hopattn_backward_options backward_options = hopattn_default_backward_options();
  backward_options.causal = options.causal;
  backward_options.softmax_scale = options.softmax_scale;
  // Copied as bytes: the forward's may hold a value that is no hopattn_backend.
  std::memcpy(&backward_options.backend, &options.backend, sizeof options.backend);
  backward_options.cuda_stream = options.cuda_stream;
  backward_options.workspace = options.workspace;
  backward_options.workspace_bytes = options.workspace_bytes;
  backward_options.deterministic = in.ConsumeBool();
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    backward_options.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof backward_options);
  const hopattn_backward_options* backward_opts = null_options ? nullptr : &backward_options;
  if (varlen_call)
    check_and_count("backward_varlen",
                    hopattn_backward_varlen(&plans[0].t, &plans[1].t, &plans[2].t, &plans[3].t, &d_o, lse,
                                            &grads[0], &grads[1], &grads[2], vl, backward_opts));
  else
    check_and_count("backward", hopattn_backward(&plans[0].t, &plans[1].t, &plans[2].t, &plans[3].t, &d_o,
                                                 lse, &grads[0], &grads[1], &grads[2], backward_opts));

  // q quantised to e4m3: an output of q's shape (dense, one byte per element, sometimes with q's
  // descriptor as it is, dtype included), the scales array its mode asks for, the options sane
  // or adversarial.
  hopattn_quantize_options quantize_options = hopattn_default_quantize_options();
  quantize_options.scaling = static_cast<hopattn_fp8_scaling>(in.ConsumeIntegralInRange(0, 2));
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    quantize_options.scaling = static_cast<hopattn_fp8_scaling>(in.ConsumeIntegral<int32_t>());
  quantize_options.block_rows = in.ConsumeBool() ? 128 : in.ConsumeIntegralInRange<int64_t>(1, 48);
  if (in.ConsumeIntegralInRange(0, 15) == 0) quantize_options.block_rows = adversarial_int64(in);
  quantize_options.hadamard = in.ConsumeBool();
  quantize_options.seed = in.ConsumeIntegral<uint64_t>();
  std::memcpy(&quantize_options.backend, &options.backend, sizeof options.backend);
  if (in.ConsumeIntegralInRange(0, 15) == 0)
    quantize_options.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof quantize_options);
  // Dense strides only for a q whose element count fits the harness's buffers (a well-formed q may
  // still be a broadcast view of 2^62 rows); any other q keeps its own strides (and the call may
  // well refuse it).
  bool q_well_formed = false;
  extent_bytes(q, &q_well_formed);
  int64_t q_elements = 1;
  bool q_fits = q_well_formed;
  for (int64_t size : {q.batch, q.seqlen, q.heads, q.head_dim})
    q_fits = q_fits && !__builtin_mul_overflow(q_elements, size, &q_elements) && q_elements <= kMaxBytes;
  hopattn_tensor quantized = q;
  quantized.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
  if (q_fits && in.ConsumeIntegralInRange(0, 15) != 0) dense_strides(quantized, 0);
  bool well_formed = false;
  const int64_t quantized_elements = extent_bytes(quantized, &well_formed);  // 1 byte each
  if (!well_formed || quantized_elements < 0) {
    count("skipped: quantize, descriptor beyond the harness's buffers");
    return 0;
  }
  quantized.data = memory.take(quantized_elements, 0, in);
  // Exactly the scales the mode asks for, so that a write past them is caught; one float when the
  // options or q are invalid and must be refused.
  const hopattn_quantize_options read = null_options ? hopattn_default_quantize_options() : quantize_options;
  int32_t scaling;
  std::memcpy(&scaling, &read.scaling, sizeof scaling);
  int64_t scale_count = 1;
  if (q_fits && scaling == HOPATTN_FP8_SCALE_HEAD) scale_count = q.batch * q.heads;
  if (q_fits && scaling == HOPATTN_FP8_SCALE_BLOCK && read.block_rows > 0)
    scale_count = q.batch * q.heads * ((q.seqlen - 1) / read.block_rows + 1);
  float* scales = reinterpret_cast<float*>(memory.take(std::max<int64_t>(scale_count, 1) * 4, 0, in));
  const hopattn_status quantized_status =
      hopattn_quantize_fp8(&q, &quantized, scales, null_options ? nullptr : &quantize_options);
  check_and_count("quantize_fp8", quantized_status);

  // The codes attended to as q, k and v at once (self-attention of q's shape), each with the
  // scales as quantised (their array is exactly that layout's, so the layout is kept: a larger
  // one would be the caller's overrun, which no library can see), sometimes a scale replaced by a
  // value the CPU backend must refuse or turn into NaN, a NULL struct or array, an o of another
  // dtype, or o placed on the scales.
  if (quantized_status != HOPATTN_OK || !q_fits) return 0;
  if (!(2.0 * static_cast<double>(q.batch * q.heads) * static_cast<double>(q.seqlen) *
            static_cast<double>(q.seqlen) * static_cast<double>(q.head_dim) <=
        kMaxWork)) {
    count("skipped: forward_fp8, more work than an iteration affords");
    return 0;
  }
  if (in.ConsumeIntegralInRange(0, 3) == 0) {
    static const float kMarks[] = {0.f, -0.f, -1.f, -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN(), 1e-45f, 3e38f};
    scales[in.ConsumeIntegralInRange<int64_t>(0, scale_count - 1)] = in.PickValueInArray(kMarks);
  }
  hopattn_fp8_scales fp8_scales = {scales, read.scaling, read.block_rows};
  hopattn_fp8_scales* q_scales = &fp8_scales;
  if (in.ConsumeIntegralInRange(0, 31) == 0) q_scales = nullptr;
  hopattn_fp8_scales k_scales = fp8_scales;
  if (in.ConsumeIntegralInRange(0, 31) == 0) k_scales.data = nullptr;
  if (in.ConsumeIntegralInRange(0, 31) == 0) {
    // Only a scaling the call must refuse: a valid other one would ask for more scales than the
    // array holds, the caller's overrun, which no library can see.
    int32_t raw = in.ConsumeIntegral<int32_t>();
    if (raw >= HOPATTN_FP8_SCALE_TENSOR && raw <= HOPATTN_FP8_SCALE_BLOCK) raw += HOPATTN_FP8_SCALE_BLOCK + 1;
    std::memcpy(&k_scales.scaling, &raw, sizeof raw);
  }
  // The query's o_dtype is one of the enum (a C++ caller cannot pass another int without
  // undefined behaviour); o's dtype field, read by the library as an integer, may be any.
  static const hopattn_dtype kDtypes[] = {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16,
                                          HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_FLOAT8_E4M3};
  const hopattn_dtype o_dtype = in.ConsumeIntegralInRange(0, 3) != 0
                                    ? kDtypes[in.ConsumeIntegralInRange(0, 1)]
                                    : in.PickValueInArray(kDtypes);
  hopattn_tensor out = q;
  dense_strides(out, 0);
  out.dtype = o_dtype;
  if (in.ConsumeIntegralInRange(0, 15) == 0) {
    const int32_t raw = in.ConsumeIntegralInRange(-1, 9);
    std::memcpy(&out.dtype, &raw, sizeof raw);
  }
  out.data = memory.take(q_elements * 4, 0, in);  // room for any dtype the call may accept
  if (in.ConsumeIntegralInRange(0, 31) == 0) out.data = scales;
  size_t fp8_bytes = 0;
  if (varlen_call) {  // the packed form too, with the call's metadata, which may not fit these rows
    check_and_count("forward_fp8_varlen_workspace_size",
                    hopattn_forward_fp8_varlen_workspace_size(&quantized, &quantized, &quantized,
                                                              o_dtype, vl, opts, &fp8_bytes));
    check_and_count("forward_fp8_varlen",
                    hopattn_forward_fp8_varlen(&quantized, q_scales, &quantized, &k_scales,
                                               &quantized, &fp8_scales, &out, lse, vl, opts));
  }
  check_and_count("forward_fp8_workspace_size",
                  hopattn_forward_fp8_workspace_size(&quantized, &quantized, &quantized, o_dtype,
                                                     opts, &fp8_bytes));
  check_and_count("forward_fp8", hopattn_forward_fp8(&quantized, q_scales, &quantized, &k_scales,
                                                     &quantized, &fp8_scales, &out, lse, opts));
  return 0;
}
