// Every argument rule that only the SM90 backend has (TMA descriptor limits, no broadcast views,
// 32-bit kernel indices, varlen metadata alignment), in one place. Plain C++ with no CUDA, so that
// the validation tests run them on any machine; api/validate_forward.cpp,
// api/validate_backward.cpp, api/validate_forward_fp8.cpp and api/validate_quantize.cpp call
// them once the backend is SM90.
#pragma once

#include "core/problem.hpp"

namespace hopattn::sm90 {

// Status::kOk, or the status after set_error with a message naming the argument (C names: q, k,
// v, o, lse, varlen->cu_seqlens_q, ...).
//
// With these rules passed, every TMA descriptor the kernels encode (cuTensorMapEncodeTiled via
// CuTe's make_tma_copy, over the (rows, head_dim, heads, batch) view of sm90/kernel/tma.hpp) is
// within the driver's limits, so its creation cannot fail (CuTe would only print and assert, and
// the assert is compiled out):
//   - global address 16-byte aligned                         (q/k/v/o.data, checked here);
//   - every global stride a multiple of 16 bytes and < 2^40  (checked here, also the stride of a
//     size-1 dimension, which is never stepped but still goes into the descriptor);
//   - every global dimension in [1, 2^32]                    (rows, heads, batch below 2^31,
//     checked here; heads_kv <= heads_q; head_dim is one the kernel table lists);
//   - box sizes <= 256, element strides 1, rank <= 5, swizzle no wider than the inner box: fixed
//     by each kernel's configuration at compile time, not by the call.
Status check_forward_rules(const ForwardProblem& problem);

// The same rules over the backward's tensors: q, k, v, o, d_o and dq, dk, dv.
Status check_backward_rules(const BackwardProblem& problem);

// hopattn_forward_fp8: the same rules over q, k, v (e4m3: 16-byte strides are multiples of 16
// elements) and o, then what the FP8 kernel takes of the scales: K block scales over a multiple
// of 128 rows, V scales per tensor or per head (validation has checked the layouts
// themselves). Scales with null data (the workspace query) are skipped. Which (output dtype,
// head_dim) the kernels cover is sm90::supports_fp8's, asked through the system queries.
Status check_forward_fp8_rules(const Fp8ForwardProblem& problem);

// hopattn_quantize_fp8: no TMA (x is read and out written with plain loads and stores, so
// check_tensor's natural alignment suffices); 32-bit sizes and scale count.
Status check_quantize_rules(const QuantizeProblem& problem);

}  // namespace hopattn::sm90
