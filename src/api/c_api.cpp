// The C ABI: thin wrappers over dispatch.hpp, plus the barrier that keeps C++
// exceptions from crossing into C callers.
#include <exception>
#include <new>
#include <string>

#include "api/dispatch.hpp"
#include "api/validate.hpp"
#include "core/error.hpp"
#include "hopattn/hopattn.h"

#ifndef HOPATTN_VERSION_STRING
#error "HOPATTN_VERSION_STRING comes from the CMake project version"
#endif

extern "C" {

HOPATTN_API hopattn_forward_options hopattn_default_forward_options(void) {
  return hopattn::default_forward_options();
}

HOPATTN_API hopattn_status hopattn_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                           const hopattn_tensor* v, hopattn_tensor* o, float* lse,
                                           const hopattn_forward_options* options) {
  try {
    hopattn::clear_error();
    return hopattn::forward(q, k, v, o, lse, options);
  } catch (const std::bad_alloc&) {
    return hopattn::set_error(HOPATTN_ERROR_INTERNAL, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return hopattn::set_error(HOPATTN_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return hopattn::set_error(HOPATTN_ERROR_INTERNAL, "internal error: unknown exception");
  }
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
    return hopattn::backend_available(backend) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

HOPATTN_API int hopattn_backend_supports(hopattn_backend backend, hopattn_dtype dtype,
                                         int64_t head_dim) {
  return hopattn::backend_supports(backend, dtype, head_dim) ? 1 : 0;
}

HOPATTN_API const char* hopattn_build_info(void) {
  try {
    return hopattn::build_info();
  } catch (...) {
    return "hopattn: build information unavailable (out of memory)";
  }
}

}  // extern "C"
