// The library's own names for element types and outcomes. core/, cpu/ and sm90/ use these and
// never the C ABI's types; api/ converts at the boundary (the values are the ABI's, checked there).
#pragma once

#include <cstdint>

namespace hopattn {

enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

enum class Status : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kUnsupported = 2,
  kBackendUnavailable = 3,
  kCuda = 4,
  kInternal = 5,
};

}  // namespace hopattn
