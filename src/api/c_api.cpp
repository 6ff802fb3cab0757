// The C ABI: thin wrappers over dispatch.hpp, plus the barrier that keeps C++ exceptions from
// crossing into C callers and the conversion of the library's Status to hopattn_status.
#include <exception>
#include <new>
#include <string>

#include "api/abi.hpp"
#include "api/dispatch.hpp"
#include "api/validate.hpp"
#include "core/error.hpp"
#include "hopattn/hopattn.h"

#ifndef HOPATTN_VERSION_STRING
#error "HOPATTN_VERSION_STRING comes from the CMake project version"
#endif

namespace {

// Runs `body` (returning Status) with the last error cleared, turning exceptions into
// HOPATTN_ERROR_INTERNAL.
template <class Body>
hopattn_status guarded(Body&& body) {
  using hopattn::Status;
  try {
    hopattn::clear_error();
    return hopattn::c_status(body());
  } catch (const std::bad_alloc&) {
    return hopattn::c_status(
        hopattn::set_error(Status::kInternal, "out of host memory (std::bad_alloc)"));
  } catch (const std::exception& e) {
    return hopattn::c_status(
        hopattn::set_error(Status::kInternal, std::string("internal error: ") + e.what()));
  } catch (...) {
    return hopattn::c_status(
        hopattn::set_error(Status::kInternal, "internal error: unknown exception"));
  }
}

}  // namespace

extern "C" {

HOPATTN_API hopattn_status hopattn_init_forward_options(hopattn_forward_options* options,
                                                        size_t struct_size) {
  return guarded([&] { return hopattn::init_forward_options(options, struct_size); });
}

HOPATTN_API hopattn_status hopattn_init_varlen(hopattn_varlen* varlen, size_t struct_size) {
  return guarded([&] { return hopattn::init_varlen(varlen, struct_size); });
}

HOPATTN_API hopattn_status hopattn_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                           const hopattn_tensor* v, hopattn_tensor* o, float* lse,
                                           const hopattn_forward_options* options) {
  return guarded([&] { return hopattn::forward(q, k, v, o, lse, options); });
}

HOPATTN_API hopattn_status hopattn_forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                                                  const hopattn_tensor* v, hopattn_tensor* o,
                                                  float* lse, const hopattn_varlen* varlen,
                                                  const hopattn_forward_options* options) {
  return guarded([&] { return hopattn::forward_varlen(q, k, v, o, lse, varlen, options); });
}

HOPATTN_API hopattn_status hopattn_forward_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    const hopattn_varlen* varlen, const hopattn_forward_options* options, size_t* bytes) {
  return guarded([&] { return hopattn::forward_workspace_size(q, k, v, varlen, options, bytes); });
}

HOPATTN_API hopattn_status hopattn_init_backward_options(hopattn_backward_options* options,
                                                         size_t struct_size) {
  return guarded([&] { return hopattn::init_backward_options(options, struct_size); });
}

HOPATTN_API hopattn_status hopattn_backward(const hopattn_tensor* q, const hopattn_tensor* k,
                                            const hopattn_tensor* v, const hopattn_tensor* o,
                                            const hopattn_tensor* d_o, const float* lse,
                                            hopattn_tensor* dq, hopattn_tensor* dk,
                                            hopattn_tensor* dv,
                                            const hopattn_backward_options* options) {
  return guarded([&] { return hopattn::backward(q, k, v, o, d_o, lse, dq, dk, dv, options); });
}

HOPATTN_API hopattn_status hopattn_backward_varlen(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse, hopattn_tensor* dq,
    hopattn_tensor* dk, hopattn_tensor* dv, const hopattn_varlen* varlen,
    const hopattn_backward_options* options) {
  return guarded([&] {
    return hopattn::backward_varlen(q, k, v, o, d_o, lse, dq, dk, dv, varlen, options);
  });
}

HOPATTN_API hopattn_status hopattn_backward_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    const hopattn_varlen* varlen, const hopattn_backward_options* options, size_t* bytes) {
  return guarded(
      [&] { return hopattn::backward_workspace_size(q, k, v, varlen, options, bytes); });
}

HOPATTN_API hopattn_status hopattn_init_quantize_options(hopattn_quantize_options* options,
                                                         size_t struct_size) {
  return guarded([&] { return hopattn::init_quantize_options(options, struct_size); });
}

HOPATTN_API hopattn_status hopattn_quantize_fp8(const hopattn_tensor* x, hopattn_tensor* out,
                                                float* scales,
                                                const hopattn_quantize_options* options) {
  return guarded([&] { return hopattn::quantize_fp8(x, out, scales, options); });
}

HOPATTN_API hopattn_status hopattn_forward_fp8(const hopattn_tensor* q,
                                               const hopattn_fp8_scales* q_scales,
                                               const hopattn_tensor* k,
                                               const hopattn_fp8_scales* k_scales,
                                               const hopattn_tensor* v,
                                               const hopattn_fp8_scales* v_scales,
                                               hopattn_tensor* o, float* lse,
                                               const hopattn_forward_options* options) {
  return guarded([&] {
    return hopattn::forward_fp8(q, q_scales, k, k_scales, v, v_scales, o, lse, options);
  });
}

HOPATTN_API hopattn_status hopattn_forward_fp8_varlen(
    const hopattn_tensor* q, const hopattn_fp8_scales* q_scales, const hopattn_tensor* k,
    const hopattn_fp8_scales* k_scales, const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
    hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
    const hopattn_forward_options* options) {
  return guarded([&] {
    return hopattn::forward_fp8_varlen(q, q_scales, k, k_scales, v, v_scales, o, lse, varlen,
                                       options);
  });
}

// The dtype as the integer the caller passed (enum_value): any int may arrive.
HOPATTN_API hopattn_status hopattn_forward_fp8_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    hopattn_dtype o_dtype, const hopattn_forward_options* options, size_t* bytes) {
  return guarded([&] {
    return hopattn::forward_fp8_workspace_size(q, k, v, hopattn::enum_value(o_dtype), nullptr,
                                               false, options, bytes);
  });
}

HOPATTN_API hopattn_status hopattn_forward_fp8_varlen_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    hopattn_dtype o_dtype, const hopattn_varlen* varlen, const hopattn_forward_options* options,
    size_t* bytes) {
  return guarded([&] {
    return hopattn::forward_fp8_workspace_size(q, k, v, hopattn::enum_value(o_dtype), varlen, true,
                                               options, bytes);
  });
}

HOPATTN_API const char* hopattn_last_error(void) { return hopattn::last_error(); }

HOPATTN_API const char* hopattn_status_name(hopattn_status status) {
  switch (status) {
    case HOPATTN_OK: return "HOPATTN_OK";
    case HOPATTN_ERROR_INVALID_ARGUMENT: return "HOPATTN_ERROR_INVALID_ARGUMENT";
    case HOPATTN_ERROR_UNSUPPORTED: return "HOPATTN_ERROR_UNSUPPORTED";
    case HOPATTN_ERROR_BACKEND_UNAVAILABLE: return "HOPATTN_ERROR_BACKEND_UNAVAILABLE";
    case HOPATTN_ERROR_CUDA: return "HOPATTN_ERROR_CUDA";
    case HOPATTN_ERROR_INTERNAL: return "HOPATTN_ERROR_INTERNAL";
  }
  return "unknown hopattn_status";
}

HOPATTN_API const char* hopattn_version(void) { return HOPATTN_VERSION_STRING; }

HOPATTN_API int hopattn_backend_available(hopattn_backend backend) {
  try {
    return hopattn::backend_available(hopattn::enum_value(backend)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

HOPATTN_API int hopattn_backend_supports(hopattn_backend backend, hopattn_dtype dtype,
                                         int64_t head_dim) {
  return hopattn::backend_supports(hopattn::enum_value(backend), hopattn::enum_value(dtype),
                                   head_dim)
             ? 1
             : 0;
}

HOPATTN_API const char* hopattn_build_info(void) {
  try {
    return hopattn::build_info();
  } catch (...) {
    return "hopattn: build information unavailable (out of memory)";
  }
}

}  // extern "C"
