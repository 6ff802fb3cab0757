// Which backend runs a call: HOPATTN_BACKEND_AUTO decided by where the pointers live, then
// whether that backend is built, has its device, holds every pointer in its memory space and
// computes the (dtype, head_dim). Shared by every operation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/system_queries.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

struct NamedPointer {
  const void* pointer;
  std::string name;  // the C argument: "q.data", "lse", "varlen->cu_seqlens_q", ...
};

const char* backend_name(hopattn_backend backend);

// `backend` becomes CPU or SM90. AUTO picks SM90 when `pointers` (all in one memory space) are
// device memory, CPU when they are host memory. An explicit backend gets every pointer checked
// against its memory space.
Status resolve_backend(hopattn_backend requested, const std::vector<NamedPointer>& pointers,
                       const SystemQueries& system, hopattn_backend& backend);

// Every pointer is in `backend`'s memory space, as far as the runtime can tell: a pointer of the
// other space would fault inside the backend. Null pointers are skipped.
Status check_memory_space(hopattn_backend backend, const std::vector<NamedPointer>& pointers,
                          const SystemQueries& system);

Status check_backend_supports(hopattn_backend backend, DType dtype, int64_t head_dim,
                              const SystemQueries& system);
// The same for the backward pass: the CPU computes it wherever it computes the forward; SM90 has
// its own (smaller) kernel list.
Status check_backend_supports_backward(hopattn_backend backend, DType dtype, int64_t head_dim,
                                       const SystemQueries& system);

// The same for hopattn_forward_fp8, by the output dtype (bfloat16 or float16): the CPU takes the
// head_dims of its forward; SM90 the FP8 kernels' list.
Status check_backend_supports_fp8(hopattn_backend backend, DType out_dtype, int64_t head_dim,
                                  const SystemQueries& system);

// The CPU backend's bound on the work of one call, in multiply-adds of Q K^T: the sum over
// sequences of heads_q * seqlen_q * seqlen_k * head_dim (the mask not subtracted). Zero-stride
// (broadcast) inputs let a few bytes describe 2^40 or 2^63 keys, which the backend would run for
// hours or years with no way to interrupt it. 2^44 is 2,048 times the default benchmark shape
// (bf16, 1 x 2048 x 2048, 16 heads, head_dim 128: 0.3 s on 2 cores), so about 10 minutes there,
// and 4 times batch 4, 32 heads, 16k x 16k, head_dim 128. The SM90 backend's 32-bit sizes
// bound its calls.
constexpr int64_t kCpuMaxWorkPerCall = int64_t{1} << 44;

// `work` is the call's multiply-adds, or -1 when it overflows int64; `formula` says how it was
// counted, for the message.
Status check_backend_work(hopattn_backend backend, int64_t work, const std::string& formula);

}  // namespace hopattn
