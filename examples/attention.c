/* Causal attention on the CPU backend through the C ABI, float32, packed (b, s, h, d), then the
 * same memory as a variable-length batch, then the fixed-length call through FP8 (quantised q, k
 * and v). Checks values it can know without a reference: under the bottom-right causal mask a
 * query that sees only key 0 gets exactly v's row 0, and one that sees no key gets 0; the FP8
 * output is within a few percent of the float32 one. The lines between the README markers are
 * the README's C snippets (checked by ctest's readme_snippets). */
#include <hopattn/hopattn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

  /* FP8: the fixed-length call again, then on q, k and v quantised to e4m3, bfloat16 out. */
  tq.batch = tk.batch = tv.batch = to.batch = batch;
  tq.seqlen = tk.seqlen = tv.seqlen = to.seqlen = seqlen;
  status = hopattn_forward(&tq, &tk, &tv, &to, NULL, &options);
  const size_t blocks = (size_t)(batch * heads * ((seqlen + 127) / 128));
  uint8_t *q8 = malloc(n), *k8 = malloc(n), *v8 = malloc(n);
  uint16_t* o16 = malloc(n * sizeof *o16);
  float *q_scales = malloc(blocks * sizeof(float)), *k_scales = malloc(blocks * sizeof(float));
  float* v_scales = malloc((size_t)(batch * heads) * sizeof(float));
  if (status != HOPATTN_OK || !q8 || !k8 || !v8 || !o16 || !q_scales || !k_scales || !v_scales)
    return 1;
  /* README snippet begin */
  /* q8, k8, v8: e4m3 codes (1 byte each) of q's shape; o16: bfloat16; the scales: float32. */
  hopattn_tensor tq8 = tq, tk8 = tk, tv8 = tv, to16 = to;
  tq8.dtype = tk8.dtype = tv8.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
  tq8.data = q8;
  tk8.data = k8;
  tv8.data = v8;
  to16.dtype = HOPATTN_DTYPE_BFLOAT16;
  to16.data = o16;
  /* Q and K: a scale per 128 rows of each (batch, head), rotated with one seed (the defaults);
   * V: a scale per (batch, head), not rotated. */
  hopattn_quantize_options qk = hopattn_default_quantize_options();
  hopattn_quantize_options vh = qk;
  vh.scaling = HOPATTN_FP8_SCALE_HEAD;
  vh.hadamard = 0;
  status = hopattn_quantize_fp8(&tq, &tq8, q_scales, &qk);  /* (batch, heads, ceil(seqlen / 128)) */
  if (status == HOPATTN_OK) status = hopattn_quantize_fp8(&tk, &tk8, k_scales, &qk);
  if (status == HOPATTN_OK) status = hopattn_quantize_fp8(&tv, &tv8, v_scales, &vh); /* (batch, heads) */
  const hopattn_fp8_scales sq = {q_scales, HOPATTN_FP8_SCALE_BLOCK, 128};
  const hopattn_fp8_scales sk = {k_scales, HOPATTN_FP8_SCALE_BLOCK, 128};
  const hopattn_fp8_scales sv = {v_scales, HOPATTN_FP8_SCALE_HEAD, 0};
  if (status == HOPATTN_OK)
    status = hopattn_forward_fp8(&tq8, &sq, &tk8, &sk, &tv8, &sv, &to16, lse, &options);
  /* README snippet end */
  if (status != HOPATTN_OK) {
    fprintf(stderr, "%s: %s\n", hopattn_status_name(status), hopattn_last_error());
    return 1;
  }
  /* FP8 costs accuracy: a few percent of the float32 output's norm. */
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = (uint32_t)o16[i] << 16;
    float got;
    memcpy(&got, &bits, sizeof got);
    err2 += (double)(got - o[i]) * (got - o[i]);
    ref2 += (double)o[i] * o[i];
  }
  const double relative = sqrt(err2 / ref2);
  printf("fp8: relative error %.4f against the float32 forward\n", relative);
  ok &= relative < 0.1;
  free(q8), free(k8), free(v8), free(o16), free(q_scales), free(k_scales), free(v_scales);
  free(q), free(k), free(v), free(o), free(lse);
  return ok ? 0 : 1;
}
