// The forward's rules that hopattn_forward_fp8 shares with hopattn_forward (validate_forward.cpp
// defines them): its options, the shapes of q, k, v and o, the outputs apart from the inputs, the
// CPU work bound. The dtype rules are each call's own: one attention dtype for the forward, e4m3
// inputs and a 16-bit output for FP8.
#pragma once

#include <vector>

#include "api/system_queries.hpp"
#include "api/tensor_rules.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

// *given (NULL: the defaults) as this library knows it, with options->backend and
// options->softmax_scale checked.
Status read_forward_options(const hopattn_forward_options* given, hopattn_forward_options& options);

// Tensors that passed check_tensor: the same batch (1 for varlen), v of k's shape, head_dim shared,
// o (unless null: a workspace query) of q's shape with distinct elements, heads_q a multiple of
// heads_kv. Dtypes are not compared.
Status check_forward_shapes(const hopattn_tensor& q, const hopattn_tensor& k,
                            const hopattn_tensor& v, const hopattn_tensor* o, bool varlen);

// o and lse (unless null, after check_lse) share no memory with q, k, v (in its layout: FP8's may
// be V-transposed), `more_inputs` (the FP8 scales) or each other.
Status check_forward_outputs(const hopattn_tensor& q, const hopattn_tensor& k, const NamedTensor& v,
                             const hopattn_tensor& o, const float* lse,
                             const std::vector<ByteRange>& more_inputs = {});

// The CPU backend's bound on the call's work (check_backend_work); nothing for SM90. varlen: null
// for a fixed-length call, else metadata already checked.
Status check_forward_work(hopattn_backend backend, const hopattn_tensor& q,
                          const hopattn_tensor& k, const hopattn_varlen* varlen);

}  // namespace hopattn
