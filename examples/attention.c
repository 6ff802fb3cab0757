/* Causal attention on the CPU backend through the C ABI, float32, packed (b, s, h, d), then the
 * same memory as a variable-length batch. Checks values it can know without a reference: under
 * the bottom-right causal mask a query that sees only key 0 gets exactly v's row 0, and one that
 * sees no key gets 0. The lines between the README markers are the README's C snippets (checked
 * by ctest's readme_snippets). */
#include <hopattn/hopattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const int64_t batch = 2, seqlen = 128, heads = 4, head_dim = 64;
  const size_t n = (size_t)(batch * seqlen * heads * head_dim);
  float* q = malloc(n * sizeof *q);
  float* k = malloc(n * sizeof *k);
  float* v = malloc(n * sizeof *v);
  float* o = malloc(n * sizeof *o);
  float* lse = malloc((size_t)(batch * heads * seqlen) * sizeof *lse);
  if (!q || !k || !v || !o || !lse) return 1;
  for (size_t i = 0; i < n; ++i) {
    q[i] = sinf(0.1f * (float)i);
    k[i] = cosf(0.3f * (float)i);
    v[i] = sinf(0.7f * (float)i + 1.f);
  }

  /* README snippet begin */
  /* q, k, v, o: float32, packed (batch, seqlen, heads, head_dim); strides count elements. */
  hopattn_tensor tq = {q, HOPATTN_DTYPE_FLOAT32, batch, seqlen, heads, head_dim,
                       seqlen * heads * head_dim, heads * head_dim, head_dim};
  hopattn_tensor tk = tq, tv = tq, to = tq; /* k, v, o: the same shape here */
  tk.data = k;
  tv.data = v;
  to.data = o;
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;                       /* softmax_scale 0 = 1/sqrt(head_dim) */
  hopattn_status status = hopattn_forward(&tq, &tk, &tv, &to, lse /* or NULL */, &options);
  if (status != HOPATTN_OK) {
    fprintf(stderr, "%s: %s\n", hopattn_status_name(status), hopattn_last_error());
    return 1;
  }
  /* README snippet end */

  printf("hopattn %s\n%s\n", hopattn_version(), hopattn_build_info());
  printf("o[0, 0, 0, 0:4] = %.5f %.5f %.5f %.5f\n", o[0], o[1], o[2], o[3]);
  int ok = 1;
  for (int d = 0; d < head_dim; ++d) ok &= fabsf(o[d] - v[d]) <= 1e-6f;
  printf("row 0 equals v row 0: %s\n", ok ? "yes" : "NO");

  /* The same memory as one packed variable-length batch: (1, 256, heads, head_dim). */
  tq.batch = tk.batch = tv.batch = to.batch = 1;
  tq.seqlen = tk.seqlen = tv.seqlen = to.seqlen = batch * seqlen;
  /* README snippet begin */
  const int32_t cu_seqlens_q[] = {0, 100, 100, 256};  /* three sequences, one empty */
  const int32_t cu_seqlens_k[] = {0, 100, 140, 256};
  hopattn_varlen varlen = hopattn_default_varlen();
  varlen.batch = 3;
  varlen.cu_seqlens_q = cu_seqlens_q;
  varlen.cu_seqlens_k = cu_seqlens_k;
  varlen.seqused_k = NULL;          /* or per sequence: attend to the first seqused_k[b] keys */
  varlen.max_seqlen_q = 156;
  varlen.max_seqlen_k = 116;
  status = hopattn_forward_varlen(&tq, &tk, &tv, &to, lse /* (heads_q, total_q) */, &varlen,
                                  &options);
  /* README snippet end */
  if (status != HOPATTN_OK) {
    fprintf(stderr, "%s: %s\n", hopattn_status_name(status), hopattn_last_error());
    return 1;
  }
  /* Causal, bottom-right per sequence: query 0 of the first sequence (100 queries, 100 keys) sees
   * key 0 only; query 0 of the third (156 queries, 116 keys; packed row 100) sees none: O = 0. */
  for (int d = 0; d < head_dim; ++d) ok &= o[(size_t)(100 * heads * head_dim) + d] == 0.f;
  for (int d = 0; d < head_dim; ++d) ok &= fabsf(o[d] - v[d]) <= 1e-6f;
  printf("varlen: an empty sequence, rows that see no key: %s\n", ok ? "as expected" : "WRONG");
  free(q), free(k), free(v), free(o), free(lse);
  return ok ? 0 : 1;
}
