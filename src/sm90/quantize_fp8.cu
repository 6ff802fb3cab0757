// FP8 quantisation on the GPU (hopattn_quantize_fp8 on the SM90 backend): bit for bit the codes
// and scales of the CPU backend (cpu/quantize_fp8.cpp), because every step is the same IEEE
// operation on the same operands:
//   - x is read with core/dtype.hpp's to_float and rotated as core/hadamard.hpp's hadamard_rotate
//     does: D from hadamard_sign, fast_walsh_hadamard's butterflies spread over the lanes of a row
//     (rotate() says why that is the same sequence of operations per element), its normalising
//     factor taken from fast_walsh_hadamard itself (normalising_factor());
//   - the scale is core/fp8_scale.hpp's fp8_scale_of, the code from_float<float8_e4m3>(fp8_scaled(
//     value, fp8_reciprocal_of(scale))) (the rounding done by the hardware's conversion:
//     e4m3_codes says why that is the same), and a block whose scale is not finite gets NaN codes
//     (0x7f), as on the CPU;
//   - every rounding float operation is an ieee_* of core/fp8_scale.hpp (.rn PTX without .ftz:
//     this library is compiled with --use_fast_math), and every test of a float goes through its
//     bits;
//   - a block's amax is the maximum of the bits of |value| as unsigned integers: for non-negative
//     floats the integer order is the float order, and every NaN (0x7f800001 and up) lies above
//     +inf (0x7f800000), so a block holding a NaN gets a NaN amax and one holding an infinity (and
//     no NaN) +inf, as the CPU's nan_max gives; fp8_scale_of maps every NaN to one NaN.
//
// Work is split into tiles: consecutive rows of one (batch, head), a CTA per tile at a time (a
// grid-stride loop, so any number of tiles fits the grid). Within a tile a row belongs to a group
// of `lanes` lanes of a warp (a power of two, up to 32), each holding `chunks` vectors of kVec
// consecutive elements: element (j * lanes + sublane) * kVec + k sits in values[j][k]. kVec is the
// widest load (up to 16 bytes) that head_dim and the alignment of x and out allow. Each lane group
// takes a few rows of the tile and loads all of them before it uses any, so that every thread
// keeps that many rows' loads in flight.
//
// Two schedules:
//   fused      block and head scales whose blocks fit a tile: each tile holds whole blocks. The
//              CTA reduces their amaxes in shared memory, writes their scales, and writes the
//              codes of the rows its threads still hold: x is read once.
//   two passes tensor scales, and longer blocks: an amax kernel reduces each tile in shared
//              memory and folds the result into a workspace of one amax per scale (atomicMax on
//              the bits; stream-ordered memory, zeroed first); then a codes kernel derives the
//              scales of each tile from the workspace, writes the codes, and the tile holding the
//              first row of a block writes its scale. x is read twice, and rotated twice.
// Either way each scale has one writer, and every element of out one.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fp8_layout.hpp"
#include "core/fp8_scale.hpp"
#include "core/hadamard.hpp"
#include "core/problem.hpp"
#include "sm90/device_check.hpp"
#include "sm90/dispatch_common.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {
namespace {

// Each lane's share of a row, kVec * chunks; 32 lanes of it bound head_dim.
constexpr int kValuesPerLane = 16;
// Rows a lane group holds at once, and warps per CTA. Fused: 4 rows (x 16 values in up to 128
// registers) and one warp per lane of a row (up to kMaxWarps), so that a tile holds whole blocks
// of up to 128 rows (64 for rows of 32 lanes, head_dim 257-512, whose default 128-row blocks
// therefore take two passes), with 128 bytes (bf16) of loads in flight per thread. Two passes,
// whose tiles need not hold whole blocks: 2 rows and 8 warps (tiles of 512 / lanes rows), with
// fewer registers, so that more CTAs per SM hide the passes' barriers and loads (4 rows at 128
// registers, and 16 warps at head_dim 256, ran 20-55% slower than one row at a time:
// time_split_8de289a, time_split_0aad1d0). The unaligned one-element vectors spill a little.
constexpr int kFusedRowsPerThread = 4;
constexpr int kMaxWarps = 16;  // 512 threads keep up to 128 registers each
constexpr int kMaxThreads = 32 * kMaxWarps;
constexpr int kTwoPassRowsPerThread = 2;
constexpr int kTwoPassWarps = 8;
constexpr int kTwoPassThreads = 32 * kTwoPassWarps;
// Scales a tile meets at most, for its shared memory's amax and scale per slot: a fused tile holds
// up to 32 * kFusedRowsPerThread rows in whole blocks, one slot per block; the two passes' tiles
// (up to 512 rows) meet only blocks longer than a fused tile (64 rows or more), so at most 9.
constexpr int kTileSlots = 32 * kFusedRowsPerThread;
static_assert(kTwoPassWarps * 32 * kTwoPassRowsPerThread / 64 + 1 <= kTileSlots);
constexpr int64_t kMaxHeadDim = 32 * kValuesPerLane;  // 512, cpu::kMaxHeadDim

// An unsigned integer (or vector of them) of kBytes bytes: what a lane loads or stores at once.
template <int kBytes>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = uint8_t;
};
template <>
struct BitsOf<2> {
  using type = uint16_t;
};
template <>
struct BitsOf<4> {
  using type = uint32_t;
};
template <>
struct BitsOf<8> {
  using type = uint2;
};
template <>
struct BitsOf<16> {
  using type = uint4;
};

struct Params {
  const void* x;
  uint8_t* out;           // float8_e4m3 codes
  float* scales;
  uint32_t* amax_bits;    // two passes: one amax per scale, as float bits, zeroed; fused: null
  int64_t seqlen, heads;
  Strides x_stride, out_stride;
  Fp8Scales layout;       // index(b, head, row): the one definition of a row's scale
  int64_t tile_rows;      // rows per tile, up to rows_per_pass * rows per thread (fused: whole blocks)
  int64_t tiles_per_head, tiles;
  int lanes, log2_lanes;  // lanes per row
  int warps;              // per CTA (fused: min(lanes, kMaxWarps); two passes: kTwoPassWarps)
  int rows_per_pass;      // rows a CTA's lane groups take at once: warps * 32 / lanes
  int chunks;             // vectors per lane that hold elements of the row
  int vectors;            // head_dim / kVec
  bool hadamard;
  uint64_t seed;
  float norm;             // fast_walsh_hadamard's 1 / sqrt(head_dim)
};

// Rows [begin, end) of head `head` of batch `b`; their scales are layout entries first_scale to
// first_scale + scale_count - 1.
struct Tile {
  int64_t b, head, begin, end;
  int64_t first_scale;
  int scale_count;
  int64_t phase;       // block scales: begin % block_rows
};

__device__ Tile tile_of(const Params& p, int64_t t) {
  const int64_t head_index = t / p.tiles_per_head;
  Tile tile;
  tile.b = head_index / p.heads;
  tile.head = head_index % p.heads;
  tile.begin = (t % p.tiles_per_head) * p.tile_rows;
  tile.end = min(p.seqlen, tile.begin + p.tile_rows);
  tile.first_scale = p.layout.index(tile.b, tile.head, tile.begin);
  tile.scale_count = static_cast<int>(p.layout.index(tile.b, tile.head, tile.end - 1) - tile.first_scale + 1);
  tile.phase = p.layout.scaling == Fp8Scaling::kBlock ? tile.begin % p.layout.block_rows : 0;
  return tile;
}

// layout.index(b, head, tile.begin + r) - tile.first_scale, without index()'s 64-bit division per
// row: (phase + r) / block_rows, which is 0 or 1 for blocks longer than a tile.
__device__ int slot_of(const Params& p, const Tile& tile, int r) {
  if (p.layout.scaling != Fp8Scaling::kBlock) return 0;
  if (p.layout.block_rows > p.tile_rows) return r >= p.layout.block_rows - tile.phase ? 1 : 0;
  return (static_cast<int>(tile.phase) + r) / static_cast<int>(p.layout.block_rows);
}

// This thread's place in the rows of a tile, and the signs of D for the elements it holds.
template <int kVec, int kChunks>
struct RowLane {
  int warp_row;       // the first row of the tile's passes this lane's group takes
  int sublane;        // its place among the row's lanes
  uint32_t negative;  // bit j * kVec + k: D's entry for values[j][k] is -1

  __device__ explicit RowLane(const Params& p) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int rows_per_warp = 32 >> p.log2_lanes;
    warp_row = static_cast<int>(threadIdx.x / 32) * rows_per_warp + (lane >> p.log2_lanes);
    sublane = lane & (p.lanes - 1);
    negative = 0;
    if (!p.hadamard) return;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int i = (j * p.lanes + sublane) * kVec + k;
        if (j < p.chunks && hadamard_sign(p.seed, static_cast<uint64_t>(i)) < 0.f) negative |= 1u << (j * kVec + k);
      }
    }
  }
};

// The rows begin + r of the tile that a lane group holds, r = row_in_tile(i) for i < kRows; a row
// is active when it lies in the tile. The lanes of inactive rows still run (the rotation's
// shuffles need every lane of the warp).
template <int kRows, int kVec, int kChunks>
struct HeldRows {
  float values[kRows][kChunks][kVec];
  int first, stride;
  int rows;  // of the tile

  __device__ HeldRows(const Params& p, const Tile& tile, int warp_row)
      : first(warp_row), stride(p.rows_per_pass), rows(static_cast<int>(tile.end - tile.begin)) {}
  __device__ int row_in_tile(int i) const { return first + i * stride; }
  __device__ bool active(int i) const { return row_in_tile(i) < rows; }
};

// The lane's elements of row `row`, as float32 (zeros where the lane holds none, or !active).
// kLastUse: the tile's last read of x, streamed past the caches.
template <class Element, int kVec, int kChunks, bool kLastUse>
__device__ void load_row(const Params& p, const Tile& tile, int64_t row, int sublane, bool active,
                         float (&values)[kChunks][kVec]) {
  using Vector = typename BitsOf<kVec * sizeof(Element)>::type;
  const int64_t offset = tile.b * p.x_stride.batch + row * p.x_stride.seq + tile.head * p.x_stride.head;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int vector = j * p.lanes + sublane;
    Element elements[kVec] = {};
    if (active && j < p.chunks && vector < p.vectors) {
      const Vector* source = reinterpret_cast<const Vector*>(static_cast<const Element*>(p.x) + offset) + vector;
      const Vector bits = kLastUse ? __ldcs(source) : __ldg(source);
      memcpy(elements, &bits, sizeof bits);
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) values[j][k] = to_float(elements[k]);
  }
}

HOPATTN_HOST_DEVICE void butterfly(float& a, float& b) {
  const float sum = ieee_add(a, b), difference = ieee_sub(a, b);
  a = sum;
  b = difference;
}

// partner + sign * own (sign +1 or -1) rounded once, as fma.rn.f32 without .ftz: the product is
// exact, so this is ieee_add(partner, +-own) in every bit, in one instruction instead of two.
__device__ float signed_sum(float partner, float sign, float own) {
  float sum;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(sum) : "f"(own), "f"(sign), "f"(partner));
  return sum;
}

// hadamard_rotate(row, head_dim, seed) on the row spread over the group's lanes.
//
// Why the result is bit for bit fast_walsh_hadamard's: that function makes log2(n) passes, half =
// 1, 2, ..., n / 2, and pass `half` replaces each pair (x[i], x[i + half]), i's bit `half` clear,
// by (x[i] + x[i + half], x[i] - x[i + half]), each one IEEE operation on the values the previous
// pass left. So an element's value after the last pass depends only on which operations each pass
// applies to which operands, not on where the elements are stored or in which order the
// independent pairs of a pass are done. Element i = (j * lanes + sublane) * kVec + k has its
// lowest log2(kVec) bits in k, the next log2(lanes) in sublane and the top ones in j, so the passes
// are, in fast_walsh_hadamard's order: half < kVec between registers k and k + half; kVec <= half
// < kVec * lanes between the lane and its partner sublane ^ (half / kVec), the same register, by
// shuffle; and the rest between registers j and j + half / (kVec * lanes). A lane pass is one
// signed_sum: the lane holding the pair's first element computes a + b as partner's b + 1 * own a
// (IEEE addition is commutative, bit for bit for non-NaN operands, and a NaN makes the block NaN
// whatever its bits), the lane holding the second a - b as partner's a + (-1) * own b, which IEEE
// defines to be a - b (the products are exact, so each is one rounding of the sum).
// D before (multiplying by -1 is flipping the sign bit, exactly) and the one normalising multiply
// after are per element.
template <int kVec, int kChunks>
__device__ void rotate(const Params& p, const RowLane<kVec, kChunks>& lane, float (&values)[kChunks][kVec]) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const uint32_t sign = ((lane.negative >> (j * kVec + k)) & 1u) << 31;
      values[j][k] = float_of_bits(bits_of(values[j][k]) ^ sign);
    }
  }
#pragma unroll
  for (int half = 1; half < kVec; half *= 2) {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if ((k & half) == 0) butterfly(values[j][k], values[j][k + half]);
      }
    }
  }
#pragma unroll
  for (int lane_half = 1; lane_half < 32; lane_half *= 2) {
    if (lane_half >= p.lanes) break;  // the same for the whole warp
    const float sign = (lane.sublane & lane_half) != 0 ? -1.f : 1.f;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float partner = __shfl_xor_sync(0xffffffffu, values[j][k], lane_half);
        values[j][k] = signed_sum(partner, sign, values[j][k]);
      }
    }
  }
#pragma unroll
  for (int chunk_half = 1; chunk_half < kChunks; chunk_half *= 2) {
    if (chunk_half >= p.chunks) break;  // the chunks past p.chunks hold no element
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      if ((j & chunk_half) != 0) continue;
#pragma unroll
      for (int k = 0; k < kVec; ++k) butterfly(values[j][k], values[j + chunk_half][k]);
    }
  }
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) values[j][k] = ieee_mul(values[j][k], p.norm);
  }
}

// The row's amax as float bits, in every lane of its group.
template <int kVec, int kChunks>
__device__ uint32_t row_amax_bits(const Params& p, const float (&values)[kChunks][kVec]) {
  uint32_t amax = 0;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) amax = max(amax, bits_of(values[j][k]) & 0x7fffffffu);
  }
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    if (offset >= p.lanes) break;
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  return amax;
}

// The tile's rows that `held` covers, loaded (all of them before any is used), then rotated.
// Rows for which `wanted(i)` is false are not read (their values are zeros).
template <class Element, int kRows, int kVec, int kChunks, bool kLastUse, class Wanted>
__device__ void load_held_rows(const Params& p, const Tile& tile, const RowLane<kVec, kChunks>& lane,
                               HeldRows<kRows, kVec, kChunks>& held, Wanted&& wanted) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    load_row<Element, kVec, kChunks, kLastUse>(p, tile, tile.begin + held.row_in_tile(i), lane.sublane,
                                               held.active(i) && wanted(i), held.values[i]);
  }
  if (!p.hadamard) return;
#pragma unroll
  for (int i = 0; i < kRows; ++i) rotate(p, lane, held.values[i]);
}

// The amax of each of the tile's blocks that `held` meets, into slot_amax (zeroed by the caller).
template <int kRows, int kVec, int kChunks>
__device__ void held_amaxes(const Params& p, const Tile& tile, const RowLane<kVec, kChunks>& lane,
                            const HeldRows<kRows, kVec, kChunks>& held, uint32_t* slot_amax) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const uint32_t amax = row_amax_bits(p, held.values[i]);
    if (held.active(i) && lane.sublane == 0 && amax != 0) {
      atomicMax(&slot_amax[slot_of(p, tile, held.row_in_tile(i))], amax);
    }
  }
}

// from_float<float8_e4m3>(lo).bits | from_float<float8_e4m3>(hi).bits << 8, by the hardware's
// conversion (one F2FP for two elements, where the software rule takes some twenty integer
// instructions and branches each). Why it is the same in every bit: from_float is
// sign(v) | m(|v|), m rounding |v| to e4m3's magnitudes to nearest even (subnormal codes 1 to 7
// included, in units of 2^-9), saturating at 0x7e (448) for |v| >= 448 and infinity, and giving
// 0x7f for NaN. cvt.rn.satfinite.e4m3x2.f32 is that rounding (.rn: to nearest even, which is
// symmetric in the sign, so its magnitude for v is m(|v|)); .satfinite clamps finite results past
// 448 and infinities to 448, 0x7e; NaN gives the canonical 0x7f. A float32 subnormal input
// (whether or not the hardware flushes it) lies below 2^-10, half the smallest e4m3 subnormal, so
// it rounds to magnitude 0 either way. Where the hardware's sign could differ from v's (a result
// of zero, -0 or a negative value rounding to 0, and NaN, whose sign PTX drops), OR-ing in v's
// sign bit, as the software does for every result, makes them agree: every other code already
// carries v's sign. (In store_held_codes no NaN reaches it anyway: a block holding one has a NaN scale
// and NaN codes.) PTX puts the first source operand in the upper byte.
__device__ uint32_t e4m3_codes(float lo, float hi) {
  uint16_t codes;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(hi), "f"(lo));
  // Byte 3 (sign and top exponent bits) of lo into byte 0, of hi into byte 1; then their sign bits.
  const uint32_t signs = __byte_perm(bits_of(lo), bits_of(hi), 0x0073u) & 0x8080u;
  return static_cast<uint32_t>(codes) | signs;
}

// The codes of the held rows, scale_of_slot(slot) being a block's scale (a block whose scale is not
// finite is all NaN codes).
template <int kRows, int kVec, int kChunks, class ScaleOfSlot>
__device__ void store_held_codes(const Params& p, const Tile& tile, const RowLane<kVec, kChunks>& lane,
                                 const HeldRows<kRows, kVec, kChunks>& held, ScaleOfSlot&& scale_of_slot) {
  using Vector = typename BitsOf<kVec>::type;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (!held.active(i)) continue;
    const int r = held.row_in_tile(i);
    const float scale = scale_of_slot(slot_of(p, tile, r));
    const bool finite = is_finite_bits(scale);
    const float reciprocal = fp8_reciprocal_of(scale);
    const int64_t row = tile.begin + r;
    uint8_t* out = p.out + tile.b * p.out_stride.batch + row * p.out_stride.seq + tile.head * p.out_stride.head;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int vector = j * p.lanes + lane.sublane;
      if (j >= p.chunks || vector >= p.vectors) continue;
      const float(&values)[kVec] = held.values[i][j];
      uint8_t codes[kVec];
      if (finite) {
        if constexpr (kVec == 1) {
          codes[0] = static_cast<uint8_t>(e4m3_codes(fp8_scaled(values[0], reciprocal), 0.f));
        } else {
#pragma unroll
          for (int k = 0; k < kVec; k += 2) {
            const uint32_t pair = e4m3_codes(fp8_scaled(values[k], reciprocal), fp8_scaled(values[k + 1], reciprocal));
            codes[k] = static_cast<uint8_t>(pair);
            codes[k + 1] = static_cast<uint8_t>(pair >> 8);
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) codes[k] = kFloat8E4M3NaN;
      }
      Vector bits;
      memcpy(&bits, codes, sizeof bits);
      __stcs(reinterpret_cast<Vector*>(out) + vector, bits);
    }
  }
}

// Whether the tile's slot s holds the first row of its scale's block, so that this tile writes the
// scale (its one writer): every slot but the first starts in the tile; the first does when the
// tile starts its block (for tensor scales, the tile of row 0 of the first (batch, head)).
__device__ bool writes_scale(const Params& p, const Tile& tile, int s) {
  if (s > 0) return true;
  switch (p.layout.scaling) {
    case Fp8Scaling::kBlock: return tile.phase == 0;
    case Fp8Scaling::kHead: return tile.begin == 0;
    case Fp8Scaling::kTensor: break;
  }
  return tile.begin == 0 && tile.b == 0 && tile.head == 0;
}

// The tile's scales from its amaxes (amax_bits_of_slot(s)) into slot_scale, and into p.scales by
// their writers; visible to the whole CTA on return.
template <class AmaxOfSlot>
__device__ void tile_scales(const Params& p, const Tile& tile, AmaxOfSlot&& amax_bits_of_slot, float* slot_scale) {
  for (int s = static_cast<int>(threadIdx.x); s < tile.scale_count; s += static_cast<int>(blockDim.x)) {
    const float scale = fp8_scale_of(float_of_bits(amax_bits_of_slot(s)));
    slot_scale[s] = scale;
    if (writes_scale(p, tile, s)) p.scales[tile.first_scale + s] = scale;
  }
  __syncthreads();
}

__device__ void zero_slots(const Tile& tile, uint32_t* slot_amax) {
  for (int s = static_cast<int>(threadIdx.x); s < tile.scale_count; s += static_cast<int>(blockDim.x)) slot_amax[s] = 0;
  __syncthreads();
}

struct EveryRow {
  __device__ bool operator()(int) const { return true; }
};

template <class Element, int kVec>
__global__ void __launch_bounds__(kMaxThreads) fused_kernel(const Params p) {
  constexpr int kChunks = kValuesPerLane / kVec;
  __shared__ uint32_t slot_amax[kTileSlots];
  __shared__ float slot_scale[kTileSlots];
  const RowLane<kVec, kChunks> lane(p);
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const Tile tile = tile_of(p, t);
    // (The previous tile's reads of slot_scale all precede this barrier, so this tile may rewrite it.)
    zero_slots(tile, slot_amax);
    HeldRows<kFusedRowsPerThread, kVec, kChunks> held(p, tile, lane.warp_row);
    load_held_rows<Element, kFusedRowsPerThread, kVec, kChunks, /*kLastUse=*/true>(p, tile, lane, held, EveryRow{});
    held_amaxes(p, tile, lane, held, slot_amax);
    __syncthreads();
    tile_scales(p, tile, [&](int s) { return slot_amax[s]; }, slot_scale);
    store_held_codes(p, tile, lane, held, [&](int slot) { return slot_scale[slot]; });
  }
}

template <class Element, int kVec>
__global__ void __launch_bounds__(kTwoPassThreads, 3) amax_kernel(const Params p) {
  constexpr int kChunks = kValuesPerLane / kVec;
  __shared__ uint32_t slot_amax[kTileSlots];
  const RowLane<kVec, kChunks> lane(p);
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const Tile tile = tile_of(p, t);
    zero_slots(tile, slot_amax);
    HeldRows<kTwoPassRowsPerThread, kVec, kChunks> held(p, tile, lane.warp_row);
    load_held_rows<Element, kTwoPassRowsPerThread, kVec, kChunks, /*kLastUse=*/false>(p, tile, lane, held, EveryRow{});
    held_amaxes(p, tile, lane, held, slot_amax);
    __syncthreads();
    for (int s = static_cast<int>(threadIdx.x); s < tile.scale_count; s += static_cast<int>(blockDim.x)) {
      if (slot_amax[s] != 0) atomicMax(&p.amax_bits[tile.first_scale + s], slot_amax[s]);
    }
    __syncthreads();  // before the next tile zeroes slot_amax
  }
}

template <class Element, int kVec>
__global__ void __launch_bounds__(kTwoPassThreads, 3) codes_kernel(const Params p) {
  constexpr int kChunks = kValuesPerLane / kVec;
  __shared__ float slot_scale[kTileSlots];
  const RowLane<kVec, kChunks> lane(p);
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const Tile tile = tile_of(p, t);
    tile_scales(p, tile, [&](int s) { return __ldg(&p.amax_bits[tile.first_scale + s]); }, slot_scale);
    HeldRows<kTwoPassRowsPerThread, kVec, kChunks> held(p, tile, lane.warp_row);
    // A block whose scale is not finite is all NaN codes: its rows need not be read.
    load_held_rows<Element, kTwoPassRowsPerThread, kVec, kChunks, /*kLastUse=*/true>(p, tile, lane, held, [&](int i) {
      return is_finite_bits(slot_scale[slot_of(p, tile, held.row_in_tile(i))]);
    });
    store_held_codes(p, tile, lane, held, [&](int slot) { return slot_scale[slot]; });
    __syncthreads();  // before the next tile rewrites slot_scale
  }
}

// fast_walsh_hadamard's normalising factor, from the function itself: the transform of the unit
// vector e_0 is all ones before the normalising multiply (sums of one 1 and zeros are exact), so
// each entry after it is 1 * factor = factor.
float normalising_factor(int64_t n) {
  std::vector<float> unit(static_cast<size_t>(n), 0.f);
  unit[0] = 1.f;
  fast_walsh_hadamard(unit.data(), n);
  return unit[0];
}

// The largest power of two up to `cap` bytes that divides the address and every stride (in bytes)
// of a dimension longer than 1.
int64_t row_alignment(const void* data, int64_t element_bytes, const Strides& strides, const QuantizeProblem& p, int64_t cap) {
  const int64_t byte_strides[] = {p.batch > 1 ? strides.batch * element_bytes : 0,
                                  p.seqlen > 1 ? strides.seq * element_bytes : 0,
                                  p.heads > 1 ? strides.head * element_bytes : 0};
  int64_t a = cap;
  const auto address = reinterpret_cast<uintptr_t>(data);
  while (a > 1) {
    bool divides = address % static_cast<uintptr_t>(a) == 0;
    for (int64_t s : byte_strides) divides = divides && s % a == 0;
    if (divides) break;
    a /= 2;
  }
  return a;
}

Status check_launch(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? Status::kOk : cuda_failure(kernel, error);
}

// A grid of at most as many CTAs as the device holds at once; the kernels loop over the rest.
// The SM count and the kernel's CTAs per SM are asked once per device (and kernel and CTA size,
// one of the log2(kMaxWarps) + 1 powers of two) and kept: the
// occupancy query costs microseconds of host time, a sizeable share of a call that quantises a few
// megabytes. A race between two threads only repeats the query, which gives the same answer.
constexpr int kCachedDevices = 64;

std::atomic<int> sm_count_of_device[kCachedDevices];

constexpr int kCtaSizes = 5;  // 1, 2, 4, 8, 16 warps
static_assert(kMaxWarps == 1 << (kCtaSizes - 1));

template <auto kKernel>
Status grid_size(int64_t tiles, int warps, unsigned& grid) {
  static std::atomic<int> ctas_per_sm_of_device[kCachedDevices][kCtaSizes];
  int log2_warps = 0;  // the CTA size's index
  while ((1 << log2_warps) < warps) ++log2_warps;
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return cuda_failure("cudaGetDevice", error);
  const bool cached = device >= 0 && device < kCachedDevices;
  int sm_count = cached ? sm_count_of_device[device].load(std::memory_order_relaxed) : 0;
  int per_sm = cached ? ctas_per_sm_of_device[device][log2_warps].load(std::memory_order_relaxed) : 0;
  if (sm_count == 0) {
    if (const cudaError_t error = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
        error != cudaSuccess) {
      return cuda_failure("cudaDeviceGetAttribute", error);
    }
    sm_count = std::max(sm_count, 1);
    if (cached) sm_count_of_device[device].store(sm_count, std::memory_order_relaxed);
  }
  if (per_sm == 0) {
    if (const cudaError_t error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, 32 * warps, 0);
        error != cudaSuccess) {
      return cuda_failure("cudaOccupancyMaxActiveBlocksPerMultiprocessor", error);
    }
    per_sm = std::max(per_sm, 1);
    if (cached) ctas_per_sm_of_device[device][log2_warps].store(per_sm, std::memory_order_relaxed);
  }
  grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t(per_sm) * sm_count));
  return Status::kOk;
}

template <class Element, int kVec>
Status run(const QuantizeProblem& problem, Params p) {
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  const int threads = 32 * p.warps;
  unsigned grid = 0;
  if (p.amax_bits == nullptr) {  // fused
    if (Status s = grid_size<fused_kernel<Element, kVec>>(p.tiles, p.warps, grid); s != Status::kOk) return s;
    fused_kernel<Element, kVec><<<grid, threads, 0, stream>>>(p);
    return check_launch("the FP8 quantisation kernel");
  }
  if (Status s = grid_size<amax_kernel<Element, kVec>>(p.tiles, p.warps, grid); s != Status::kOk) return s;
  amax_kernel<Element, kVec><<<grid, threads, 0, stream>>>(p);
  if (Status s = check_launch("the FP8 amax kernel"); s != Status::kOk) return s;
  if (Status s = grid_size<codes_kernel<Element, kVec>>(p.tiles, p.warps, grid); s != Status::kOk) return s;
  codes_kernel<Element, kVec><<<grid, threads, 0, stream>>>(p);
  return check_launch("the FP8 codes kernel");
}

template <class Element>
Status run_with_vector(const QuantizeProblem& problem, const Params& p, int vec) {
  switch (vec) {
    case 1: return run<Element, 1>(problem, p);
    case 2: return run<Element, 2>(problem, p);
    case 4: return run<Element, 4>(problem, p);
    case 8:
      if constexpr (sizeof(Element) <= 2) return run<Element, 8>(problem, p);
      break;
  }
  return set_error(Status::kInternal, "sm90: FP8 quantisation: no kernel for vectors of " + std::to_string(vec));
}

Status run_dtype(const QuantizeProblem& problem, const Params& p, int vec) {
  switch (problem.dtype) {
    case DType::kFloat32: return run_with_vector<float>(problem, p, vec);
    case DType::kBFloat16: return run_with_vector<bfloat16>(problem, p, vec);
    case DType::kFloat16: return run_with_vector<float16>(problem, p, vec);
    case DType::kFloat8E4M3: break;
  }
  return set_error(Status::kInternal, "sm90: FP8 quantisation of float8_e4m3 input (validation refuses it)");
}

// HOPATTN_FP8_LAYOUT_V_TRANSPOSED from codes in rows (contiguous (batch, seqlen, heads, head_dim)):
// a CTA per kTransposeRows rows of one (batch, head) reads them coalesced into shared memory,
// each head_dim column's bytes already at their positions (kColumnBytes apart: 18 words, so the
// byte writes of a warp's consecutive columns meet at most two to a bank), then writes each
// column's positions 8 bytes at a time, zeros for the rows from seqlen up to the pitch.
constexpr int kTransposeRows = 64;
constexpr int kColumnBytes = 72;
constexpr int kTransposeThreads = 256;

__global__ void __launch_bounds__(kTransposeThreads) v_transpose_kernel(const uint8_t* rows, uint8_t* out,
                                                                        VTransposedLayout layout, int64_t batch,
                                                                        int64_t seqlen) {
  extern __shared__ __align__(8) uint8_t columns[];  // head_dim x kColumnBytes
  const int64_t first_row = int64_t(blockIdx.x) * kTransposeRows;
  const int head_dim = int(layout.head_dim);
  constexpr int kWords = kTransposeRows / 8;
  // Pitch and positions are multiples of 8: 8-byte stores where out is 8-byte aligned.
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 8 == 0;
  // (batch, head) pairs strided over grid.y, which holds 65535 at most.
  for (int64_t pair = blockIdx.y; pair < batch * layout.heads; pair += gridDim.y) {
    const int64_t b = pair / layout.heads, head = pair % layout.heads;
    for (int i = threadIdx.x; i < kTransposeRows * head_dim; i += kTransposeThreads) {
      const int r = i / head_dim, d = i % head_dim;
      const int64_t row = first_row + r;
      columns[d * kColumnBytes + v_transposed_position(r)] =
          row < seqlen ? rows[((b * seqlen + row) * layout.heads + head) * head_dim + d] : 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kWords * head_dim; i += kTransposeThreads) {
      const int d = i / kWords, word = i % kWords;
      const int64_t position = first_row + 8 * word;
      if (position >= layout.pitch) continue;
      uint8_t* destination = out + layout.column_offset(b, head, d) + position;
      const uint8_t* source = columns + d * kColumnBytes + 8 * word;
      if (aligned) {
        *reinterpret_cast<uint2*>(destination) = *reinterpret_cast<const uint2*>(source);
      } else {
        for (int k = 0; k < 8; ++k) destination[k] = source[k];
      }
    }
    __syncthreads();  // the next pair's rows overwrite the columns
  }
}

Status quantize_rows(const QuantizeProblem& problem);

// Codes into a stream-ordered buffer in rows, then into out's transposed layout: the codes are
// those of the rows layout, so both backends still agree bit for bit.
Status quantize_v_transposed(const QuantizeProblem& problem) {
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  const int64_t elements = problem.batch * problem.seqlen * problem.heads * problem.head_dim;
  void* rows = nullptr;
  cudaError_t error = cudaMallocAsync(&rows, static_cast<size_t>(elements), stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the FP8 codes in rows", error);
  QuantizeProblem in_rows = problem;
  in_rows.out = rows;
  in_rows.out_layout = Fp8Layout::kRows;
  in_rows.out_stride = {problem.seqlen * problem.heads * problem.head_dim, problem.heads * problem.head_dim,
                        problem.head_dim};
  Status status = quantize_rows(in_rows);
  if (status == Status::kOk) {
    const VTransposedLayout layout = VTransposedLayout::of(problem.seqlen, problem.heads, problem.head_dim);
    const int64_t pairs = problem.batch * problem.heads;
    const dim3 grid(unsigned((layout.pitch - 1) / kTransposeRows + 1), unsigned(std::min<int64_t>(pairs, 65535)));
    const size_t shared_bytes = size_t(kColumnBytes) * size_t(problem.head_dim);
    v_transpose_kernel<<<grid, kTransposeThreads, shared_bytes, stream>>>(
        static_cast<const uint8_t*>(rows), static_cast<uint8_t*>(problem.out), layout, problem.batch, problem.seqlen);
    status = check_launch("the FP8 V transpose kernel");
  }
  error = cudaFreeAsync(rows, stream);
  if (status == Status::kOk && error != cudaSuccess) status = cuda_failure("cudaFreeAsync of the FP8 codes in rows", error);
  return status;
}

}  // namespace

Status quantize_fp8(const QuantizeProblem& problem) {
  if (Status s = check_device({{problem.x, "x.data"}, {problem.out, "out.data"}, {problem.scales, "scales"}},
                              problem.cuda_stream);
      s != Status::kOk) {
    return s;
  }
  if (problem.batch <= 0 || problem.seqlen <= 0 || problem.heads <= 0) return Status::kOk;
  return problem.out_layout == Fp8Layout::kVTransposed ? quantize_v_transposed(problem) : quantize_rows(problem);
}

namespace {

Status quantize_rows(const QuantizeProblem& problem) {
  const int64_t n = problem.head_dim;
  if (n < 1 || n > kMaxHeadDim) {
    return set_error(Status::kUnsupported, "head_dim " + std::to_string(n) +
                                               " is not supported by the SM90 FP8 quantisation (it takes 1 to " +
                                               std::to_string(kMaxHeadDim) + ")");
  }
  if (problem.hadamard && !is_power_of_two(n)) {
    return set_error(Status::kInternal, "sm90: the Hadamard rotation needs a power-of-two head_dim (validation checks it)");
  }

  // The widest vector (16 bytes of x at most) that divides head_dim and that the addresses of x's
  // and out's rows are aligned to.
  const int64_t element_bytes = element_size(problem.dtype);
  const int64_t x_alignment = row_alignment(problem.x, element_bytes, problem.x_stride, problem, 16);
  const int64_t out_alignment = row_alignment(problem.out, 1, problem.out_stride, problem, 16);
  int vec = static_cast<int>(16 / element_bytes);
  while (vec > 1 && (n % vec != 0 || x_alignment < vec * element_bytes || out_alignment < vec)) vec /= 2;

  Params p{};
  p.x = problem.x;
  p.out = static_cast<uint8_t*>(problem.out);
  p.scales = problem.scales;
  p.seqlen = problem.seqlen;
  p.heads = problem.heads;
  p.x_stride = problem.x_stride;
  p.out_stride = problem.out_stride;
  p.layout.data = problem.scales;
  p.layout.scaling = problem.scaling;
  p.layout.block_rows = problem.block_rows;
  p.layout.heads = problem.heads;
  p.layout.blocks_per_head = problem.blocks_per_head();
  p.hadamard = problem.hadamard;
  p.seed = problem.seed;
  p.norm = problem.hadamard ? normalising_factor(n) : 1.f;
  // The row's spread: vectors / lanes vectors per lane at most kValuesPerLane / vec, so lanes =
  // the power of two at or above vectors / (kValuesPerLane / vec), up to 32. For a power-of-two
  // head_dim, lanes * chunks * vec == head_dim exactly, which rotate() needs.
  p.vectors = static_cast<int>(n / vec);
  const int per_lane = kValuesPerLane / vec;
  p.lanes = 1;
  p.log2_lanes = 0;
  while (p.lanes * per_lane < p.vectors) {
    p.lanes *= 2;
    p.log2_lanes += 1;
  }
  p.chunks = (p.vectors + p.lanes - 1) / p.lanes;
  // A warp takes 32 / lanes rows at once, so `lanes` warps take 32; rows of 32 lanes take 16 with
  // kMaxWarps.
  const int fused_warps = std::min(p.lanes, kMaxWarps);
  const int64_t fused_capacity = int64_t(fused_warps) * (32 / p.lanes) * kFusedRowsPerThread;

  const int64_t block_rows = problem.block_rows;  // seqlen for head and tensor scales
  const bool fused = problem.scaling != Fp8Scaling::kTensor && block_rows <= fused_capacity;
  p.warps = fused ? fused_warps : kTwoPassWarps;
  p.rows_per_pass = p.warps * (32 / p.lanes);
  if (fused) {
    const int64_t blocks_per_tile = std::min(std::max<int64_t>(1, fused_capacity / block_rows), problem.blocks_per_head());
    p.tile_rows = blocks_per_tile * block_rows;
  } else {
    p.tile_rows = int64_t(p.rows_per_pass) * kTwoPassRowsPerThread;
  }
  p.tiles_per_head = (problem.seqlen - 1) / p.tile_rows + 1;
  p.tiles = problem.batch * problem.heads * p.tiles_per_head;

  if (fused) return run_dtype(problem, p, vec);
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  const size_t bytes = static_cast<size_t>(problem.scale_count()) * sizeof(uint32_t);
  void* workspace = nullptr;
  cudaError_t error = cudaMallocAsync(&workspace, bytes, stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the FP8 amax workspace", error);
  p.amax_bits = static_cast<uint32_t*>(workspace);
  error = cudaMemsetAsync(workspace, 0, bytes, stream);
  Status status = error == cudaSuccess ? run_dtype(problem, p, vec)
                                       : cuda_failure("cudaMemsetAsync of the FP8 amax workspace", error);
  error = cudaFreeAsync(workspace, stream);
  if (status == Status::kOk && error != cudaSuccess) status = cuda_failure("cudaFreeAsync of the FP8 amax workspace", error);
  return status;
}

}  // namespace
}  // namespace hopattn::sm90
