/* The C ABI used from C (compiled as C11 with -Wpedantic -Werror): the growable structs and
 * their defaults, the workspace query and a variable-length call on the CPU backend. Checks what
 * it can know without a reference: under the causal mask, with as many queries as keys in a
 * sequence, the sequence's first query sees only its first key, so its output is that key's v
 * row; a sequence with queries and no keys gets O = 0 and LSE = -inf. */
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
               initialised.workspace_bytes == 0,
           "hopattn_init_forward_options gives the inline defaults");
    expect(hopattn_init_varlen(&initialised_varlen, 0) == HOPATTN_ERROR_INVALID_ARGUMENT,
           "hopattn_init_varlen refuses struct_size 0");
  }

  if (failures == 0) printf("C ABI test passed\n");
  return failures == 0 ? 0 : 1;
}
