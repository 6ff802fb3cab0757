// The library's own names for element types and outcomes. core/, cpu/ and sm90/ use these and
// never the C ABI's types; api/ converts at the boundary (the values are the ABI's, checked there).
#pragma once

#include <cstdint>

namespace hopattn {

// kFloat8E4M3 is only ever an output of the FP8 quantisation (hopattn_quantize_fp8): the
// attention operations take the first three (is_attention_dtype in core/dtype.hpp).
enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2, kFloat8E4M3 = 3 };

// How many values share one FP8 scale (hopattn_fp8_scaling): the whole tensor, one (batch, head),
// or a block of rows of one (batch, head).
enum class Fp8Scaling : int32_t { kTensor = 0, kHead = 1, kBlock = 2 };

enum class Status : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kUnsupported = 2,
  kBackendUnavailable = 3,
  kCuda = 4,
  kInternal = 5,
};

}  // namespace hopattn
