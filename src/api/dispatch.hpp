// From a validated call to a backend, and the informational queries of the C API. Everything
// here reports failures through hopattn::set_error; the C ABI layer only adds the exception
// barrier.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.h"

namespace hopattn {

hopattn_status forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                       hopattn_tensor* o, float* lse, const hopattn_forward_options* options);

bool backend_available(hopattn_backend backend);
bool backend_supports(hopattn_backend backend, hopattn_dtype dtype, int64_t head_dim);
// One line per backend; computed once, since the SM90 line queries the device.
const char* build_info();

}  // namespace hopattn
