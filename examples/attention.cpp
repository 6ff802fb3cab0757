// Grouped-query attention on the CPU backend through the C++ header, float32, with the
// log-sum-exp. Checks a property that needs no reference: the softmax weights of a row sum
// to one, so when every key's value vector is the same vector c, every output row is c.
// The lines between the README markers are the README's C++ snippet (checked by ctest).
#include <cmath>
#include <cstdio>
#include <hopattn/hopattn.hpp>
#include <vector>

namespace {

template <class Value>
std::vector<float> filled(size_t n, Value value) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = value(i);
  return x;
}

}  // namespace

int main() {
  constexpr int64_t batch = 2, seqlen_q = 100, seqlen_k = 300, heads = 8, heads_kv = 2;
  constexpr int64_t head_dim = 128;
  // The inputs are const: a const pointer makes a read-only hopattn::Tensor.
  const std::vector<float> q_data = filled(batch * seqlen_q * heads * head_dim,
                                           [](size_t i) { return std::sin(0.37f * static_cast<float>(i)); });
  const std::vector<float> k_data = filled(batch * seqlen_k * heads_kv * head_dim,
                                           [](size_t i) { return std::cos(0.11f * static_cast<float>(i)); });
  const std::vector<float> v_data = filled(k_data.size(), [](size_t i) {
    return static_cast<float>(i % head_dim) / head_dim;
  });
  std::vector<float> o_data(q_data.size());
  std::vector<float> lse(batch * heads * seqlen_q);

  // README snippet begin
  const auto f32 = HOPATTN_DTYPE_FLOAT32;
  auto q = hopattn::Tensor::contiguous(q_data.data(), f32, batch, seqlen_q, heads, head_dim);
  auto k = hopattn::Tensor::contiguous(k_data.data(), f32, batch, seqlen_k, heads_kv, head_dim);
  auto v = hopattn::Tensor::contiguous(v_data.data(), f32, batch, seqlen_k, heads_kv, head_dim);
  hopattn::ForwardOptions options;
  options.causal = true;  // bottom-right aligned: the last query row sees all 300 keys
  try {
    hopattn::forward(q, k, v,  // o: a MutableTensor (non-const memory), a temporary is fine
                     hopattn::Tensor::contiguous(o_data.data(), f32, batch, seqlen_q, heads, head_dim),
                     lse.data(), options);
  } catch (const hopattn::Error& e) {  // e.what(): the message naming the argument; e.status()
    std::fprintf(stderr, "hopattn::forward: %s: %s\n", hopattn_status_name(e.status()), e.what());
    return 1;
  }
  // README snippet end

  double max_err = 0;
  for (size_t i = 0; i < o_data.size(); ++i)
    max_err = std::fmax(max_err, std::fabs(o_data[i] - v_data[i % head_dim]));
  std::printf("hopattn %s: lse[0] = %.4f, max |o - c| = %.2e\n", hopattn::version().c_str(), lse[0],
              max_err);

  // A malformed call throws with a message naming the argument.
  auto bad_k = hopattn::Tensor::contiguous(k_data.data(), f32, batch, seqlen_k, 3, head_dim);
  auto bad_v = hopattn::Tensor::contiguous(v_data.data(), f32, batch, seqlen_k, 3, head_dim);
  auto o = hopattn::Tensor::contiguous(o_data.data(), f32, batch, seqlen_q, heads, head_dim);
  try {
    hopattn::forward(q, bad_k, bad_v, o, nullptr, options);
    return 1;
  } catch (const hopattn::Error& e) {
    std::printf("as expected: %s\n", e.what());
  }
  return max_err <= 1e-5 ? 0 : 1;
}
