// The one place where a call is checked: it turns the C arguments of hopattn_forward,
// hopattn_forward_varlen, hopattn_forward_workspace_size, their backward and FP8 counterparts and
// hopattn_quantize_fp8 into a resolved problem (core/problem.hpp) and a concrete backend, or into
// a status and a message that names the argument at fault and what is allowed. Validation never
// reads or writes tensor memory (it reads the host-side varlen metadata and FP8 scales of a CPU
// call). The rules, by scope:
//   tensor_rules.hpp          every tensor of every operation
//   call_rules.hpp            growable structs, backend and scale, varlen metadata, CPU work,
//                             workspace: every operation's
//   backend_choice.hpp        AUTO, memory spaces, what a backend is built for
//   validate_forward.cpp      the forward's options, shapes and lse (forward_rules.hpp: the
//                             part hopattn_forward_fp8 shares)
//   validate_forward_fp8.cpp  hopattn_forward_fp8's dtypes and scales
//   validate_backward.cpp     the backward's options, shapes, lse and outputs
//   validate_quantize.cpp     hopattn_quantize_fp8's options, x, out and scales
//   sm90/sm90_rules.hpp       what only the SM90 kernels need (every operation)
#pragma once

#include <cstddef>

#include "api/system_queries.hpp"
#include "core/problem.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

struct ForwardCall {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // CPU or SM90: AUTO is resolved
  ForwardProblem problem;
  size_t workspace_needed = 0;  // bytes the backend needs for the problem
};

struct BackwardCall {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // CPU or SM90: AUTO is resolved
  BackwardProblem problem;
  size_t workspace_needed = 0;
};

struct QuantizeCall {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // CPU or SM90: AUTO is resolved
  QuantizeProblem problem;
};

struct Fp8ForwardCall {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // CPU or SM90: AUTO is resolved
  Fp8ForwardProblem problem;
  size_t workspace_needed = 0;
};

// hopattn.h's inline defaults, the one definition: what a NULL options means, and the values of
// the fields past an older caller's struct_size.
hopattn_forward_options default_forward_options();
hopattn_varlen default_varlen();
hopattn_backward_options default_backward_options();
hopattn_quantize_options default_quantize_options();

// hopattn_init_forward_options and hopattn_init_varlen: the defaults written into the first
// min(struct_size, sizeof) bytes, struct_size kept as the caller's.
Status init_forward_options(hopattn_forward_options* options, size_t struct_size);
Status init_varlen(hopattn_varlen* varlen, size_t struct_size);
Status init_backward_options(hopattn_backward_options* options, size_t struct_size);
Status init_quantize_options(hopattn_quantize_options* options, size_t struct_size);

// The struct sizes of the first versions of the growable structs: a smaller struct_size cannot
// come from any hopattn.h (it is uninitialised or 0).
extern const size_t kForwardOptionsFirstSize;
extern const size_t kVarlenFirstSize;
extern const size_t kBackwardOptionsFirstSize;
extern const size_t kQuantizeOptionsFirstSize;

// On failure each returns the status after hopattn::set_error; `call` is then unspecified.

// hopattn_forward (options->fp8_v_layout must be HOPATTN_FP8_LAYOUT_ROWS, as in all its forms)
Status validate_forward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                        const hopattn_tensor* o, float* lse, const hopattn_forward_options* options,
                        const SystemQueries& system, ForwardCall& call);

// hopattn_forward_varlen
Status validate_forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                               const hopattn_tensor* v, const hopattn_tensor* o, float* lse,
                               const hopattn_varlen* varlen, const hopattn_forward_options* options,
                               const SystemQueries& system, ForwardCall& call);

// hopattn_forward_workspace_size: the checks of the call it describes that q, k, v, varlen
// (NULL: fixed length) and options allow; call.workspace_needed is the answer. The problem has no
// o (null, with q's strides) and no lse.
Status validate_forward_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                        const hopattn_tensor* v, const hopattn_varlen* varlen,
                                        const hopattn_forward_options* options,
                                        const SystemQueries& system, ForwardCall& call);

// hopattn_backward
Status validate_backward(const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
                         const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse,
                         const hopattn_tensor* dq, const hopattn_tensor* dk,
                         const hopattn_tensor* dv, const hopattn_backward_options* options,
                         const SystemQueries& system, BackwardCall& call);

// hopattn_backward_varlen
Status validate_backward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                                const hopattn_tensor* v, const hopattn_tensor* o,
                                const hopattn_tensor* d_o, const float* lse,
                                const hopattn_tensor* dq, const hopattn_tensor* dk,
                                const hopattn_tensor* dv, const hopattn_varlen* varlen,
                                const hopattn_backward_options* options,
                                const SystemQueries& system, BackwardCall& call);

// hopattn_backward_workspace_size: the checks of the call that q, k, v, varlen (NULL: fixed
// length) and options allow. The problem has no o, d_o, lse or gradients (null pointers; o, d_o
// and dq with q's strides, dk and dv with k's).
Status validate_backward_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                         const hopattn_tensor* v, const hopattn_varlen* varlen,
                                         const hopattn_backward_options* options,
                                         const SystemQueries& system, BackwardCall& call);

// hopattn_quantize_fp8
Status validate_quantize(const hopattn_tensor* x, const hopattn_tensor* out, float* scales,
                         const hopattn_quantize_options* options, const SystemQueries& system,
                         QuantizeCall& call);

// hopattn_forward_fp8: q, k, v e4m3, v in options->fp8_v_layout's layout (V-transposed: exactly
// its strides); o bfloat16 or float16; the forward's shapes, lse, options and outputs apart from
// every input (the scale arrays too); each scales struct non-null with a valid layout and an
// array in the backend's memory space; on the CPU every scale read and > 0, NaN or +inf (marks
// of non-finite blocks, which give NaN). hopattn_forward_fp8_varlen (is_varlen): varlen read and
// checked as hopattn_forward_varlen's, the scales those of the packed tensors.
Status validate_forward_fp8(const hopattn_tensor* q, const hopattn_fp8_scales* q_scales,
                            const hopattn_tensor* k, const hopattn_fp8_scales* k_scales,
                            const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
                            const hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
                            bool is_varlen, const hopattn_forward_options* options,
                            const SystemQueries& system, Fp8ForwardCall& call);

// hopattn_forward_fp8_workspace_size (is_varlen false) and hopattn_forward_fp8_varlen_workspace_size:
// the checks of the call that q, k, v, o_dtype, varlen and options allow. The problem has no o
// (null, with q's strides), no lse and no scales (null data, per tensor). o_dtype is the integer
// the caller passed (any int may arrive).
Status validate_forward_fp8_workspace_query(const hopattn_tensor* q, const hopattn_tensor* k,
                                            const hopattn_tensor* v, int o_dtype,
                                            const hopattn_varlen* varlen, bool is_varlen,
                                            const hopattn_forward_options* options,
                                            const SystemQueries& system, Fp8ForwardCall& call);

}  // namespace hopattn
