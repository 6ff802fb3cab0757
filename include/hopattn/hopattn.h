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
#include <string.h>

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
  HOPATTN_DTYPE_FLOAT16 = 2,
  /* OCP float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; finite max 448, no
   * infinity, NaN 0x7f / 0xff. hopattn_quantize_fp8 writes it and hopattn_forward_fp8 reads it;
   * hopattn_forward and hopattn_backward refuse it. */
  HOPATTN_DTYPE_FLOAT8_E4M3 = 3
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

/*
 * Structs that may grow: hopattn_forward_options, hopattn_backward_options,
 * hopattn_quantize_options and hopattn_varlen start with struct_size, the
 * sizeof() the caller was compiled with. The library reads only the fields that fit in it and
 * gives later fields their defaults, so a caller built against an older header keeps working.
 * Every field added to a struct has its default at all-zero bytes, and a library refuses
 * (HOPATTN_ERROR_INVALID_ARGUMENT) a struct from a newer header with a nonzero byte past the
 * fields it knows: a request it would otherwise ignore.
 * No growable struct crosses the library boundary by value, since a library newer than the
 * caller's header would write its bigger struct into the caller's smaller one:
 *   - from C and C++, hopattn_default_forward_options() and hopattn_default_varlen() below are
 *     inline, so they are compiled into the caller with the caller's sizeof;
 *   - a foreign-function caller that cannot call inline functions (ctypes) allocates the struct
 *     itself and calls hopattn_init_forward_options() or hopattn_init_varlen() with its size.
 * (hopattn_tensor is a fixed value type: new operations take new arguments instead.)
 */
/*
 * The memory layout of an e4m3 tensor (hopattn_quantize_fp8's out, hopattn_forward_fp8's v).
 * HOPATTN_FP8_LAYOUT_ROWS is hopattn_tensor's. HOPATTN_FP8_LAYOUT_V_TRANSPOSED is the layout in
 * which the SM90 FP8 kernel reads V without transposing it (up to 14% faster than from rows):
 * each head_dim column of a (batch, head) stored contiguously along seqlen. Element (b, s, h, d)
 * of a (batch, seqlen, heads, head_dim) tensor lies at
 *   b * batch_stride + h * head_stride + d * pitch + 16 * (s / 16) + position(s % 16)
 * with pitch = seqlen rounded up to a multiple of 16, position(8 * i + 2 * c + j) = 4 * c + 2 * i
 * + j (i, j in {0, 1}, c in 0..3: the order of the kernel's P operand), head_stride = head_dim *
 * pitch, batch_stride = heads * head_stride and seq_stride = 1, which the hopattn_tensor must
 * state. The pad rows, seqlen up to the pitch, must hold finite codes (hopattn_quantize_fp8
 * writes 0): the kernel reads them, with a weight of zero. For a
 * variable-length batch (batch 1) seqlen is total_k and every position counts from the start of
 * the packed tensor.
 */
typedef enum hopattn_fp8_layout {
  HOPATTN_FP8_LAYOUT_ROWS = 0,
  HOPATTN_FP8_LAYOUT_V_TRANSPOSED = 1
} hopattn_fp8_layout;

typedef struct hopattn_forward_options {
  size_t struct_size; /* sizeof(hopattn_forward_options) */
  /* Nonzero: query i sees key j iff j <= i + (seqlen_k - seqlen_q), the mask aligned
   * to the bottom-right corner of the score matrix (FlashAttention 2 and 3); per sequence
   * for variable-length batches. Rows that see no key get O = 0 and LSE = -inf. */
  int causal;
  /* Multiplies Q K^T before the softmax. 0 selects the default 1/sqrt(head_dim). */
  float softmax_scale;
  hopattn_backend backend;
  /* cudaStream_t for the SM90 backend; NULL is the legacy default stream. */
  void* cuda_stream;
  /* Scratch memory for the call, in the backend's memory space: NULL lets the library allocate
   * what it needs (on the SM90 backend stream-ordered, cudaMallocAsync/cudaFreeAsync on
   * cuda_stream); otherwise workspace_bytes >= hopattn_forward_workspace_size(), 256-byte
   * aligned, untouched by anything else until the call's work on the stream is done. */
  void* workspace;
  size_t workspace_bytes;
  /* hopattn_forward_fp8 only: the layout of v (hopattn_fp8_layout); the other operations take
   * HOPATTN_FP8_LAYOUT_ROWS, the default. */
  hopattn_fp8_layout fp8_v_layout;
} hopattn_forward_options;

/*
 * A variable-length batch packed along the seqlen dimension (FlashAttention's varlen layout):
 * q and o are (1, total_q, heads_q, head_dim), k and v (1, total_k, heads_kv, head_dim), and
 * sequence b owns query rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and key rows
 * [cu_seqlens_k[b], cu_seqlens_k[b + 1]). Zero-length sequences are allowed.
 * The int32 arrays live in the backend's memory space. The CPU backend checks them fully; the
 * SM90 backend cannot read them without a device sync, so it checks what the host can see
 * (pointers, memory space, alignment) and its kernels clamp every sequence to the tensors:
 * wrong metadata gives wrong results for the sequences it describes, never an access outside
 * q, k, v, o or lse.
 */
typedef struct hopattn_varlen {
  size_t struct_size;           /* sizeof(hopattn_varlen) */
  int64_t batch;                /* number of sequences */
  const int32_t* cu_seqlens_q;  /* batch + 1 prefix sums: 0, ..., total_q (= q.seqlen) */
  const int32_t* cu_seqlens_k;  /* batch + 1 prefix sums: 0, ..., total_k (= k.seqlen) */
  /* NULL, or batch counts: sequence b attends to the first seqused_k[b] keys of its rows only
   * (a KV cache filled to different lengths); the causal mask aligns to that length. */
  const int32_t* seqused_k;
  int64_t max_seqlen_q; /* >= every query length; sizes the SM90 grid */
  int64_t max_seqlen_k; /* >= every key length */
} hopattn_varlen;

/*
 * The defaults, defined here once: the library reads them too, for a NULL options and for the
 * fields past an older caller's struct_size. Every field the defaults do not name is zero.
 */

/* struct_size = sizeof, causal = 0, softmax_scale = 0 (default), backend = AUTO, stream = NULL,
 * workspace = NULL, workspace_bytes = 0, fp8_v_layout = HOPATTN_FP8_LAYOUT_ROWS. */
static inline hopattn_forward_options hopattn_default_forward_options(void) {
  hopattn_forward_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.backend = HOPATTN_BACKEND_AUTO;
  return options;
}

/* struct_size = sizeof, batch = 0, every pointer NULL, max_seqlen_q = max_seqlen_k = 0. */
static inline hopattn_varlen hopattn_default_varlen(void) {
  hopattn_varlen varlen;
  memset(&varlen, 0, sizeof varlen);
  varlen.struct_size = sizeof varlen;
  return varlen;
}

/*
 * For callers that cannot call the inline functions above: write the defaults into the first
 * struct_size bytes of *options (zero past the fields this library knows), with
 * options->struct_size = struct_size, the sizeof of the caller's struct. Nothing past struct_size
 * is written. NULL, or a struct_size smaller than that of the first hopattn.h with the struct, is
 * HOPATTN_ERROR_INVALID_ARGUMENT and writes nothing.
 */
HOPATTN_API hopattn_status hopattn_init_forward_options(hopattn_forward_options* options,
                                                        size_t struct_size);

/* The same for hopattn_varlen. */
HOPATTN_API hopattn_status hopattn_init_varlen(hopattn_varlen* varlen, size_t struct_size);

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
 * The CPU backend refuses (HOPATTN_ERROR_UNSUPPORTED) a call of more than 2^44 multiply-adds,
 * batch * heads_q * seqlen_q * seqlen_k * head_dim, broadcast (zero-stride) rows counted.
 * NaN in an input row gives NaN in O and in the LSE of every row that sees it; README.md has
 * the full table of what NaN and inf inputs produce.
 */
HOPATTN_API hopattn_status hopattn_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                           const hopattn_tensor* v, hopattn_tensor* o, float* lse,
                                           const hopattn_forward_options* options);

/*
 * The variable-length form of hopattn_forward: q, k, v, o as hopattn_varlen describes, lse NULL
 * or float32 (heads_q, total_q) contiguous. Same options, same rules otherwise.
 */
HOPATTN_API hopattn_status hopattn_forward_varlen(const hopattn_tensor* q, const hopattn_tensor* k,
                                                  const hopattn_tensor* v, hopattn_tensor* o,
                                                  float* lse, const hopattn_varlen* varlen,
                                                  const hopattn_forward_options* options);

/*
 * The workspace the call hopattn_forward(q, k, v, ..., options) or, with varlen non-NULL,
 * hopattn_forward_varlen(q, k, v, ..., varlen, options) needs, in *bytes (0 when it needs none).
 * The tensors are validated as the call would validate them; their memory is not touched.
 */
HOPATTN_API hopattn_status hopattn_forward_workspace_size(const hopattn_tensor* q,
                                                          const hopattn_tensor* k,
                                                          const hopattn_tensor* v,
                                                          const hopattn_varlen* varlen,
                                                          const hopattn_forward_options* options,
                                                          size_t* bytes);

/*
 * Options of the backward pass; a growable struct like hopattn_forward_options.
 */
typedef struct hopattn_backward_options {
  size_t struct_size; /* sizeof(hopattn_backward_options) */
  int causal;         /* as in the forward call whose gradients are wanted */
  float softmax_scale; /* as in the forward call; 0 selects 1/sqrt(head_dim) */
  hopattn_backend backend;
  void* cuda_stream;
  /* Nonzero: bitwise-identical gradients from run to run on the same inputs (the SM90 backend
   * orders its dq accumulation, at a cost README.md states). The CPU backend always is. */
  int deterministic;
  /* As in hopattn_forward_options, sized by hopattn_backward_workspace_size(). */
  void* workspace;
  size_t workspace_bytes;
} hopattn_backward_options;

/* struct_size = sizeof, causal = 0, softmax_scale = 0 (default), backend = AUTO, stream = NULL,
 * deterministic = 0, workspace = NULL, workspace_bytes = 0. */
static inline hopattn_backward_options hopattn_default_backward_options(void) {
  hopattn_backward_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.backend = HOPATTN_BACKEND_AUTO;
  return options;
}

/* As hopattn_init_forward_options, for hopattn_backward_options. */
HOPATTN_API hopattn_status hopattn_init_backward_options(hopattn_backward_options* options,
                                                         size_t struct_size);

/*
 * The gradients of hopattn_forward: given its inputs q, k, v, its output o and LSE, and the
 * gradient d_o of a loss with respect to o, writes dq, dk and dv.
 *   q, o, d_o, dq: (batch, seqlen_q, heads_q,  head_dim)
 *   k, v, dk, dv:  (batch, seqlen_k, heads_kv, head_dim)  GQA: dk and dv summed over the
 *                  heads_q / heads_kv query heads of each kv head
 *   lse: float32 (batch, heads_q, seqlen_q) contiguous, as hopattn_forward wrote it (required)
 * Every tensor shares q's dtype. dq, dk and dv are written whole (no accumulation into them)
 * and may not overlap each other or any input. On the SM90 backend the call is asynchronous on
 * options->cuda_stream.
 */
HOPATTN_API hopattn_status hopattn_backward(const hopattn_tensor* q, const hopattn_tensor* k,
                                            const hopattn_tensor* v, const hopattn_tensor* o,
                                            const hopattn_tensor* d_o, const float* lse,
                                            hopattn_tensor* dq, hopattn_tensor* dk,
                                            hopattn_tensor* dv,
                                            const hopattn_backward_options* options);

/* The variable-length form: tensors packed as hopattn_varlen describes, lse (heads_q, total_q). */
HOPATTN_API hopattn_status hopattn_backward_varlen(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    const hopattn_tensor* o, const hopattn_tensor* d_o, const float* lse, hopattn_tensor* dq,
    hopattn_tensor* dk, hopattn_tensor* dv, const hopattn_varlen* varlen,
    const hopattn_backward_options* options);

/* The workspace hopattn_backward (varlen NULL) or hopattn_backward_varlen needs, in *bytes. */
HOPATTN_API hopattn_status hopattn_backward_workspace_size(const hopattn_tensor* q,
                                                           const hopattn_tensor* k,
                                                           const hopattn_tensor* v,
                                                           const hopattn_varlen* varlen,
                                                           const hopattn_backward_options* options,
                                                           size_t* bytes);

/*
 * FP8: quantisation (hopattn_quantize_fp8) and attention on its output (hopattn_forward_fp8).
 * How many values share one scale, and the layout of the float32 scales array.
 */
typedef enum hopattn_fp8_scaling {
  HOPATTN_FP8_SCALE_TENSOR = 0, /* one scale */
  HOPATTN_FP8_SCALE_HEAD = 1,   /* (batch, heads) scales, contiguous */
  HOPATTN_FP8_SCALE_BLOCK = 2   /* (batch, heads, ceil(seqlen / block_rows)) scales, contiguous:
                                 * block r of a head covers rows [r * block_rows,
                                 * min((r + 1) * block_rows, seqlen)) */
} hopattn_fp8_scaling;

/* Options of hopattn_quantize_fp8; a growable struct like hopattn_forward_options. */
typedef struct hopattn_quantize_options {
  size_t struct_size; /* sizeof(hopattn_quantize_options) */
  hopattn_fp8_scaling scaling;
  /* HOPATTN_FP8_SCALE_BLOCK only: rows per scale, > 0 (the FP8 kernel will want its tile, 128). */
  int64_t block_rows;
  /* Nonzero: rotate every head_dim vector x first, y = H (D x) / sqrt(head_dim), H the
   * Walsh-Hadamard matrix in natural (Sylvester) order, D = diag(s_0, ..., s_{head_dim-1}) with
   * s_i = -1 if the top bit of the (i + 1)-th output of splitmix64 started at state `seed` is
   * set, else +1 (the same signs in every (batch, row, head), so Q and K rotated with one seed
   * keep Q K^T). head_dim must then be a power of two. */
  int hadamard;
  uint64_t seed;
  hopattn_backend backend;
  void* cuda_stream; /* as in hopattn_forward_options */
  /* The layout of out (hopattn_fp8_layout): HOPATTN_FP8_LAYOUT_V_TRANSPOSED for a V that
   * hopattn_forward_fp8 then reads with options->fp8_v_layout the same; hadamard must be 0. */
  hopattn_fp8_layout layout;
} hopattn_quantize_options;

/* struct_size = sizeof, scaling = BLOCK, block_rows = 128, hadamard = 1, seed = 0,
 * backend = AUTO, stream = NULL, layout = HOPATTN_FP8_LAYOUT_ROWS. */
static inline hopattn_quantize_options hopattn_default_quantize_options(void) {
  hopattn_quantize_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.scaling = HOPATTN_FP8_SCALE_BLOCK;
  options.block_rows = 128;
  options.hadamard = 1;
  options.backend = HOPATTN_BACKEND_AUTO;
  return options;
}

/* As hopattn_init_forward_options, for hopattn_quantize_options. */
HOPATTN_API hopattn_status hopattn_init_quantize_options(hopattn_quantize_options* options,
                                                         size_t struct_size);

/*
 * Quantises x to float8 e4m3 with one float32 scale per block of values (options->scaling):
 *   x:      float32, bfloat16 or float16 (batch, seqlen, heads, head_dim), any strides
 *   out:    HOPATTN_DTYPE_FLOAT8_E4M3, x's shape, strides of its own; its elements distinct
 *   scales: float32, contiguous, in options->scaling's layout
 * out and scales share no memory with x or each other. With options->hadamard, x is rotated
 * first (above). Each scale is amax / 448, amax the largest |value| of its block after the
 * rotation, and out = e4m3(value * (1 / scale)) (float32 operations), rounded to nearest even and
 * saturated to +-448; so value ~ e4m3 value of out * scale. A block of zeros gets scale 1 (never 0
 * or NaN), so it dequantises to exact zeros; a block so small that amax / 448 lies below the
 * smallest normal float (amax below 448 * 2^-126) gets that float, 2^-126, so that 1 / scale is
 * finite.
 * Non-finite values: a block holding a NaN or an infinity (after the rotation, which spreads one
 * to its whole head_dim vector) gets scale NaN if it holds a NaN, else +inf, and every element of
 * the block is e4m3 NaN (0x7f): every element dequantises to NaN, none to a wrong finite value.
 * NULL options takes the defaults (block scales of 128 rows, rotation on, seed 0). Both
 * backends write the same codes and scales bit for bit; on the SM90 backend the call is
 * asynchronous on options->cuda_stream. options->layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED writes
 * out in that layout (hopattn_fp8_layout, above; its strides as stated there), the codes the same;
 * on the SM90 backend through a stream-ordered buffer of the codes in rows (batch * seqlen * heads
 * * head_dim bytes, cudaMallocAsync on the stream).
 */
HOPATTN_API hopattn_status hopattn_quantize_fp8(const hopattn_tensor* x, hopattn_tensor* out,
                                                float* scales,
                                                const hopattn_quantize_options* options);

/*
 * The scales of one e4m3 tensor, in the layout hopattn_quantize_fp8 writes for `scaling` (and
 * `block_rows` for HOPATTN_FP8_SCALE_BLOCK): element (b, row, h, i) stands for
 * e4m3(code) * scale(b, h, row). A fixed value type, like hopattn_tensor.
 */
typedef struct hopattn_fp8_scales {
  const float* data;
  hopattn_fp8_scaling scaling;
  int64_t block_rows; /* HOPATTN_FP8_SCALE_BLOCK only: rows per scale, > 0 */
} hopattn_fp8_scales;

/*
 * Attention on FP8 inputs: O = softmax(Q K^T * scale) V with Q, K and V the dequantised
 * e4m3 tensors (code * scale), as hopattn_quantize_fp8 leaves them. Q and K quantised with the
 * Hadamard rotation and one seed keep Q K^T, so `scale` is that of the unrotated inputs;
 * V must not be rotated.
 *   q, k, v: HOPATTN_DTYPE_FLOAT8_E4M3, shapes as in hopattn_forward
 *   q_scales, k_scales, v_scales: each tensor's scales (above), never NULL
 *   o: bfloat16 or float16, q's shape: the output type; lse as in hopattn_forward
 * Scales are used as given: a NaN or infinite scale (hopattn_quantize_fp8 writes them for blocks
 * that hold NaN or inf) makes NaN in the rows that see its block; the CPU backend refuses a zero
 * or negative scale, the SM90 backend (which cannot read the scales without a device sync) turns
 * one into NaN in the same rows. The SM90 kernel takes Q scales of any layout, K scales per
 * tensor, per head or per block of a multiple of 128 rows, and V scales per tensor or per head;
 * P is rounded to e4m3 for the P V product, as in FlashAttention-3 and cuDNN. The CPU backend
 * takes every layout and computes in float32 from the dequantised inputs. options as in
 * hopattn_forward (its workspace sized by hopattn_forward_fp8_workspace_size).
 */
HOPATTN_API hopattn_status hopattn_forward_fp8(const hopattn_tensor* q,
                                               const hopattn_fp8_scales* q_scales,
                                               const hopattn_tensor* k,
                                               const hopattn_fp8_scales* k_scales,
                                               const hopattn_tensor* v,
                                               const hopattn_fp8_scales* v_scales,
                                               hopattn_tensor* o, float* lse,
                                               const hopattn_forward_options* options);

/* The workspace hopattn_forward_fp8(q, ..., k, ..., v, ..., o, lse, options) needs, in *bytes;
 * o_dtype is the dtype its o will have. */
HOPATTN_API hopattn_status hopattn_forward_fp8_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    hopattn_dtype o_dtype, const hopattn_forward_options* options, size_t* bytes);

/*
 * The variable-length form of hopattn_forward_fp8: q, k, v and o packed as hopattn_varlen
 * describes (batch 1, as in hopattn_forward_varlen), lse (heads_q, total_q) or NULL. The scales
 * are those hopattn_quantize_fp8 writes for the packed tensors: a HOPATTN_FP8_SCALE_BLOCK block
 * holds block_rows rows of the packed tensor (it may span the end of one sequence and the start of
 * the next), HOPATTN_FP8_SCALE_HEAD one scale per head over every sequence. Both backends take
 * it, with the same scale rules as hopattn_forward_fp8 (SM90: V per tensor or per head).
 */
HOPATTN_API hopattn_status hopattn_forward_fp8_varlen(
    const hopattn_tensor* q, const hopattn_fp8_scales* q_scales, const hopattn_tensor* k,
    const hopattn_fp8_scales* k_scales, const hopattn_tensor* v, const hopattn_fp8_scales* v_scales,
    hopattn_tensor* o, float* lse, const hopattn_varlen* varlen,
    const hopattn_forward_options* options);

/* The workspace hopattn_forward_fp8_varlen(q, ..., o, lse, varlen, options) needs, in *bytes. */
HOPATTN_API hopattn_status hopattn_forward_fp8_varlen_workspace_size(
    const hopattn_tensor* q, const hopattn_tensor* k, const hopattn_tensor* v,
    hopattn_dtype o_dtype, const hopattn_varlen* varlen, const hopattn_forward_options* options,
    size_t* bytes);

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
