// hopattn for C++: a header-only layer over the C ABI of hopattn.h that throws instead of
// returning statuses. It adds no behaviour: every call is one C call.
//
//   auto q = hopattn::Tensor::contiguous(q_ptr, HOPATTN_DTYPE_BFLOAT16, batch, seqlen, heads, 128);
//   ...
//   hopattn::ForwardOptions options;
//   options.causal = true;
//   hopattn::forward(q, k, v, o, lse, options);  // throws hopattn::Error on failure
//   hopattn::BackwardOptions grad_options;
//   grad_options.causal = true;
//   hopattn::backward(q, k, v, o, d_o, lse, dq, dk, dv, grad_options);
//   hopattn::quantize_fp8(x, x8, x_scales);  // defaults: block scales of 128 rows, rotated
//   hopattn::forward_fp8(q8, hopattn::Fp8ScalesView::block(q_scales), k8, ..., o);
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "hopattn/hopattn.h"

namespace hopattn {

// A failed call: what() is hopattn_last_error(), status() the C status.
class Error : public std::runtime_error {
 public:
  Error(hopattn_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  hopattn_status status() const noexcept { return status_; }

 private:
  hopattn_status status_;
};

// A (batch, seqlen, heads, head_dim) view of memory the caller owns; strides in elements.
// Tensor is a read-only view: q, k and v. MutableTensor, a Tensor whose memory may be written, is
// the output o. Tensor::contiguous of a const pointer gives a Tensor, of a non-const one a
// MutableTensor, so const inputs need no cast and a const buffer cannot be passed as the output.
// Both are descriptors, copied freely: forward() takes o as a const reference, so
// forward(q, k, v, Tensor::contiguous(o_ptr, ...)) works.
struct MutableTensor;

struct Tensor {
  hopattn_tensor raw{};

  Tensor() = default;
  Tensor(const void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen, int64_t heads,
         int64_t head_dim, int64_t batch_stride, int64_t seq_stride, int64_t head_stride)
      // The C struct has one data field for inputs and outputs; the library never writes
      // through an input's.
      : raw{const_cast<void*>(data), dtype, batch, seqlen, heads, head_dim, batch_stride,
            seq_stride, head_stride} {}

  const void* data() const { return raw.data; }

  // Densely packed in (batch, seqlen, heads, head_dim) order.
  static Tensor contiguous(const void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen,
                           int64_t heads, int64_t head_dim) {
    return Tensor(data, dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim,
                  heads * head_dim, head_dim);
  }
  static inline MutableTensor contiguous(void* data, hopattn_dtype dtype, int64_t batch,
                                         int64_t seqlen, int64_t heads, int64_t head_dim);
  // A null pointer is neither const nor not (validation names it: "q.data is NULL").
  static inline MutableTensor contiguous(std::nullptr_t, hopattn_dtype dtype, int64_t batch,
                                         int64_t seqlen, int64_t heads, int64_t head_dim);
};

struct MutableTensor : Tensor {
  MutableTensor() = default;
  MutableTensor(void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen, int64_t heads,
                int64_t head_dim, int64_t batch_stride, int64_t seq_stride, int64_t head_stride)
      : Tensor(data, dtype, batch, seqlen, heads, head_dim, batch_stride, seq_stride,
               head_stride) {}

  void* data() const { return raw.data; }
};

inline MutableTensor Tensor::contiguous(void* data, hopattn_dtype dtype, int64_t batch,
                                        int64_t seqlen, int64_t heads, int64_t head_dim) {
  return MutableTensor(data, dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim,
                       heads * head_dim, head_dim);
}
inline MutableTensor Tensor::contiguous(std::nullptr_t, hopattn_dtype dtype, int64_t batch,
                                        int64_t seqlen, int64_t heads, int64_t head_dim) {
  return contiguous(static_cast<void*>(nullptr), dtype, batch, seqlen, heads, head_dim);
}

struct ForwardOptions {
  bool causal = false;
  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim)
  hopattn_backend backend = HOPATTN_BACKEND_AUTO;
  void* cuda_stream = nullptr;  // cudaStream_t for the SM90 backend
  void* workspace = nullptr;    // null: the library allocates (see hopattn_forward_options)
  size_t workspace_bytes = 0;
  hopattn_fp8_layout fp8_v_layout = HOPATTN_FP8_LAYOUT_ROWS;  // forward_fp8 only: v's layout

  hopattn_forward_options to_c() const {
    hopattn_forward_options options = hopattn_default_forward_options();
    options.causal = causal ? 1 : 0;
    options.softmax_scale = softmax_scale;
    options.backend = backend;
    options.cuda_stream = cuda_stream;
    options.workspace = workspace;
    options.workspace_bytes = workspace_bytes;
    options.fp8_v_layout = fp8_v_layout;
    return options;
  }
};

struct BackwardOptions {
  bool causal = false;        // as in the forward call
  float softmax_scale = 0.f;  // as in the forward call; 0: 1/sqrt(head_dim)
  hopattn_backend backend = HOPATTN_BACKEND_AUTO;
  void* cuda_stream = nullptr;
  bool deterministic = false;  // bitwise-identical gradients run to run (the CPU always is)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  hopattn_backward_options to_c() const {
    hopattn_backward_options options = hopattn_default_backward_options();
    options.causal = causal ? 1 : 0;
    options.softmax_scale = softmax_scale;
    options.backend = backend;
    options.cuda_stream = cuda_stream;
    options.deterministic = deterministic ? 1 : 0;
    options.workspace = workspace;
    options.workspace_bytes = workspace_bytes;
    return options;
  }
};

struct QuantizeOptions {
  hopattn_fp8_scaling scaling = HOPATTN_FP8_SCALE_BLOCK;
  int64_t block_rows = 128;  // HOPATTN_FP8_SCALE_BLOCK: rows per scale
  bool hadamard = true;      // rotate each head_dim vector first (a power-of-two head_dim)
  uint64_t seed = 0;         // the rotation's signs
  hopattn_backend backend = HOPATTN_BACKEND_AUTO;
  void* cuda_stream = nullptr;
  hopattn_fp8_layout layout = HOPATTN_FP8_LAYOUT_ROWS;  // out's; V_TRANSPOSED needs hadamard = false

  hopattn_quantize_options to_c() const {
    hopattn_quantize_options options = hopattn_default_quantize_options();
    options.scaling = scaling;
    options.block_rows = block_rows;
    options.hadamard = hadamard ? 1 : 0;
    options.seed = seed;
    options.backend = backend;
    options.cuda_stream = cuda_stream;
    options.layout = layout;
    return options;
  }
};

// The scales of one e4m3 tensor (hopattn_fp8_scales): a view of the caller's float32 values in
// the layout hopattn_quantize_fp8 writes for `scaling` (and `block_rows`), in the backend's
// memory space. For hopattn::forward_fp8.
struct Fp8ScalesView {
  const float* data = nullptr;
  hopattn_fp8_scaling scaling = HOPATTN_FP8_SCALE_BLOCK;
  int64_t block_rows = 128;  // HOPATTN_FP8_SCALE_BLOCK: rows per scale

  static Fp8ScalesView tensor(const float* data) { return {data, HOPATTN_FP8_SCALE_TENSOR, 0}; }
  static Fp8ScalesView head(const float* data) { return {data, HOPATTN_FP8_SCALE_HEAD, 0}; }
  static Fp8ScalesView block(const float* data, int64_t block_rows = 128) {
    return {data, HOPATTN_FP8_SCALE_BLOCK, block_rows};
  }
  // The layout quantize_fp8(x, out, data, options) writes.
  static Fp8ScalesView of(const float* data, const QuantizeOptions& options) {
    return {data, options.scaling, options.block_rows};
  }

  hopattn_fp8_scales to_c() const { return {data, scaling, block_rows}; }
};

// A variable-length batch (hopattn_varlen): int32 prefix sums in the backend's memory space.
struct Varlen {
  int64_t batch = 0;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_k = nullptr;  // optional
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;

  hopattn_varlen to_c() const {
    hopattn_varlen varlen = hopattn_default_varlen();
    varlen.batch = batch;
    varlen.cu_seqlens_q = cu_seqlens_q;
    varlen.cu_seqlens_k = cu_seqlens_k;
    varlen.seqused_k = seqused_k;
    varlen.max_seqlen_q = max_seqlen_q;
    varlen.max_seqlen_k = max_seqlen_k;
    return varlen;
  }
};

inline void check(hopattn_status status) {
  if (status != HOPATTN_OK) throw Error(status, hopattn_last_error());
}

// O = softmax(Q K^T * scale) V; lse, when given, receives (batch, heads_q, seqlen_q) float32.
inline void forward(const Tensor& q, const Tensor& k, const Tensor& v, const MutableTensor& o,
                    float* lse = nullptr, const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  hopattn_tensor c_o = o.raw;
  check(hopattn_forward(&q.raw, &k.raw, &v.raw, &c_o, lse, &c_options));
}

// The variable-length form: q, k, v, o of batch 1 packed as `varlen` says; lse, when given,
// receives (heads_q, total_q) float32.
inline void forward_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                           const MutableTensor& o, const Varlen& varlen, float* lse = nullptr,
                           const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  const hopattn_varlen c_varlen = varlen.to_c();
  hopattn_tensor c_o = o.raw;
  check(hopattn_forward_varlen(&q.raw, &k.raw, &v.raw, &c_o, lse, &c_varlen, &c_options));
}

// Bytes of workspace forward (varlen null) or forward_varlen would need.
inline size_t forward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Varlen* varlen = nullptr,
                                     const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  const hopattn_varlen c_varlen = varlen != nullptr ? varlen->to_c() : hopattn_default_varlen();
  size_t bytes = 0;
  check(hopattn_forward_workspace_size(
      &q.raw, &k.raw, &v.raw, varlen != nullptr ? &c_varlen : nullptr, &c_options, &bytes));
  return bytes;
}

// The gradients of forward(q, k, v, o, lse, ...) for the output gradient d_o: dq like q, dk and dv
// like k (GQA: summed over each kv head's query heads). lse is the forward's, required.
inline void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& d_o, const float* lse, const MutableTensor& dq,
                     const MutableTensor& dk, const MutableTensor& dv,
                     const BackwardOptions& options = {}) {
  const hopattn_backward_options c_options = options.to_c();
  hopattn_tensor c_dq = dq.raw, c_dk = dk.raw, c_dv = dv.raw;
  check(hopattn_backward(&q.raw, &k.raw, &v.raw, &o.raw, &d_o.raw, lse, &c_dq, &c_dk, &c_dv,
                         &c_options));
}

// The variable-length form: every tensor of batch 1 packed as `varlen` says; lse (heads_q, total_q).
inline void backward_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                            const Tensor& d_o, const float* lse, const MutableTensor& dq,
                            const MutableTensor& dk, const MutableTensor& dv,
                            const Varlen& varlen, const BackwardOptions& options = {}) {
  const hopattn_backward_options c_options = options.to_c();
  const hopattn_varlen c_varlen = varlen.to_c();
  hopattn_tensor c_dq = dq.raw, c_dk = dk.raw, c_dv = dv.raw;
  check(hopattn_backward_varlen(&q.raw, &k.raw, &v.raw, &o.raw, &d_o.raw, lse, &c_dq, &c_dk,
                                &c_dv, &c_varlen, &c_options));
}

// Bytes of workspace backward (varlen null) or backward_varlen would need.
inline size_t backward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Varlen* varlen = nullptr,
                                      const BackwardOptions& options = {}) {
  const hopattn_backward_options c_options = options.to_c();
  const hopattn_varlen c_varlen = varlen != nullptr ? varlen->to_c() : hopattn_default_varlen();
  size_t bytes = 0;
  check(hopattn_backward_workspace_size(
      &q.raw, &k.raw, &v.raw, varlen != nullptr ? &c_varlen : nullptr, &c_options, &bytes));
  return bytes;
}

// x (float32, bfloat16 or float16) to float8 e4m3 in out, with float32 scales in
// options.scaling's layout (hopattn_quantize_fp8).
inline void quantize_fp8(const Tensor& x, const MutableTensor& out, float* scales,
                         const QuantizeOptions& options = {}) {
  const hopattn_quantize_options c_options = options.to_c();
  hopattn_tensor c_out = out.raw;
  check(hopattn_quantize_fp8(&x.raw, &c_out, scales, &c_options));
}

// Attention on e4m3 tensors (hopattn_forward_fp8): q, k and v hold the codes quantize_fp8 wrote
// (q and k rotated with one seed, or neither; v not rotated), each with its scales; o is bfloat16
// or float16, lse as in forward.
inline void forward_fp8(const Tensor& q, const Fp8ScalesView& q_scales, const Tensor& k,
                        const Fp8ScalesView& k_scales, const Tensor& v,
                        const Fp8ScalesView& v_scales, const MutableTensor& o,
                        float* lse = nullptr, const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  const hopattn_fp8_scales c_q = q_scales.to_c(), c_k = k_scales.to_c(), c_v = v_scales.to_c();
  hopattn_tensor c_o = o.raw;
  check(hopattn_forward_fp8(&q.raw, &c_q, &k.raw, &c_k, &v.raw, &c_v, &c_o, lse, &c_options));
}

// The variable-length form (hopattn_forward_fp8_varlen): packed tensors as in forward_varlen,
// their scales as quantize_fp8 writes them for the packed tensors.
inline void forward_fp8_varlen(const Tensor& q, const Fp8ScalesView& q_scales, const Tensor& k,
                               const Fp8ScalesView& k_scales, const Tensor& v,
                               const Fp8ScalesView& v_scales, const MutableTensor& o,
                               const Varlen& varlen, float* lse = nullptr,
                               const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  const hopattn_varlen c_varlen = varlen.to_c();
  const hopattn_fp8_scales c_q = q_scales.to_c(), c_k = k_scales.to_c(), c_v = v_scales.to_c();
  hopattn_tensor c_o = o.raw;
  check(hopattn_forward_fp8_varlen(&q.raw, &c_q, &k.raw, &c_k, &v.raw, &c_v, &c_o, lse, &c_varlen,
                                   &c_options));
}

// Bytes of workspace forward_fp8 (varlen null) or forward_fp8_varlen would need with an output
// of o_dtype.
inline size_t forward_fp8_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                         hopattn_dtype o_dtype, const Varlen* varlen = nullptr,
                                         const ForwardOptions& options = {}) {
  const hopattn_forward_options c_options = options.to_c();
  size_t bytes = 0;
  if (varlen != nullptr) {
    const hopattn_varlen c_varlen = varlen->to_c();
    check(hopattn_forward_fp8_varlen_workspace_size(&q.raw, &k.raw, &v.raw, o_dtype, &c_varlen,
                                                    &c_options, &bytes));
  } else {
    check(hopattn_forward_fp8_workspace_size(&q.raw, &k.raw, &v.raw, o_dtype, &c_options, &bytes));
  }
  return bytes;
}
// The fixed-length form with options (the signature before the varlen form came).
inline size_t forward_fp8_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                         hopattn_dtype o_dtype, const ForwardOptions& options) {
  return forward_fp8_workspace_size(q, k, v, o_dtype, nullptr, options);
}

inline std::string version() { return hopattn_version(); }
inline std::string build_info() { return hopattn_build_info(); }
inline bool backend_available(hopattn_backend backend) {
  return hopattn_backend_available(backend) != 0;
}
inline bool backend_supports(hopattn_backend backend, hopattn_dtype dtype, int64_t head_dim) {
  return hopattn_backend_supports(backend, dtype, head_dim) != 0;
}

}  // namespace hopattn
