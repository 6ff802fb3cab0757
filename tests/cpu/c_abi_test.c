/* The C ABI used from C (compiled as C11 with -Wpedantic -Werror): the growable structs and
 * their defaults, the workspace queries and a variable-length forward and backward call on the
 * CPU backend. Checks what it can know without a reference: under the causal mask, with as many
 * queries as keys in a sequence, the sequence's first query sees only its first key, so its
 * output is that key's v row; a sequence with queries and no keys gets O = 0 and LSE = -inf, and
 * dq = 0; keys that no query sees get dk = dv = 0. */
#include <hopattn/hopattn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { kHeads = 2, kHeadDim = 8, kTotalQ = 7, kTotalK = 5 };

static int failures = 0;

static void expect(int condition, const char* what) {
  if (!condition) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, hopattn_last_error());
    ++failures;
  }
}

static hopattn_tensor packed(float* data, int64_t rows) {
  hopattn_tensor t;
  t.data = data;
  t.dtype = HOPATTN_DTYPE_FLOAT32;
  t.batch = 1;
  t.seqlen = rows;
  t.heads = kHeads;
  t.head_dim = kHeadDim;
  t.batch_stride = rows * kHeads * kHeadDim;
  t.seq_stride = kHeads * kHeadDim;
  t.head_stride = kHeadDim;
  return t;
}

int main(void) {
  /* Sequences: 3 queries over 3 keys, 0 over 2, 4 queries over 0 keys. */
  static const int32_t cu_seqlens_q[] = {0, 3, 3, 7};
  static const int32_t cu_seqlens_k[] = {0, 3, 5, 5};
  float q[kTotalQ * kHeads * kHeadDim], o[kTotalQ * kHeads * kHeadDim];
  float k[kTotalK * kHeads * kHeadDim], v[kTotalK * kHeads * kHeadDim];
  float lse[kHeads * kTotalQ];
  size_t i;
  for (i = 0; i < sizeof q / sizeof q[0]; ++i) q[i] = sinf(0.3f * (float)i), o[i] = NAN;
  for (i = 0; i < sizeof k / sizeof k[0]; ++i) k[i] = cosf(0.7f * (float)i), v[i] = (float)i;
  for (i = 0; i < sizeof lse / sizeof lse[0]; ++i) lse[i] = NAN;

  hopattn_tensor tq = packed(q, kTotalQ), tk = packed(k, kTotalK), tv = packed(v, kTotalK),
                 to = packed(o, kTotalQ);
  hopattn_forward_options options = hopattn_default_forward_options();
  hopattn_varlen varlen = hopattn_default_varlen();
  expect(options.struct_size == sizeof(hopattn_forward_options), "options.struct_size");
  expect(options.workspace == NULL && options.workspace_bytes == 0, "no default workspace");
  expect(varlen.struct_size == sizeof(hopattn_varlen), "varlen.struct_size");
  options.causal = 1;
  options.backend = HOPATTN_BACKEND_CPU;
  varlen.batch = 3;
  varlen.cu_seqlens_q = cu_seqlens_q;
  varlen.cu_seqlens_k = cu_seqlens_k;
  varlen.max_seqlen_q = 4;
  varlen.max_seqlen_k = 3;

  size_t bytes = 1;
  expect(hopattn_forward_workspace_size(&tq, &tk, &tv, &varlen, &options, &bytes) == HOPATTN_OK,
         "hopattn_forward_workspace_size");
  expect(bytes == 0, "the CPU backend needs no workspace");

  expect(hopattn_forward_varlen(&tq, &tk, &tv, &to, lse, &varlen, &options) == HOPATTN_OK,
         "hopattn_forward_varlen");
  int h, d, row;
  for (h = 0; h < kHeads; ++h) {
    for (d = 0; d < kHeadDim; ++d) {
      /* Sequence 0, query 0 sees key 0 only. */
      expect(o[h * kHeadDim + d] == v[h * kHeadDim + d], "first query's output is v's first row");
    }
    for (row = 3; row < 7; ++row) {
      for (d = 0; d < kHeadDim; ++d) expect(o[(row * kHeads + h) * kHeadDim + d] == 0.f, "O = 0");
      expect(isinf(lse[h * kTotalQ + row]) && lse[h * kTotalQ + row] < 0, "LSE = -inf");
    }
  }

  /* The backward of the same call: every gradient written and finite, zeros where nothing
   * reaches. */
  {
    float d_o[kTotalQ * kHeads * kHeadDim], dq[kTotalQ * kHeads * kHeadDim];
    float dk[kTotalK * kHeads * kHeadDim], dv[kTotalK * kHeads * kHeadDim];
    hopattn_tensor td_o = packed(d_o, kTotalQ), tdq = packed(dq, kTotalQ),
                   tdk = packed(dk, kTotalK), tdv = packed(dv, kTotalK);
    hopattn_backward_options backward = hopattn_default_backward_options();
    hopattn_backward_options initialised;
    int finite = 1;
    for (i = 0; i < sizeof d_o / sizeof d_o[0]; ++i) d_o[i] = cosf(0.1f * (float)i), dq[i] = NAN;
    for (i = 0; i < sizeof dk / sizeof dk[0]; ++i) dk[i] = dv[i] = NAN;
    expect(backward.struct_size == sizeof(hopattn_backward_options), "backward.struct_size");
    backward.causal = 1;
    backward.backend = HOPATTN_BACKEND_CPU;
    bytes = 1;
    expect(hopattn_backward_workspace_size(&tq, &tk, &tv, &varlen, &backward, &bytes) ==
               HOPATTN_OK && bytes == 0,
           "hopattn_backward_workspace_size: none on the CPU");
    expect(hopattn_backward_varlen(&tq, &tk, &tv, &to, &td_o, lse, &tdq, &tdk, &tdv, &varlen,
                                   &backward) == HOPATTN_OK,
           "hopattn_backward_varlen");
    for (i = 0; i < sizeof dq / sizeof dq[0]; ++i) finite &= isfinite(dq[i]) != 0;
    for (i = 0; i < sizeof dk / sizeof dk[0]; ++i) finite &= isfinite(dk[i]) && isfinite(dv[i]);
    expect(finite, "every gradient written and finite");
    for (row = 3; row < 7; ++row) {
      for (i = 0; i < kHeads * kHeadDim; ++i) {
        expect(dq[row * kHeads * kHeadDim + i] == 0.f, "dq = 0 for queries that see no key");
      }
    }
    for (row = 3; row < 5; ++row) {
      for (i = 0; i < kHeads * kHeadDim; ++i) {
        expect(dk[row * kHeads * kHeadDim + i] == 0.f && dv[row * kHeads * kHeadDim + i] == 0.f,
               "dk = dv = 0 for keys no query sees");
      }
    }
    expect(hopattn_backward_varlen(&tq, &tk, &tv, &to, &td_o, NULL, &tdq, &tdk, &tdv, &varlen,
                                   &backward) == HOPATTN_ERROR_INVALID_ARGUMENT &&
               strstr(hopattn_last_error(), "lse is NULL") != NULL,
           "the backward needs the LSE");
    memset(&initialised, 0xff, sizeof initialised);
    expect(hopattn_init_backward_options(&initialised, sizeof initialised) == HOPATTN_OK &&
               initialised.struct_size == sizeof initialised && initialised.deterministic == 0 &&
               initialised.backend == HOPATTN_BACKEND_AUTO && initialised.workspace == NULL,
           "hopattn_init_backward_options gives the inline defaults");
  }

  /* FP8 quantisation: q to e4m3 with one scale per (batch, head), and the options' init. */
  {
    uint8_t codes[kTotalQ * kHeads * kHeadDim];
    float scales[kHeads];
    hopattn_tensor tcodes = tq; /* q's shape and strides, in elements */
    hopattn_quantize_options quantize = hopattn_default_quantize_options();
    hopattn_quantize_options initialised;
    tcodes.data = codes;
    tcodes.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
    quantize.scaling = HOPATTN_FP8_SCALE_HEAD;
    quantize.backend = HOPATTN_BACKEND_CPU;
    expect(hopattn_quantize_fp8(&tq, &tcodes, scales, &quantize) == HOPATTN_OK,
           "hopattn_quantize_fp8");
    expect(scales[0] > 0.f && isfinite(scales[0]) && scales[kHeads - 1] > 0.f,
           "one positive scale per head");
    memset(&initialised, 0xff, sizeof initialised);
    expect(hopattn_init_quantize_options(&initialised, sizeof initialised) == HOPATTN_OK &&
               initialised.struct_size == sizeof initialised &&
               initialised.scaling == HOPATTN_FP8_SCALE_BLOCK && initialised.block_rows == 128 &&
               initialised.hadamard == 1 && initialised.seed == 0 &&
               initialised.backend == HOPATTN_BACKEND_AUTO && initialised.cuda_stream == NULL &&
               initialised.layout == HOPATTN_FP8_LAYOUT_ROWS,
           "hopattn_init_quantize_options gives the inline defaults");
    expect(hopattn_forward_varlen(&tcodes, &tk, &tv, &to, lse, &varlen, &options) ==
                   HOPATTN_ERROR_INVALID_ARGUMENT &&
               strstr(hopattn_last_error(), "q.dtype is float8_e4m3") != NULL,
           "attention refuses e4m3");
  }

  options.struct_size = 0;
  expect(hopattn_forward_varlen(&tq, &tk, &tv, &to, lse, &varlen, &options) ==
             HOPATTN_ERROR_INVALID_ARGUMENT,
         "struct_size 0 is refused");
  expect(strstr(hopattn_last_error(), "options->struct_size") != NULL, "the message names it");

  /* The exported form of the inline defaults, for callers that cannot inline. */
  {
    hopattn_forward_options initialised;
    hopattn_varlen initialised_varlen;
    memset(&initialised, 0xff, sizeof initialised);
    expect(hopattn_init_forward_options(&initialised, sizeof initialised) == HOPATTN_OK,
           "hopattn_init_forward_options");
    options = hopattn_default_forward_options();
    expect(initialised.struct_size == options.struct_size &&
               initialised.backend == options.backend && initialised.workspace == NULL &&
               initialised.workspace_bytes == 0 &&
               initialised.fp8_v_layout == HOPATTN_FP8_LAYOUT_ROWS,
           "hopattn_init_forward_options gives the inline defaults");
    expect(hopattn_init_varlen(&initialised_varlen, 0) == HOPATTN_ERROR_INVALID_ARGUMENT,
           "hopattn_init_varlen refuses struct_size 0");
  }

  if (failures == 0) printf("C ABI test passed\n");
  return failures == 0 ? 0 : 1;
}
