// The shared scalar rules at their edges (issue 10): the causal geometry without overflow, the
// softmax exponent that never exceeds 0, the CPU exp2 clamped at both ends, NaN sums kept NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/causal_mask.hpp"
#include "core/softmax_math.hpp"
#include "cpu/tiles.hpp"

namespace hopattn {
namespace {

// The formula the geometry is defined by, in 128 bits.
int64_t causal_key_end_wide(int64_t row, int64_t seqlen_q, int64_t seqlen_k) {
  const __int128 end = static_cast<__int128>(row) + 1 + seqlen_k - seqlen_q;
  return static_cast<int64_t>(end < 0 ? 0 : (end > seqlen_k ? seqlen_k : end));
}

TEST(CausalMask, EqualsTheFormulaWhereItFits) {
  for (int64_t seqlen_q = 0; seqlen_q < 40; ++seqlen_q) {
    for (int64_t seqlen_k = 0; seqlen_k < 40; ++seqlen_k) {
      for (int64_t row = 0; row < seqlen_q + 300; ++row) {  // padded rows past seqlen_q too
        ASSERT_EQ(causal_key_end(row, seqlen_q, seqlen_k),
                  causal_key_end_wide(row, seqlen_q, seqlen_k))
            << row << " " << seqlen_q << " " << seqlen_k;
      }
    }
  }
}

// seqlen_k near INT64_MAX (a zero-stride broadcast k), where row + 1 + seqlen_k - seqlen_q
// overflowed (UBSan: signed overflow in causal_mask.hpp).
TEST(CausalMask, NoOverflowAtTheEndsOfInt64) {
  const int64_t big[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2, int64_t{1} << 62};
  for (int64_t seqlen_k : big) {
    for (int64_t seqlen_q : {int64_t{1}, int64_t{2}, int64_t{192}, int64_t{1} << 40}) {
      for (int64_t row : {int64_t{0}, seqlen_q - 1, seqlen_q + 191}) {
        EXPECT_EQ(causal_key_end(row, seqlen_q, seqlen_k),
                  causal_key_end_wide(row, seqlen_q, seqlen_k));
        EXPECT_EQ(causal_key_end(row, seqlen_k, seqlen_q),
                  causal_key_end_wide(row, seqlen_k, seqlen_q));
      }
    }
    EXPECT_EQ(causal_key_end(seqlen_k - 1, seqlen_k, seqlen_k), seqlen_k);
    EXPECT_EQ(causal_key_end(seqlen_k, seqlen_k, seqlen_k), seqlen_k);
    EXPECT_EQ(causal_key_end(0, seqlen_k, 1), 0);
  }
}

// The rule inside a tile, score by score, against the row's key end: every tile (with padded rows
// past seqlen_q and key blocks past seqlen_k) of small blocks over every length below 24, and of
// the backward's blocks over lengths around their multiples; both masks.
TEST(CausalMask, TileVisibilityEqualsTheRowRule) {
  std::vector<int64_t> every_length(24), block_edges;
  for (int64_t l = 0; l < 24; ++l) every_length[l] = l;
  for (int64_t l : {0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 300}) block_edges.push_back(l);
  struct Shape {
    int block_rows, block_keys;
    std::vector<int64_t> const& lengths;
  };
  for (const Shape& shape : {Shape{4, 8, every_length}, Shape{8, 4, every_length}, Shape{64, 128, block_edges},
                             Shape{128, 128, block_edges}, Shape{64, 64, block_edges}}) {
    const int block_rows = shape.block_rows, block_keys = shape.block_keys;
    for (bool causal : {false, true}) {
      for (int64_t seqlen_q : shape.lengths) {
        for (int64_t seqlen_k : shape.lengths) {
          for (int64_t first_row = 0; first_row < seqlen_q + 2 * block_rows; first_row += block_rows) {
            for (int64_t first_key = 0; first_key < seqlen_k + 2 * block_keys; first_key += block_keys) {
              const TileVisibility tile =
                  tile_visibility(causal, first_row, first_key, block_rows, block_keys, seqlen_q, seqlen_k);
              bool all = true;
              for (int d = 0; d < block_rows; ++d) {
                const int64_t key_end = visible_key_end(causal, first_row + d, seqlen_q, seqlen_k);
                for (int r = 0; r < block_keys; ++r) {
                  ASSERT_EQ(tile.visible(r, d), first_key + r < key_end)
                      << causal << " " << seqlen_q << " " << seqlen_k << " " << first_row << " " << first_key << " "
                      << d << " " << r;
                  all = all && first_key + r < key_end;
                }
              }
              ASSERT_EQ(tile.all_visible(), all) << causal << " " << seqlen_q << " " << seqlen_k;
            }
          }
        }
      }
    }
  }
}

// The first unmasked query block against each tile's all_visible(), which the test above holds to
// the row rule: all the tiles from it on are all visible, none before it.
TEST(CausalMask, FirstUnmaskedRowBlockSplitsTheTiles) {
  const int64_t lengths[] = {0, 1, 2, 5, 63, 64, 65, 127, 128, 129, 191, 192, 193, 300};
  for (const auto& [block_rows, block_keys] : {std::pair{4, 8}, std::pair{8, 4}, std::pair{64, 128}, std::pair{64, 64},
                                               std::pair{128, 128}}) {
    for (bool causal : {false, true}) {
      for (int64_t seqlen_q : lengths) {
        for (int64_t seqlen_k : lengths) {
          for (int64_t first_key = 0; first_key < seqlen_k + 2 * block_keys; first_key += block_keys) {
            const int64_t first =
                first_unmasked_row_block(causal, first_key, block_rows, block_keys, seqlen_q, seqlen_k);
            for (int64_t m = 0; m * block_rows < seqlen_q + 2 * block_rows; ++m) {
              const TileVisibility tile =
                  tile_visibility(causal, m * block_rows, first_key, block_rows, block_keys, seqlen_q, seqlen_k);
              ASSERT_EQ(tile.all_visible(), m >= first) << causal << " " << seqlen_q << " " << seqlen_k << " "
                                                        << first_key << " " << m << " " << block_rows;
            }
          }
        }
      }
    }
  }
  // At the ends of int64 (a broadcast k), still exact, and no overflow.
  for (int64_t seqlen : {INT64_MAX, INT64_MAX - 1}) {
    EXPECT_EQ(first_unmasked_row_block(true, 0, 64, 128, seqlen, seqlen), 2);  // rows 127 on see 128 keys
    EXPECT_EQ(first_unmasked_row_block(true, seqlen - 128, 64, 128, seqlen, seqlen), (seqlen - 1) / 64 + 1);
    EXPECT_EQ(first_unmasked_row_block(true, seqlen - 127, 64, 128, seqlen, seqlen), INT64_MAX);
    EXPECT_EQ(first_unmasked_row_block(true, 0, 64, 128, 1, seqlen), 0);
  }
}

// A forward's computed cells (a tile shape's waste) against counting, tile by tile, those with
// some visible score within the sequence.
TEST(CausalMask, ComputedScoreCellsCountTheTilesWithAVisibleScore) {
  const int64_t lengths[] = {1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 300};
  for (const auto& [block_rows, block_keys] : {std::pair{64, 128}, std::pair{128, 128}, std::pair{192, 128}}) {
    for (bool causal : {false, true}) {
      for (int64_t seqlen_q : lengths) {
        for (int64_t seqlen_k : lengths) {
          int64_t tiles = 0;
          for (int64_t first_row = 0; first_row < seqlen_q; first_row += block_rows) {
            for (int64_t first_key = 0; first_key < seqlen_k; first_key += block_keys) {
              bool any = false;
              for (int64_t row = first_row; row < std::min(seqlen_q, first_row + block_rows) && !any; ++row) {
                any = first_key < visible_key_end(causal, row, seqlen_q, seqlen_k);
              }
              tiles += any;
            }
          }
          ASSERT_EQ(computed_score_cells(causal, seqlen_q, seqlen_k, block_rows, block_keys),
                    tiles * block_rows * block_keys)
              << causal << " " << seqlen_q << " " << seqlen_k << " " << block_rows;
        }
      }
    }
  }
}

// Lengths and positions at the ends of int64 (a broadcast k), where a tile's limits are still exact.
TEST(CausalMask, TileVisibilityNoOverflowAtTheEndsOfInt64) {
  const int64_t big[] = {INT64_MAX, INT64_MAX - 1, int64_t{1} << 62};
  for (int64_t seqlen_k : big) {
    for (int64_t seqlen_q : {int64_t{1}, int64_t{192}, int64_t{1} << 40, INT64_MAX}) {
      // first_row + 63 stays inside int64 for the reference.
      for (int64_t first_row : {int64_t{0}, seqlen_q > 64 ? seqlen_q - 64 : 0, seqlen_q / 2, int64_t{1} << 61}) {
        for (int64_t first_key : {int64_t{0}, seqlen_k - 64, seqlen_k / 2, seqlen_k - 1}) {
          const TileVisibility tile = tile_visibility(true, first_row, first_key, 64, 128, seqlen_q, seqlen_k);
          for (int d : {0, 1, 63}) {
            const int64_t key_end = causal_key_end_wide(first_row + d, seqlen_q, seqlen_k);
            for (int r : {0, 1, 63, 127}) {
              EXPECT_EQ(tile.visible(r, d), static_cast<__int128>(first_key) + r < key_end)
                  << seqlen_q << " " << seqlen_k << " " << first_row << " " << first_key << " " << d << " " << r;
            }
          }
        }
      }
    }
  }
}

TEST(SoftmaxRules, ExponentNeverExceedsZero) {
  // The largest score of a row against the max: with the old contracted form
  // score * scale_log2 - max * scale_log2 this gave exponents up to half an ulp of the scaled max.
  for (float score : {5e9f, 1e12f, -1e12f, 3e38f, -3e38f, 1.f, 1e-30f}) {
    for (float scale : {1.f, 0.125f, 1e30f, FLT_MAX}) {
      const float scale_log2 = finite_scale_log2(scale);
      ASSERT_TRUE(std::isfinite(scale_log2));
      EXPECT_EQ(softmax_exponent(score, score, scale_log2), 0.f) << score << " " << scale;
      EXPECT_LE(softmax_exponent(std::nextafter(score, -INFINITY), score, scale_log2), 0.f);
      EXPECT_EQ(bounded_rescale_factor(score, score, scale_log2), 1.f);
    }
  }
  EXPECT_EQ(softmax_exponent(-INFINITY, 0.f, 1.f), -INFINITY);  // masked, in an all-masked row
  EXPECT_EQ(softmax_exponent(-INFINITY, 1e30f, 1.f), -INFINITY);
  EXPECT_TRUE(std::isnan(softmax_exponent(NAN, 1.f, 1.f)));
  EXPECT_TRUE(std::isnan(softmax_exponent(1.f, NAN, 1.f)));
  EXPECT_TRUE(std::isnan(bounded_rescale_factor(NAN, NAN, 1.f)));
  EXPECT_EQ(bounded_rescale_factor(-INFINITY, 3.f, 1.f), 0.f);
}

// The FMA form the SM90 kernel takes for small maxima: within 2^-14 of the exact exponent for every
// row max below the limit (the rounding of the scaled max, the same shift for a whole row), and
// never taken for a max beyond it, inf or NaN.
TEST(SoftmaxRules, FusedExponentStaysNearTheExactOneWhereItApplies) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> log_magnitude(-10.f, 10.f);
  std::uniform_real_distribution<float> below(0.f, 40.f);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float scale_log2 = finite_scale_log2(std::exp2(log_magnitude(rng)));
    const float row_max = (i % 2 ? -1.f : 1.f) * std::exp2(log_magnitude(rng)) * 8.f;
    const float scaled_max = row_max * scale_log2;
    if (!fused_exponent_applies(scaled_max)) continue;
    const float score = row_max - below(rng) / scale_log2;
    const double exact = (double(score) - double(row_max)) * double(scale_log2);
    EXPECT_NEAR(fused_softmax_exponent(score, scale_log2, scaled_max), exact,
                std::ldexp(1.0, -14) + std::abs(exact) * 1e-6)
        << score << " " << row_max << " " << scale_log2;
    ++checked;
  }
  EXPECT_GT(checked, 50000);
  for (float scaled_max : {kFusedExponentLimit, -kFusedExponentLimit, 1e10f, INFINITY, -INFINITY, NAN}) {
    EXPECT_FALSE(fused_exponent_applies(scaled_max)) << scaled_max;
  }
  EXPECT_TRUE(fused_exponent_applies(0.f));
}

// The SM90 16-bit kernel's scheme, emulated block by block in float32: offsets rounded up, P =
// exp2 of the FFMA against them, the sum rescaled by exp2 of two offsets' difference, the LSE from
// offset_log_sum_exp. Every P is at most 1, the max's above 0.95 against the last offset, and the
// LSE and the max's weight match float64 for every last offset below the limit.
TEST(SoftmaxRules, RowOffsetsKeepTheFusedExponentExactBelowTheirLimit) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> log_scale(-10.f, 10.f), log_offset(-6.f, 20.f), unit(0.f, 1.f);
  std::normal_distribution<float> normal(0.f, 4.f);
  int rows = 0;
  for (int i = 0; i < 20000; ++i) {
    const float softmax_scale = std::exp2(log_scale(rng)), scale_log2 = finite_scale_log2(softmax_scale);
    const float base = (i % 2 ? -1.f : 1.f) * std::exp2(log_offset(rng)) / scale_log2;
    std::vector<float> scores;
    float row_max = -INFINITY, offset = 0.f, row_sum = 0.f;
    for (int block = 0; block < 4; ++block) {
      const float rise = float(block) * unit(rng) * 8.f / scale_log2;
      float block_max = -INFINITY;
      const size_t first = scores.size();
      for (int j = 0; j < 32; ++j) {
        scores.push_back(base + rise + normal(rng) / scale_log2);
        block_max = std::max(block_max, scores.back());
      }
      const float new_max = std::max(row_max, block_max);
      const float new_offset = scaled_max_rounded_up(new_max, scale_log2);
      ASSERT_GE(double(new_offset), double(new_max) * scale_log2);
      ASSERT_LT(double(std::nextafter(new_offset, -INFINITY)), double(new_max) * scale_log2);
      const float rescale = row_max == -INFINITY ? 0.f : std::exp2(offset - new_offset);
      row_max = new_max, offset = new_offset;
      float block_sum = 0.f;
      for (size_t j = first; j < scores.size(); ++j) {
        const float p = std::exp2(fused_softmax_exponent(scores[j], scale_log2, offset));
        ASSERT_LE(p, 1.f);
        block_sum += p;
      }
      row_sum = row_sum * rescale + block_sum;
    }
    if (!fused_offset_applies(offset)) continue;
    ++rows;
    const float largest_p = std::exp2(fused_softmax_exponent(row_max, scale_log2, offset));
    EXPECT_GT(largest_p, 0.95f);
    double exact_sum = 0;
    for (float s : scores) exact_sum += std::exp((double(s) - double(row_max)) * double(softmax_scale));
    const double exact_lse = double(row_max) * double(softmax_scale) + std::log(exact_sum);
    const float lse = offset_log_sum_exp(row_max, offset, row_sum, softmax_scale, scale_log2);
    EXPECT_NEAR(lse, exact_lse, std::abs(exact_lse) * 4e-7 + 1e-5) << row_max << " " << scale_log2;
    // The max's weight, exp2(max * scale_log2 - offset) / sum, against float64's.
    EXPECT_NEAR(largest_p / row_sum, 1.0 / exact_sum, 1e-5 / exact_sum) << row_max << " " << scale_log2;
  }
  EXPECT_GT(rows, 15000);
  for (float offset : {kFusedOffsetLimit, -kFusedOffsetLimit, 1e10f, INFINITY, -INFINITY, NAN}) {
    EXPECT_FALSE(fused_offset_applies(offset)) << offset;
  }
  EXPECT_TRUE(fused_offset_applies(std::nextafter(kFusedOffsetLimit, 0.f)));
  EXPECT_EQ(offset_log_sum_exp(-INFINITY, 0.f, 0.f, 1.f, kLog2e), -INFINITY);  // no key
  EXPECT_TRUE(std::isnan(offset_log_sum_exp(1.f, kLog2e, NAN, 1.f, kLog2e)));
}

// -inf means "this row saw no key" and nothing else; a NaN sum stays NaN.
TEST(SoftmaxRules, NaNSumGivesNaNNotTheNoKeyValues) {
  EXPECT_EQ(inverse_row_sum(0.f), 0.f);
  EXPECT_EQ(row_log_sum_exp(-INFINITY, 0.f, 1.f), -INFINITY);
  EXPECT_TRUE(std::isnan(inverse_row_sum(NAN)));
  EXPECT_TRUE(std::isnan(row_log_sum_exp(1.f, NAN, 1.f)));
  EXPECT_EQ(inverse_row_sum(2.f), 0.5f);
  EXPECT_FLOAT_EQ(row_log_sum_exp(5e9f, 1.f, 1.f), 5e9f);
}

TEST(Tiles, Exp2IsClampedAtBothEnds) {
  using cpu::Vec;
  const Vec got = cpu::exp2(Vec{127.f, 128.5f, 200.f, 1e30f, INFINITY, NAN, 64.f, -126.f});
  EXPECT_FLOAT_EQ(got[0], 0x1p127f);
  for (int l = 1; l < 5; ++l) EXPECT_EQ(got[l], INFINITY) << l;
  EXPECT_TRUE(std::isnan(got[5]));
  EXPECT_FLOAT_EQ(got[6], 0x1p64f);
  EXPECT_FLOAT_EQ(got[7], 0x1p-126f);
  // Whatever the exponent, never a wrapped exponent field: no negative, no NaN from a number.
  for (float x = -300.f; x <= 300.f; x += 0.37f) {
    const float y = cpu::exp2(cpu::splat(x))[0];
    ASSERT_FALSE(std::isnan(y)) << x;
    ASSERT_GE(y, 0.f) << x;
  }
}

}  // namespace
}  // namespace hopattn
