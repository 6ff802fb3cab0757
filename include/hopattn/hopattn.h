/*
 * hopattn: fused attention, C ABI.
 *
 * softmax(Q K^T * scale) V over tensors in (batch, seqlen, heads, head_dim) layout.
 * Every entry point returns a status; on failure hopattn_last_error() names the
 * offending argument and what is allowed. The ABI is plain C so that ctypes and
 * other foreign-function interfaces can call it without a compiler.
 */
#ifndef HOPATTN_H_
#define HOPATTN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define HOPATTN_API __declspec(dllexport)
#else
#define HOPATTN_API __attribute__((visibility("default")))
#endif

typedef enum hopattn_status {
  HOPATTN_OK = 0,
  HOPATTN_ERROR_INVALID_ARGUMENT = 1, /* the call itself is malformed */
  HOPATTN_ERROR_UNSUPPORTED = 2,      /* well formed, but the chosen backend does not do it */
  HOPATTN_ERROR_BACKEND_UNAVAILABLE = 3, /* backend not built in, or no suitable device */
  HOPATTN_ERROR_CUDA = 4,             /* a CUDA call failed */
  HOPATTN_ERROR_INTERNAL = 5
} hopattn_status;

typedef enum hopattn_dtype {
  HOPATTN_DTYPE_FLOAT32 = 0,
  HOPATTN_DTYPE_BFLOAT16 = 1,
  HOPATTN_DTYPE_FLOAT16 = 2
} hopattn_dtype;

typedef enum hopattn_backend {
  HOPATTN_BACKEND_AUTO = 0, /* SM90 for device pointers, CPU for host pointers */
  HOPATTN_BACKEND_CPU = 1,
  HOPATTN_BACKEND_SM90 = 2
} hopattn_backend;

/*
 * A 4-d tensor in (batch, seqlen, heads, head_dim) order. Strides count elements;
 * head_dim must be contiguous (unit stride), the other three are free, so views
 * such as a slice of a packed QKV tensor need no copy.
 */
typedef struct hopattn_tensor {
  void* data;
  hopattn_dtype dtype;
  int64_t batch, seqlen, heads, head_dim;
  int64_t batch_stride, seq_stride, head_stride;
} hopattn_tensor;

typedef struct hopattn_forward_options {
  /* Nonzero: query i sees key j iff j <= i + (seqlen_k - seqlen_q), the mask aligned
   * to the bottom-right corner of the score matrix (FlashAttention 2 and 3). Rows
   * that see no key get O = 0 and LSE = -inf. */
  int causal;
  /* Multiplies Q K^T before the softmax. 0 selects the default 1/sqrt(head_dim). */
  float softmax_scale;
  hopattn_backend backend;
  /* cudaStream_t for the SM90 backend; NULL is the legacy default stream. */
  void* cuda_stream;
} hopattn_forward_options;

/* causal = 0, softmax_scale = 0 (default), backend = AUTO, stream = NULL. */
HOPATTN_API hopattn_forward_options hopattn_default_forward_options(void);

/*
 * O = softmax(Q K^T * scale) V, and optionally the log-sum-exp of each score row.
 *   q: (batch, seqlen_q, heads_q,  head_dim)
 *   k: (batch, seqlen_k, heads_kv, head_dim)   heads_q % heads_kv == 0 (GQA / MQA)
 *   v: (batch, seqlen_k, heads_kv, head_dim)
 *   o: (batch, seqlen_q, heads_q,  head_dim)   same dtype as q
 *   lse: NULL, or float32 (batch, heads_q, seqlen_q) contiguous, natural log of
 *        sum_j exp(scale * q_i . k_j) over the keys row i sees.
 * q, k, v and o share one dtype; o is the output dtype. On the SM90 backend every
 * pointer is device memory and the call is asynchronous on options->cuda_stream.
 */
HOPATTN_API hopattn_status hopattn_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                           const hopattn_tensor* v, hopattn_tensor* o, float* lse,
                                           const hopattn_forward_options* options);

/* The message of the last failed call on this thread ("" after a success). */
HOPATTN_API const char* hopattn_last_error(void);

HOPATTN_API const char* hopattn_status_name(hopattn_status status);

/* "MAJOR.MINOR.PATCH" */
HOPATTN_API const char* hopattn_version(void);

/* Nonzero if this build contains the backend and, for SM90, a Hopper GPU is visible. */
HOPATTN_API int hopattn_backend_available(hopattn_backend backend);

/* Nonzero if the backend computes this (dtype, head_dim) combination. Does not check
 * for a device: see hopattn_backend_available. */
HOPATTN_API int hopattn_backend_supports(hopattn_backend backend, hopattn_dtype dtype,
                                         int64_t head_dim);

/* One human-readable line per backend: what this build contains and supports. */
HOPATTN_API const char* hopattn_build_info(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HOPATTN_H_ */
