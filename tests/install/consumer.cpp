// A C++ program outside the hopattn tree, built against an installed hopattn through
// find_package(hopattn) or add_subdirectory(hopattn), both giving hopattn::hopattn. It uses the
// C++ header as a caller with const inputs would: tensors over const memory, the output
// descriptor passed as a temporary. GQA on the CPU backend: every key's value row is the same
// vector c, so every output row is c.
#include <cmath>
#include <cstdio>
#include <hopattn/hopattn.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Const memory gives a read-only Tensor, which cannot stand for the output.
template <class Pointer>
using ContiguousOf = decltype(hopattn::Tensor::contiguous(std::declval<Pointer>(),
                                                           HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 1));
static_assert(std::is_same<ContiguousOf<const float*>, hopattn::Tensor>::value, "const: Tensor");
static_assert(std::is_same<ContiguousOf<float*>, hopattn::MutableTensor>::value, "MutableTensor");
static_assert(std::is_same<ContiguousOf<std::nullptr_t>, hopattn::MutableTensor>::value, "nullptr");
static_assert(!std::is_convertible<hopattn::Tensor, hopattn::MutableTensor>::value,
              "a read-only Tensor must not bind to forward()'s output");

std::vector<float> filled(size_t n, float (*value)(size_t)) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = value(i);
  return x;
}

}  // namespace

int main() {
  constexpr int64_t kBatch = 2, kSeqlenQ = 5, kSeqlenK = 9, kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 32;
  const std::vector<float> q = filled(kBatch * kSeqlenQ * kHeadsQ * kHeadDim,
                                      [](size_t i) { return std::sin(0.37f * static_cast<float>(i)); });
  const std::vector<float> k = filled(kBatch * kSeqlenK * kHeadsKv * kHeadDim,
                                      [](size_t i) { return std::cos(0.11f * static_cast<float>(i)); });
  const std::vector<float> v = filled(k.size(), [](size_t i) {
    return static_cast<float>(i % kHeadDim) / kHeadDim;
  });
  std::vector<float> o(q.size());
  std::vector<float> lse(kBatch * kHeadsQ * kSeqlenQ);

  using hopattn::Tensor;
  const auto f32 = HOPATTN_DTYPE_FLOAT32;
  hopattn::ForwardOptions options;
  options.causal = true;
  options.backend = HOPATTN_BACKEND_CPU;
  try {
    hopattn::forward(Tensor::contiguous(q.data(), f32, kBatch, kSeqlenQ, kHeadsQ, kHeadDim),
                     Tensor::contiguous(k.data(), f32, kBatch, kSeqlenK, kHeadsKv, kHeadDim),
                     Tensor::contiguous(v.data(), f32, kBatch, kSeqlenK, kHeadsKv, kHeadDim),
                     Tensor::contiguous(o.data(), f32, kBatch, kSeqlenQ, kHeadsQ, kHeadDim),
                     lse.data(), options);
  } catch (const hopattn::Error& e) {
    std::fprintf(stderr, "hopattn::forward: %s\n", e.what());
    return 1;
  }
  double max_error = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    max_error = std::fmax(max_error, std::fabs(o[i] - v[i % kHeadDim]));
  }
  std::printf("hopattn %s from C++: max |o - c| = %.1e\n", hopattn::version().c_str(), max_error);
  return max_error <= 1e-5 ? 0 : 1;
}
