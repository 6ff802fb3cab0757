/* A program outside the hopattn tree, built against an installed hopattn: with pkg-config and with a
 * plain compiler line (install_test.cmake). Causal attention on the CPU backend, float32: query row 0
 * sees only key 0, so its output is v's row 0 exactly. */
#include <hopattn/hopattn.h>
#include <stdio.h>

enum { kBatch = 1, kSeqlen = 8, kHeads = 2, kHeadDim = 16, kElements = kBatch * kSeqlen * kHeads * kHeadDim };

static hopattn_tensor packed(float* data) {
  hopattn_tensor t = {data, HOPATTN_DTYPE_FLOAT32, kBatch, kSeqlen, kHeads, kHeadDim,
                      kSeqlen * kHeads * kHeadDim, kHeads * kHeadDim, kHeadDim};
  return t;
}

int main(void) {
  static float q[kElements], k[kElements], v[kElements], o[kElements];
  for (int i = 0; i < kElements; ++i) {
    q[i] = (float)(i % 7) / 7.f;
    k[i] = (float)(i % 5) / 5.f;
    v[i] = (float)(i % 11);
  }
  hopattn_tensor tq = packed(q), tk = packed(k), tv = packed(v), to = packed(o);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;
  options.backend = HOPATTN_BACKEND_CPU;
  hopattn_status status = hopattn_forward(&tq, &tk, &tv, &to, NULL, &options);
  if (status != HOPATTN_OK) {
    fprintf(stderr, "%s: %s\n", hopattn_status_name(status), hopattn_last_error());
    return 1;
  }
  for (int d = 0; d < kHeadDim; ++d) {
    if (o[d] != v[d]) {
      fprintf(stderr, "o[0, 0, 0, %d] = %g, expected %g\n", d, o[d], v[d]);
      return 1;
    }
  }
  printf("hopattn %s from C: ok\n", hopattn_version());
  return 0;
}
