// Every argument rule that only the SM90 backend has (TMA descriptor limits, no broadcast views,
// 32-bit kernel indices, varlen metadata alignment), in one place. Plain C++ with no CUDA, so that
// the validation tests run them on any machine; api/validate.cpp calls it once the backend is SM90.
#pragma once

#include "core/problem.hpp"

namespace hopattn::sm90 {

// Status::kOk, or the status after set_error with a message naming the argument (C names: q, k,
// v, o, lse, varlen->cu_seqlens_q, ...).
//
// With these rules passed, every TMA descriptor the kernels encode (cuTensorMapEncodeTiled via
// CuTe's make_tma_copy, over the (rows, head_dim, heads, batch) view of sm90/kernel/tma.hpp, with
// the strides of tma_ready() below) is within the driver's limits:
//   - global address 16-byte aligned                         (q/k/v/o.data, checked here);
//   - every global stride a multiple of 16 bytes and < 2^40  (each stepped stride, checked here;
//     a size-1 dimension's stride is never stepped and tma_ready() replaces it by 16 bytes);
//   - every global dimension in [1, 2^32]                    (rows, heads, batch below 2^31,
//     checked here; heads_kv <= heads_q; head_dim is one the kernel table lists);
//   - box sizes <= 256, element strides 1, rank <= 5, swizzle no wider than the inner box: fixed
//     by each kernel's configuration at compile time, not by the call.
// The host still encodes a probe descriptor per tensor before each launch (forward_dispatch.cu),
// so a refusal by a future driver becomes an error rather than a launch with a zeroed descriptor.
Status check_forward_rules(const ForwardProblem& problem);

// Bytes of the stride tma_ready() gives a size-1 dimension: the smallest a TMA descriptor takes.
inline constexpr int64_t kUnsteppedStrideBytes = 16;

// The problem the kernels are launched with: `problem` with the stride of every size-1 dimension
// (a batch of one, every varlen batch, a single row or head) set to kUnsteppedStrideBytes. Such a
// stride is only ever multiplied by index 0, yet goes into the TMA descriptor, where the driver
// would refuse one >= 2^40 bytes or not a multiple of 16; the caller's value there is meaningless.
ForwardProblem tma_ready(const ForwardProblem& problem);

}  // namespace hopattn::sm90
