// The boundary between the C ABI's types and the library's own (core/types.hpp): api/ is the only
// layer that sees hopattn.h, and it converts here. The values are the same by construction,
// checked below, so a conversion is a cast.
#pragma once

#include <cstring>
#include <type_traits>

#include "core/fp8_layout.hpp"
#include "core/types.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

static_assert(static_cast<int>(DType::kFloat32) == HOPATTN_DTYPE_FLOAT32);
static_assert(static_cast<int>(DType::kBFloat16) == HOPATTN_DTYPE_BFLOAT16);
static_assert(static_cast<int>(DType::kFloat16) == HOPATTN_DTYPE_FLOAT16);

static_assert(static_cast<int>(DType::kFloat8E4M3) == HOPATTN_DTYPE_FLOAT8_E4M3);

static_assert(static_cast<int>(Fp8Scaling::kTensor) == HOPATTN_FP8_SCALE_TENSOR);
static_assert(static_cast<int>(Fp8Scaling::kHead) == HOPATTN_FP8_SCALE_HEAD);
static_assert(static_cast<int>(Fp8Scaling::kBlock) == HOPATTN_FP8_SCALE_BLOCK);

static_assert(static_cast<int>(Fp8Layout::kRows) == HOPATTN_FP8_LAYOUT_ROWS);
static_assert(static_cast<int>(Fp8Layout::kVTransposed) == HOPATTN_FP8_LAYOUT_V_TRANSPOSED);

static_assert(static_cast<int>(Status::kOk) == HOPATTN_OK);
static_assert(static_cast<int>(Status::kInvalidArgument) == HOPATTN_ERROR_INVALID_ARGUMENT);
static_assert(static_cast<int>(Status::kUnsupported) == HOPATTN_ERROR_UNSUPPORTED);
static_assert(static_cast<int>(Status::kBackendUnavailable) == HOPATTN_ERROR_BACKEND_UNAVAILABLE);
static_assert(static_cast<int>(Status::kCuda) == HOPATTN_ERROR_CUDA);
static_assert(static_cast<int>(Status::kInternal) == HOPATTN_ERROR_INTERNAL);

// The value an enum field of a caller's struct (or an enum argument) holds, read as its integer:
// a C caller may store any int there, and loading an enum object whose value lies outside the
// enumeration's range is undefined behaviour in C++ (UBSan's -fsanitize=enum). Every enum that
// crosses the ABI is read through this before it is compared or trusted.
template <class Enum>
int enum_value(const Enum& field) {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int));
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

// Only for a dtype that is_valid_dtype() accepted.
inline DType dtype_of(hopattn_dtype dtype) { return static_cast<DType>(dtype); }
inline hopattn_dtype c_dtype(DType dtype) { return static_cast<hopattn_dtype>(dtype); }
inline hopattn_status c_status(Status status) { return static_cast<hopattn_status>(status); }

}  // namespace hopattn
