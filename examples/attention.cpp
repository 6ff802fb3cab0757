// Grouped-query attention on the CPU backend through the C++ header, float32, with the
// log-sum-exp. Checks a property that needs no reference: the softmax weights of a row sum
// to one, so when every key's value vector is the same vector c, every output row is c.
#include <cmath>
#include <cstdio>
#include <hopattn/hopattn.hpp>
#include <vector>

int main() {
  constexpr int64_t kBatch = 2, kSeqlenQ = 100, kSeqlenK = 300, kHeadsQ = 8, kHeadsKv = 2;
  constexpr int64_t kHeadDim = 128;
  std::vector<float> q(kBatch * kSeqlenQ * kHeadsQ * kHeadDim);
  std::vector<float> k(kBatch * kSeqlenK * kHeadsKv * kHeadDim);
  std::vector<float> v(k.size());
  std::vector<float> o(q.size());
  std::vector<float> lse(kBatch * kHeadsQ * kSeqlenQ);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11f * static_cast<float>(i));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % kHeadDim) / kHeadDim;

  using hopattn::Tensor;
  const auto f32 = HOPATTN_DTYPE_FLOAT32;
  Tensor tq = Tensor::contiguous(q.data(), f32, kBatch, kSeqlenQ, kHeadsQ, kHeadDim);
  Tensor tk = Tensor::contiguous(k.data(), f32, kBatch, kSeqlenK, kHeadsKv, kHeadDim);
  Tensor tv = Tensor::contiguous(v.data(), f32, kBatch, kSeqlenK, kHeadsKv, kHeadDim);
  Tensor to = Tensor::contiguous(o.data(), f32, kBatch, kSeqlenQ, kHeadsQ, kHeadDim);
  hopattn::ForwardOptions options;
  options.causal = true;  // bottom-right aligned: the last query row sees all 300 keys
  options.backend = HOPATTN_BACKEND_CPU;
  try {
    hopattn::forward(tq, tk, tv, to, lse.data(), options);
  } catch (const hopattn::Error& e) {
    std::fprintf(stderr, "hopattn::forward: %s: %s\n", hopattn_status_name(e.status()), e.what());
    return 1;
  }

  double max_err = 0;
  for (size_t i = 0; i < o.size(); ++i)
    max_err = std::fmax(max_err, std::fabs(o[i] - v[i % kHeadDim]));
  std::printf("hopattn %s: lse[0] = %.4f, max |o - c| = %.2e\n", hopattn::version().c_str(), lse[0],
              max_err);

  // A malformed call throws with a message naming the argument.
  Tensor bad_k = Tensor::contiguous(k.data(), f32, kBatch, kSeqlenK, 3, kHeadDim);
  Tensor bad_v = Tensor::contiguous(v.data(), f32, kBatch, kSeqlenK, 3, kHeadDim);
  try {
    hopattn::forward(tq, bad_k, bad_v, to, nullptr, options);
    return 1;
  } catch (const hopattn::Error& e) {
    std::printf("as expected: %s\n", e.what());
  }
  return max_err <= 1e-5 ? 0 : 1;
}
