// The rules every tensor argument of every operation obeys, whatever the operation: not null, a
// known dtype, positive sizes, non-negative strides (for an e4m3 tensor in the V-transposed layout,
// exactly that layout's), an extent that fits in int64 and in the address space; outputs whose
// elements do not share addresses and that share no memory with the inputs. Per-operation rules
// (shapes that agree, lse, options) live beside the operation (validate_forward.cpp); backend
// choice in backend_choice.hpp. None of them touches tensor memory.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fp8_layout.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

struct NamedTensor {
  const hopattn_tensor* tensor;
  const char* name;  // the C argument: "q", "k", ...
  // kVTransposed (hopattn_forward_fp8's v, hopattn_quantize_fp8's out, as the options say): the
  // address of an element is VTransposedLayout's, which the tensor's strides must state.
  Fp8Layout layout = Fp8Layout::kRows;
};

// set_error with a message built from `pieces`; returns `status`.
template <class... Pieces>
Status fail(Status status, const Pieces&... pieces) {
  std::ostringstream message;
  (message << ... << pieces);
  return set_error(status, message.str());
}

template <class... Pieces>
Status invalid(const Pieces&... pieces) {
  return fail(Status::kInvalidArgument, pieces...);
}

// The byte offset one past the last element (for the V-transposed layout, past its last pad
// position); false when it does not fit in int64.
bool end_in_bytes(const NamedTensor& named, int64_t& bytes);
bool runs_past_address_space(const void* data, int64_t bytes);
std::string shape_of(const hopattn_tensor& t);

// Null, dtype (read as an integer), data aligned to the element size, sizes, strides (non-negative,
// and in bytes within int64; the V-transposed layout's exactly), int64 overflow of the extent, the
// end of the address space.
Status check_tensor(const NamedTensor& named);

// A tensor that passed check_tensor holds float32, bfloat16 or float16, the dtypes `operation`
// ("hopattn_forward") reads and writes; float8_e4m3 is refused.
Status check_attention_dtype(const NamedTensor& named, const char* operation);

// Two elements of an output at one address would be a write race (inputs may broadcast).
Status check_output_does_not_overlap(const NamedTensor& named);

// [begin, end) in bytes of one argument, for the overlap rule.
struct ByteRange {
  const char* name;
  uintptr_t begin, end;
};
// A tensor that passed check_tensor.
ByteRange byte_range_of(const NamedTensor& named);
// `count` float32 values at `data` (lse, scales), once their extent has been checked.
ByteRange float_range_of(const char* name, const float* data, int64_t count);

// The backends read the inputs while other threads (CTAs) already write the outputs, so an
// output sharing memory with an input, as in-place attention would, reads partly overwritten
// data; two outputs sharing memory race. Compares byte ranges, so it also refuses an output
// interleaved with inputs in one buffer.
Status check_outputs_do_not_overlap(const std::vector<ByteRange>& inputs,
                                    const std::vector<ByteRange>& outputs);

}  // namespace hopattn
