#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/cpu_backend.hpp"

namespace hopattn {
namespace {

// The SM90 kernels load tiles with TMA, whose global addresses and strides are 16-byte units.
constexpr int64_t kTmaAlignment = 16;
// The head dims the SM90 backend is asked about when an error lists what it supports.
constexpr int64_t kSm90CandidateHeadDims[] = {64, 96, 128, 192, 256};

struct NamedTensor {
  const hopattn_tensor* tensor;
  const char* name;
};

template <class... Pieces>
hopattn_status fail(hopattn_status status, const Pieces&... pieces) {
  std::ostringstream message;
  (message << ... << pieces);
  return set_error(status, message.str());
}

template <class... Pieces>
hopattn_status invalid(const Pieces&... pieces) {
  return fail(HOPATTN_ERROR_INVALID_ARGUMENT, pieces...);
}

const char* backend_name(hopattn_backend backend) {
  switch (backend) {
    case HOPATTN_BACKEND_AUTO: return "AUTO";
    case HOPATTN_BACKEND_CPU: return "CPU";
    case HOPATTN_BACKEND_SM90: return "SM90";
  }
  return "unknown";
}

hopattn_status check_options(const hopattn_forward_options& options) {
  const int backend = options.backend;
  if (backend != HOPATTN_BACKEND_AUTO && backend != HOPATTN_BACKEND_CPU &&
      backend != HOPATTN_BACKEND_SM90) {
    return invalid("options.backend is ", backend, "; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
  }
  const float scale = options.softmax_scale;
  if (!(scale >= 0.f) || !std::isfinite(scale)) {
    return invalid("options.softmax_scale is ", scale,
                   "; it must be > 0 and finite, or 0 for 1/sqrt(head_dim)");
  }
  return HOPATTN_OK;
}

// The byte offset one past the last element; false when it does not fit in int64.
bool end_in_bytes(const hopattn_tensor& t, int64_t& bytes) {
  int64_t offset = t.head_dim - 1;
  const int64_t sizes[] = {t.batch, t.seqlen, t.heads};
  const int64_t strides[] = {t.batch_stride, t.seq_stride, t.head_stride};
  for (int i = 0; i < 3; ++i) {
    int64_t term = 0;
    if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &term) ||
        __builtin_add_overflow(offset, term, &offset)) {
      return false;
    }
  }
  return !__builtin_mul_overflow(offset + 1, element_size(t.dtype), &bytes);
}

bool runs_past_address_space(const void* data, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(data) > UINTPTR_MAX - static_cast<uint64_t>(bytes);
}

hopattn_status check_tensor(const NamedTensor& named) {
  const char* name = named.name;
  if (named.tensor == nullptr) return invalid(name, " is NULL");
  const hopattn_tensor& t = *named.tensor;
  if (t.data == nullptr) return invalid(name, ".data is NULL");
  if (!is_valid_dtype(t.dtype)) {
    return invalid(name, ".dtype is ", static_cast<int>(t.dtype),
                   "; allowed: 0 (float32), 1 (bfloat16), 2 (float16)");
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", t.batch}, {"seqlen", t.seqlen}, {"heads", t.heads}, {"head_dim", t.head_dim}};
  for (const auto& [field, size] : sizes) {
    if (size <= 0) return invalid(name, ".", field, " is ", size, "; it must be > 0");
  }
  const std::pair<const char*, int64_t> strides[] = {{"batch_stride", t.batch_stride},
                                                     {"seq_stride", t.seq_stride},
                                                     {"head_stride", t.head_stride}};
  for (const auto& [field, stride] : strides) {
    if (stride < 0) return invalid(name, ".", field, " is ", stride, "; strides must be >= 0");
  }
  int64_t bytes = 0;
  if (!end_in_bytes(t, bytes)) {
    return invalid(name,
                   ": the offset of its last element, or its extent in bytes, overflows "
                   "int64; check its sizes and strides");
  }
  if (runs_past_address_space(t.data, bytes)) {
    return invalid(name, ": its ", bytes, " bytes from ", name,
                   ".data run past the end of the address space");
  }
  return HOPATTN_OK;
}

// Inputs may alias themselves (a zero stride broadcasts), but two output elements at one
// address would be a write race. A sufficient test: ordered by stride, each dimension must
// step past everything the dimensions with smaller strides span.
hopattn_status check_output_does_not_overlap(const hopattn_tensor& o) {
  struct Dimension {
    const char* stride_name;
    int64_t size, stride;
  };
  Dimension dims[] = {{"the head_dim stride", o.head_dim, 1},
                      {"o.head_stride", o.heads, o.head_stride},
                      {"o.seq_stride", o.seqlen, o.seq_stride},
                      {"o.batch_stride", o.batch, o.batch_stride}};
  std::stable_sort(std::begin(dims), std::end(dims),
                   [](const Dimension& a, const Dimension& b) { return a.stride < b.stride; });
  int64_t span = 0;  // the largest offset the dimensions handled so far reach
  for (const Dimension& dim : dims) {
    if (dim.size == 1) continue;
    if (dim.stride <= span) {
      return invalid("o: ", dim.stride_name, " is ", dim.stride, " but must exceed ", span,
                     ", the span of the dimensions with smaller strides; otherwise two output "
                     "elements share an address");
    }
    span += (dim.size - 1) * dim.stride;  // no overflow: check_tensor bounded the whole sum
  }
  return HOPATTN_OK;
}

std::string shape_of(const hopattn_tensor& t) {
  std::ostringstream s;
  s << "(" << t.batch << ", " << t.seqlen << ", " << t.heads << ", " << t.head_dim << ")";
  return s.str();
}

hopattn_status check_shapes(const hopattn_tensor& q, const hopattn_tensor& k,
                            const hopattn_tensor& v, const hopattn_tensor& o) {
  const NamedTensor others[] = {{&k, "k"}, {&v, "v"}, {&o, "o"}};
  for (const NamedTensor& other : others) {
    if (other.tensor->dtype != q.dtype) {
      return invalid(other.name, ".dtype is ", dtype_name(other.tensor->dtype), " but q.dtype is ",
                     dtype_name(q.dtype), "; q, k, v and o must share one dtype");
    }
  }
  for (const NamedTensor& other : others) {
    if (other.tensor->batch != q.batch) {
      return invalid(other.name, ".batch is ", other.tensor->batch, " but q.batch is ", q.batch,
                     "; all tensors must have the same batch");
    }
  }
  if (v.seqlen != k.seqlen || v.heads != k.heads || v.head_dim != k.head_dim) {
    return invalid("v is ", shape_of(v), " but k is ", shape_of(k),
                   "; v must have k's shape (batch, seqlen_k, heads_kv, head_dim)");
  }
  if (k.head_dim != q.head_dim) {
    return invalid("k.head_dim is ", k.head_dim, " but q.head_dim is ", q.head_dim,
                   "; q, k and v must share head_dim");
  }
  if (o.seqlen != q.seqlen || o.heads != q.heads || o.head_dim != q.head_dim) {
    return invalid("o is ", shape_of(o), " but q is ", shape_of(q), "; o must have q's shape");
  }
  if (q.heads % k.heads != 0) {
    return invalid("q.heads (", q.heads, ") must be a multiple of k.heads (", k.heads,
                   ") so that each k/v head serves a whole group of query heads (GQA/MQA)");
  }
  return check_output_does_not_overlap(o);
}

hopattn_status check_lse(const hopattn_tensor& q, const float* lse) {
  if (lse == nullptr) return HOPATTN_OK;
  if (reinterpret_cast<uintptr_t>(lse) % alignof(float) != 0) {
    return invalid("lse is not 4-byte aligned; it must point to float32 values");
  }
  int64_t rows = 0, bytes = 0;
  if (__builtin_mul_overflow(q.batch, q.heads, &rows) ||
      __builtin_mul_overflow(rows, q.seqlen, &rows) ||
      __builtin_mul_overflow(rows, static_cast<int64_t>(sizeof(float)), &bytes) ||
      runs_past_address_space(lse, bytes)) {
    return invalid("lse: batch * heads_q * seqlen_q = ", q.batch, " * ", q.heads, " * ", q.seqlen,
                   " float32 values do not fit in the address space");
  }
  return HOPATTN_OK;
}

// The backends read Q, K and V while other threads (CTAs) already write O and LSE, so an output
// sharing memory with an input, as in-place attention would, reads partly overwritten data. The
// test compares byte ranges: it also refuses an output interleaved with inputs in one buffer.
hopattn_status check_outputs_do_not_overlap_inputs(const hopattn_tensor& q, const hopattn_tensor& k,
                                                   const hopattn_tensor& v, const hopattn_tensor& o,
                                                   const float* lse) {
  struct ByteRange {
    const char* name;
    uintptr_t begin, end;
  };
  auto range_of = [](const char* name, const hopattn_tensor& t) {
    int64_t bytes = 0;
    end_in_bytes(t, bytes);  // fits: check_tensor has checked it
    const auto begin = reinterpret_cast<uintptr_t>(t.data);
    return ByteRange{name, begin, begin + static_cast<uint64_t>(bytes)};
  };
  const ByteRange inputs[] = {range_of("q", q), range_of("k", k), range_of("v", v)};
  const ByteRange output = range_of("o", o);
  const auto overlaps = [](const ByteRange& a, const ByteRange& b) {
    return a.begin < b.end && b.begin < a.end;
  };
  for (const ByteRange& input : inputs) {
    if (overlaps(output, input)) {
      return invalid("o shares memory with ", input.name,
                     "; outputs must not overlap the inputs (in-place attention is not supported)");
    }
  }
  if (lse == nullptr) return HOPATTN_OK;
  const auto lse_begin = reinterpret_cast<uintptr_t>(lse);
  const ByteRange lse_range{
      "lse", lse_begin,
      lse_begin + static_cast<uint64_t>(q.batch * q.heads * q.seqlen) * sizeof(float)};
  for (const ByteRange& other : {inputs[0], inputs[1], inputs[2], output}) {
    if (overlaps(lse_range, other)) {
      return invalid("lse shares memory with ", other.name, "; it must be a buffer of its own");
    }
  }
  return HOPATTN_OK;
}

struct NamedPointer {
  const void* pointer;
  std::string name;
};

// AUTO: SM90 for device memory, CPU for host memory, an error for a mix.
hopattn_status choose_backend_by_memory(const std::vector<NamedPointer>& pointers,
                                        const SystemQueries& system, hopattn_backend& backend) {
  const MemorySpace first = system.memory_space_of(pointers.front().pointer);
  for (const NamedPointer& p : pointers) {
    const MemorySpace space = system.memory_space_of(p.pointer);
    if (space == MemorySpace::Unknown) {
      return invalid("backend AUTO: the CUDA runtime cannot tell whether ", p.name,
                     " is host or device memory; set options.backend explicitly");
    }
    if (space != first) {
      return invalid("backend AUTO: ", p.name, " is ", memory_space_name(space), " but q.data is ",
                     memory_space_name(first), "; all tensors must be in one memory space");
    }
  }
  backend = first == MemorySpace::Device ? HOPATTN_BACKEND_SM90 : HOPATTN_BACKEND_CPU;
  return HOPATTN_OK;
}

hopattn_status resolve_backend(hopattn_backend requested, const hopattn_tensor& q,
                               const hopattn_tensor& k, const hopattn_tensor& v,
                               const hopattn_tensor& o, const float* lse,
                               const SystemQueries& system, hopattn_backend& backend) {
  std::vector<NamedPointer> pointers = {
      {q.data, "q.data"}, {k.data, "k.data"}, {v.data, "v.data"}, {o.data, "o.data"}};
  if (lse != nullptr) pointers.push_back({lse, "lse"});

  backend = requested;
  if (requested == HOPATTN_BACKEND_AUTO) {
    if (hopattn_status s = choose_backend_by_memory(pointers, system, backend); s != HOPATTN_OK) {
      return s;
    }
  }
  if (backend == HOPATTN_BACKEND_SM90) {
    if (!system.sm90_built()) {
      return fail(
          HOPATTN_ERROR_BACKEND_UNAVAILABLE,
          "the SM90 backend is not in this build (it was configured without CUDA)",
          requested == HOPATTN_BACKEND_AUTO ? "; backend AUTO chose it for device memory" : "");
    }
    if (!system.sm90_device_available()) {
      return fail(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                  "the SM90 backend needs a compute capability 9.0 GPU (H100/H200) as the "
                  "current CUDA device, and there is none");
    }
  }
  if (requested == HOPATTN_BACKEND_AUTO) return HOPATTN_OK;  // one memory space, the right one

  // An explicit backend with a pointer in the other space would fault inside the kernel.
  const bool sm90 = backend == HOPATTN_BACKEND_SM90;
  const MemorySpace wrong = sm90 ? MemorySpace::Host : MemorySpace::Device;
  for (const NamedPointer& p : pointers) {
    if (system.memory_space_of(p.pointer) == wrong) {
      return invalid(p.name, " is ", memory_space_name(wrong), "; the ", backend_name(backend),
                     " backend needs ", sm90 ? "device memory" : "host memory");
    }
  }
  return HOPATTN_OK;
}

std::string sm90_supported_list(const SystemQueries& system) {
  std::string list;
  for (hopattn_dtype dtype :
       {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    std::string dims;
    for (int64_t head_dim : kSm90CandidateHeadDims) {
      if (system.sm90_supports(dtype, head_dim)) {
        dims += (dims.empty() ? "" : "/") + std::to_string(head_dim);
      }
    }
    if (!dims.empty()) {
      list +=
          (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " + dims;
    }
  }
  return list.empty() ? "nothing" : list;
}

hopattn_status check_backend_supports(hopattn_backend backend, const hopattn_tensor& q,
                                      const SystemQueries& system) {
  if (backend == HOPATTN_BACKEND_CPU) {
    if (!cpu::supports(q.dtype, q.head_dim)) {
      return fail(HOPATTN_ERROR_UNSUPPORTED, "head_dim ", q.head_dim,
                  " is not supported by the CPU backend (it supports any head_dim from 1 to ",
                  cpu::kMaxHeadDim, ")");
    }
    return HOPATTN_OK;
  }
  if (!system.sm90_supports(q.dtype, q.head_dim)) {
    return fail(
        HOPATTN_ERROR_UNSUPPORTED, "dtype ", dtype_name(q.dtype), " with head_dim ", q.head_dim,
        " is not supported by the SM90 backend (it supports ", sm90_supported_list(system),
        "; the CPU backend supports every dtype with head_dim 1 to ", cpu::kMaxHeadDim, ")");
  }
  return HOPATTN_OK;
}

hopattn_status check_tma_layout(const NamedTensor& named) {
  const hopattn_tensor& t = *named.tensor;
  if (reinterpret_cast<uintptr_t>(t.data) % kTmaAlignment != 0) {
    return invalid(named.name, ".data is not ", kTmaAlignment,
                   "-byte aligned; the SM90 backend loads tiles with TMA, which needs ",
                   kTmaAlignment, "-byte aligned addresses");
  }
  const std::pair<const char*, int64_t> strides[] = {{"batch_stride", t.batch_stride},
                                                     {"seq_stride", t.seq_stride},
                                                     {"head_stride", t.head_stride}};
  for (const auto& [field, stride] : strides) {
    const int64_t bytes = stride * element_size(t.dtype);  // bounded by the extent check
    if (bytes % kTmaAlignment != 0) {
      return invalid(named.name, ".", field, " is ", stride, " elements = ", bytes,
                     " bytes; the SM90 backend needs strides that are multiples of ", kTmaAlignment,
                     " bytes for TMA");
    }
  }
  return HOPATTN_OK;
}


}  // namespace

hopattn_forward_options default_forward_options() {
  hopattn_forward_options options{};
  options.causal = 0;
  options.softmax_scale = 0.f;
  options.backend = HOPATTN_BACKEND_AUTO;
  options.cuda_stream = nullptr;
  return options;
}

hopattn_status validate_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                const hopattn_tensor* v, const hopattn_tensor* o, float* lse,
                                const hopattn_forward_options* options_or_null,
                                const SystemQueries& system, ForwardCall& call) {
  const hopattn_forward_options options =
      options_or_null != nullptr ? *options_or_null : default_forward_options();
  const NamedTensor tensors[] = {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}};

  if (hopattn_status s = check_options(options); s != HOPATTN_OK) return s;
  for (const NamedTensor& t : tensors) {
    if (hopattn_status s = check_tensor(t); s != HOPATTN_OK) return s;
  }
  if (hopattn_status s = check_shapes(*q, *k, *v, *o); s != HOPATTN_OK) return s;
  if (hopattn_status s = check_lse(*q, lse); s != HOPATTN_OK) return s;
  if (hopattn_status s = check_outputs_do_not_overlap_inputs(*q, *k, *v, *o, lse); s != HOPATTN_OK)
    return s;
  if (hopattn_status s =
          resolve_backend(options.backend, *q, *k, *v, *o, lse, system, call.backend);
      s != HOPATTN_OK) {
    return s;
  }
  if (hopattn_status s = check_backend_supports(call.backend, *q, system); s != HOPATTN_OK)
    return s;
  if (call.backend == HOPATTN_BACKEND_SM90) {
    for (const NamedTensor& t : tensors) {
      if (hopattn_status s = check_tma_layout(t); s != HOPATTN_OK) return s;
    }
  }
  call.problem = problem_of(*q, *k, *v, *o, lse, options);
  return HOPATTN_OK;
}

}  // namespace hopattn
