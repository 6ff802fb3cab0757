/* Causal attention on the CPU backend through the C ABI, float32, packed (b, s, h, d).
 * Checks one value it can know without a reference: under the bottom-right causal mask with
 * seqlen_q == seqlen_k, query row 0 sees only key 0, so its output is exactly v's row 0. */
#include <hopattn/hopattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { kBatch = 2, kSeqlen = 128, kHeads = 4, kHeadDim = 64 };

static hopattn_tensor packed(float* data) {
  hopattn_tensor t = {data,
                      HOPATTN_DTYPE_FLOAT32,
                      kBatch,
                      kSeqlen,
                      kHeads,
                      kHeadDim,
                      /* batch_stride */ kSeqlen * kHeads * kHeadDim,
                      /* seq_stride */ kHeads * kHeadDim,
                      /* head_stride */ kHeadDim};
  return t;
}

int main(void) {
  const size_t n = (size_t)kBatch * kSeqlen * kHeads * kHeadDim;
  float* q = malloc(n * sizeof *q);
  float* k = malloc(n * sizeof *k);
  float* v = malloc(n * sizeof *v);
  float* o = malloc(n * sizeof *o);
  float* lse = malloc((size_t)kBatch * kHeads * kSeqlen * sizeof *lse);
  if (!q || !k || !v || !o || !lse) return 1;
  for (size_t i = 0; i < n; ++i) {
    q[i] = sinf(0.1f * (float)i);
    k[i] = cosf(0.3f * (float)i);
    v[i] = sinf(0.7f * (float)i + 1.f);
  }

  hopattn_tensor tq = packed(q), tk = packed(k), tv = packed(v), to = packed(o);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;
  options.backend = HOPATTN_BACKEND_CPU;
  hopattn_status status = hopattn_forward(&tq, &tk, &tv, &to, lse, &options);
  if (status != HOPATTN_OK) {
    fprintf(stderr, "hopattn_forward: %s: %s\n", hopattn_status_name(status), hopattn_last_error());
    return 1;
  }

  printf("hopattn %s\n%s\n", hopattn_version(), hopattn_build_info());
  printf("o[0, 0, 0, 0:4] = %.5f %.5f %.5f %.5f\n", o[0], o[1], o[2], o[3]);
  int ok = 1;
  for (int d = 0; d < kHeadDim; ++d) ok &= fabsf(o[d] - v[d]) <= 1e-6f;
  printf("row 0 equals v row 0: %s\n", ok ? "yes" : "NO");
  free(q), free(k), free(v), free(o), free(lse);
  return ok ? 0 : 1;
}
