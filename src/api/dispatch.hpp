// From a validated call to a backend, and the informational queries of the C API. Everything
// here reports failures through hopattn::set_error; the C ABI layer only adds the exception
// barrier and converts Status to hopattn_status.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

Status forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
               hopattn_tensor* o, float* lse, const hopattn_forward_options* options);
Status forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                      hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                      const hopattn_forward_options* options);
Status forward_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                              const hopattn_tensor* v, const hopattn_varlen* varlen,
                              const hopattn_forward_options* options, size_t* bytes);

Status backward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                hopattn_tensor* dq, hopattn_tensor* dk, hopattn_tensor* dv,
                const hopattn_backward_options* options);
Status backward_varlen(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                       const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                       hopattn_tensor* dq, hopattn_tensor* dk, hopattn_tensor* dv,
                       const hopattn_varlen* varlen, const hopattn_backward_options* options);
Status backward_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                               const hopattn_tensor* v, const hopattn_varlen* varlen,
                               const hopattn_backward_options* options, size_t* bytes);

Status quantize_fp8(const hopattn_tensor* x, hopattn_tensor* out, float* scales,
                    const hopattn_quantize_options* options);
Status forward_fp8(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                   const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                   const hopattn_tensor* v, const hopattn_fp8_scales* v_scales, hopattn_tensor* o,
                   float* lse, const hopattn_forward_options* options);
Status forward_fp8_varlen(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                          const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                          const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
                          hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                          const hopattn_forward_options* options);
// o_dtype as the integer the caller passed (enum_value); is_varlen: the varlen form's query.
Status forward_fp8_workspace_size(const hopattn_tensor* q, const hopattn_tensor* k,
                                  const hopattn_tensor* v, int o_dtype, const hopattn_varlen* varlen,
                                  bool is_varlen, const hopattn_forward_options* options,
                                  size_t* bytes);

// The enum arguments as the integers the caller passed (enum_value): any int may arrive.
bool backend_available(int backend);
bool backend_supports(int backend, int dtype, int64_t head_dim);
// One line per backend; computed once, since the SM90 line queries the device.
const char* build_info();

}  // namespace hopattn
