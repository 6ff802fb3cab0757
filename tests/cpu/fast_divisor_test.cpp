// core/fast_divisor.hpp on the CPU: the quotient and remainder of a multiply-high and a shift equal
// integer division's, for the divisors a tile order meets and the edges of the dividends' range.
#include "core/fast_divisor.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hopattn {
namespace {

TEST(FastDivisor, MatchesIntegerDivision) {
  std::vector<int> divisors;
  for (int d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int d : {65535, 65536, 65537, 1000003, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, 2147483647}) divisors.push_back(d);
  for (int d : divisors) {
    const FastDivisor divisor(d);
    // The hardest dividends: near 0, around d, and the largest below 2^31 of each remainder's
    // extreme (n = d - 1 mod d), beside a spread of others.
    const int64_t largest = 2147483647;
    std::vector<int64_t> dividends = {0, 1, d - 1, d, int64_t(d) + 1, largest, largest - 1, largest - d,
                                      largest - (largest + 1) % d};
    for (int k = 0; k < 64; ++k) dividends.push_back(int64_t((uint64_t(k) * 2654435761u) % 2147483648u));
    for (int64_t wide : dividends) {
      if (wide < 0 || wide > largest) continue;
      const int n = int(wide);
      int q = -1, r = -1;
      divisor.divmod(n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
}

TEST(FastDivisor, BelowOneActsAsOne) {
  const FastDivisor divisor(0);
  EXPECT_EQ(divisor.divisor(), 1);
  EXPECT_EQ(divisor.div(12345), 12345);
}

}  // namespace
}  // namespace hopattn
