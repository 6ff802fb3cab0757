#include "api/tensor_rules.hpp"

#include <algorithm>
#include <utility>

#include "api/abi.hpp"
#include "core/dtype.hpp"

namespace hopattn {
namespace {

// The V-transposed layout of t's shape; false when its element count overflows int64.
bool v_transposed_layout_of(const hopattn_tensor& t, VTransposedLayout& layout) {
  if (t.seqlen > INT64_MAX - (kVTransposedGroup - 1)) return false;  // the pitch rounds it up
  layout = VTransposedLayout::of(t.seqlen, t.heads, t.head_dim);
  int64_t elements = 0;
  return !__builtin_mul_overflow(layout.head_dim, layout.pitch, &elements) &&
         !__builtin_mul_overflow(elements, layout.heads, &elements) &&
         !__builtin_mul_overflow(elements, t.batch, &elements);
}

// hopattn.h: a tensor in the V-transposed layout states that layout's strides, in elements.
Status check_v_transposed_strides(const NamedTensor& named) {
  const hopattn_tensor& t = *named.tensor;
  // Fits in int64: end_in_bytes has checked it.
  const VTransposedLayout layout = VTransposedLayout::of(t.seqlen, t.heads, t.head_dim);
  const struct {
    const char* field;
    int64_t given, expected;
  } strides[] = {{"seq_stride", t.seq_stride, 1},
                 {"head_stride", t.head_stride, layout.head_stride()},
                 {"batch_stride", t.batch_stride, layout.batch_stride()}};
  for (const auto& stride : strides) {
    if (stride.given == stride.expected) continue;
    return invalid(named.name, ".", stride.field, " is ", stride.given, " but must be ",
                   stride.expected, ": in HOPATTN_FP8_LAYOUT_V_TRANSPOSED ", named.name,
                   " has seq_stride 1, head_stride = head_dim * pitch = ", layout.head_stride(),
                   " and batch_stride = heads * head_stride = ", layout.batch_stride(),
                   ", with pitch ", layout.pitch, " (seqlen ", t.seqlen,
                   " rounded up to a multiple of ", kVTransposedGroup, ")");
  }
  return Status::kOk;
}

}  // namespace

bool end_in_bytes(const NamedTensor& named, int64_t& bytes) {
  const hopattn_tensor& t = *named.tensor;
  const int64_t element_bytes = element_size(dtype_of(t.dtype));
  if (named.layout == Fp8Layout::kVTransposed) {
    VTransposedLayout layout;
    return v_transposed_layout_of(t, layout) &&
           !__builtin_mul_overflow(layout.elements(t.batch), element_bytes, &bytes);
  }
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
  int64_t elements = 0;  // offset + 1 overflows for an offset of INT64_MAX (found by the fuzzer)
  return !__builtin_add_overflow(offset, 1, &elements) &&
         !__builtin_mul_overflow(elements, element_bytes, &bytes);
}

bool runs_past_address_space(const void* data, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(data) > UINTPTR_MAX - static_cast<uint64_t>(bytes);
}

std::string shape_of(const hopattn_tensor& t) {
  std::ostringstream s;
  s << "(" << t.batch << ", " << t.seqlen << ", " << t.heads << ", " << t.head_dim << ")";
  return s.str();
}

Status check_tensor(const NamedTensor& named) {
  const char* name = named.name;
  if (named.tensor == nullptr) return invalid(name, " is NULL");
  const hopattn_tensor& t = *named.tensor;
  if (t.data == nullptr) return invalid(name, ".data is NULL");
  const int dtype = enum_value(t.dtype);
  if (!is_valid_dtype(dtype)) {
    return invalid(name, ".dtype is ", dtype,
                   "; allowed: 0 (float32), 1 (bfloat16), 2 (float16), 3 (float8_e4m3)");
  }
  const int64_t element_bytes = element_size(static_cast<DType>(dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(element_bytes) != 0) {
    return invalid(name, ".data is not ", element_bytes, "-byte aligned; a ",
                   dtype_name(static_cast<DType>(dtype)),
                   " tensor must start at a multiple of its element size");
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
    // Bounds every stride in bytes, of size-1 dimensions too (which the extent does not).
    if (stride > INT64_MAX / element_bytes) {
      return invalid(name, ".", field, " is ", stride, "; a stride in bytes (", element_bytes,
                     " per element) must fit in int64");
    }
  }
  int64_t bytes = 0;
  if (!end_in_bytes(named, bytes)) {
    return invalid(name,
                   ": the offset of its last element, or its extent in bytes, overflows "
                   "int64; check its sizes and strides");
  }
  if (named.layout == Fp8Layout::kVTransposed) {
    if (Status s = check_v_transposed_strides(named); s != Status::kOk) return s;
  }
  if (runs_past_address_space(t.data, bytes)) {
    return invalid(name, ": its ", bytes, " bytes from ", name,
                   ".data run past the end of the address space");
  }
  return Status::kOk;
}

Status check_attention_dtype(const NamedTensor& named, const char* operation) {
  const DType dtype = dtype_of(named.tensor->dtype);
  if (is_attention_dtype(dtype)) return Status::kOk;
  return invalid(named.name, ".dtype is ", dtype_name(dtype), "; ", operation,
                 " takes float32, bfloat16 or float16 (float8_e4m3 is hopattn_quantize_fp8's "
                 "output, for the FP8 kernel that is not built yet)");
}

// A sufficient test: ordered by stride, each dimension must step past everything the dimensions
// with smaller strides span.
Status check_output_does_not_overlap(const NamedTensor& named) {
  // The V-transposed layout maps elements to distinct positions, and check_tensor held the
  // strides to it.
  if (named.layout == Fp8Layout::kVTransposed) return Status::kOk;
  const hopattn_tensor& o = *named.tensor;
  const std::string name = named.name;
  struct Dimension {
    std::string stride_name;
    int64_t size, stride;
  };
  Dimension dims[] = {{"the head_dim stride", o.head_dim, 1},
                      {name + ".head_stride", o.heads, o.head_stride},
                      {name + ".seq_stride", o.seqlen, o.seq_stride},
                      {name + ".batch_stride", o.batch, o.batch_stride}};
  std::stable_sort(std::begin(dims), std::end(dims),
                   [](const Dimension& a, const Dimension& b) { return a.stride < b.stride; });
  int64_t span = 0;  // the largest offset the dimensions handled so far reach
  for (const Dimension& dim : dims) {
    if (dim.size == 1) continue;
    if (dim.stride <= span) {
      return invalid(name, ": ", dim.stride_name, " is ", dim.stride, " but must exceed ", span,
                     ", the span of the dimensions with smaller strides; otherwise two output "
                     "elements share an address");
    }
    span += (dim.size - 1) * dim.stride;  // no overflow: check_tensor bounded the whole sum
  }
  return Status::kOk;
}

ByteRange byte_range_of(const NamedTensor& named) {
  int64_t bytes = 0;
  end_in_bytes(named, bytes);  // fits: check_tensor has checked it
  const auto begin = reinterpret_cast<uintptr_t>(named.tensor->data);
  return ByteRange{named.name, begin, begin + static_cast<uint64_t>(bytes)};
}

ByteRange float_range_of(const char* name, const float* data, int64_t count) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  return ByteRange{name, begin, begin + static_cast<uint64_t>(count) * sizeof(float)};
}

Status check_outputs_do_not_overlap(const std::vector<ByteRange>& inputs,
                                    const std::vector<ByteRange>& outputs) {
  const auto overlaps = [](const ByteRange& a, const ByteRange& b) {
    return a.begin < b.end && b.begin < a.end;
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ByteRange& output = outputs[i];
    for (const ByteRange& input : inputs) {
      if (overlaps(output, input)) {
        return invalid(output.name, " shares memory with ", input.name,
                       "; outputs must not overlap the inputs (in-place attention is not "
                       "supported)");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (overlaps(output, outputs[j])) {
        return invalid(output.name, " shares memory with ", outputs[j].name,
                       "; each output must be a buffer of its own");
      }
    }
  }
  return Status::kOk;
}

}  // namespace hopattn
