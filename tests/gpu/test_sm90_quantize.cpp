// The SM90 FP8 quantisation (hopattn_quantize_fp8, backend SM90) against the CPU backend on host
// copies of the same inputs: the codes and the scales must agree bit for bit, over the input dtypes
// x head_dims (with and without the rotation) x the three scalings x block lengths x strided,
// misaligned and broadcast layouts x row counts that are not a multiple of the block, with inputs
// of many magnitudes, zeros, subnormals, NaN, infinities and rotations that overflow. The device
// outputs sit between guard bytes and are poisoned before each call (twice, with two poisons, so
// that an element left unwritten cannot pass by holding the expected code): nothing but out's
// elements and the scales may change. Runs on a stream of its own. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "hopattn/hopattn.h"

namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kGuardBytes = 256;  // before and after out's and the scales' buffers
constexpr uint8_t kPoisons[] = {0xa5, 0x5a};
// The scales' poison: 0xa5a5a5a5 is a negative float, which no scale is.
constexpr uint8_t kScalePoison = 0xa5;

// What fills x.
enum class Values {
  kMixed,       // N(0, 1) times 2^e with e drawn per row; some rows of zeros, some -0 and 0 entries
  kSpecial,     // kMixed, and NaN, +inf and -inf in a few rows; a row of e4m3 ties at scale 1
  kExtreme,     // float32 and bfloat16: subnormal rows (amax / 448 below the scale's floor), near-FLT_MAX rows
                // whose rotation overflows (to inf, and inf - inf to NaN)
};

struct QuantizeCase {
  hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  int64_t head_dim = 128;
  bool hadamard = true;
  hopattn_fp8_scaling scaling = HOPATTN_FP8_SCALE_BLOCK;
  int64_t block_rows = 128;
  int64_t batch = 2, seqlen = 300, heads = 3;
  int64_t x_padding = 0;    // elements after each head vector of x
  int64_t out_padding = 0;  // bytes after each head vector of out
  int64_t x_offset = 0;     // elements before x's first (odd: no vector loads)
  int64_t out_offset = 0;   // bytes before out's first (odd: no vector stores)
  bool broadcast_rows = false;  // x.seq_stride = 0: every row of a head is row 0
  Values values = Values::kMixed;
  uint64_t seed = 0;        // of the rotation
};

const char* dtype_name(hopattn_dtype dtype) {
  return dtype == HOPATTN_DTYPE_FLOAT32 ? "f32" : dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "f16";
}

std::string name_of(const QuantizeCase& c) {
  std::string name = std::string(dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) +
                     (c.hadamard ? "_rot" : "_norot");
  switch (c.scaling) {
    case HOPATTN_FP8_SCALE_TENSOR: name += "_tensor"; break;
    case HOPATTN_FP8_SCALE_HEAD: name += "_head"; break;
    case HOPATTN_FP8_SCALE_BLOCK: name += "_block" + std::to_string(c.block_rows); break;
  }
  name += "_b" + std::to_string(c.batch) + "_s" + std::to_string(c.seqlen) + "_h" + std::to_string(c.heads);
  if (c.x_padding || c.out_padding) name += "_pad" + std::to_string(c.x_padding) + "x" + std::to_string(c.out_padding);
  if (c.x_offset || c.out_offset) name += "_off" + std::to_string(c.x_offset) + "x" + std::to_string(c.out_offset);
  if (c.broadcast_rows) name += "_broadcast";
  if (c.values == Values::kSpecial) name += "_nan_inf";
  if (c.values == Values::kExtreme) name += "_extreme";
  return name;
}

void PrintTo(const QuantizeCase& c, std::ostream* os) { *os << name_of(c); }

int64_t element_bytes(hopattn_dtype dtype) { return dtype == HOPATTN_DTYPE_FLOAT32 ? 4 : 2; }

// x in a padded host buffer of raw element bits, its device copy, and the views of both.
struct Input {
  std::vector<uint8_t> host;
  void* device = nullptr;
  hopattn_tensor host_view{}, device_view{};

  Input() = default;
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;
  ~Input() { cudaFree(device); }
};

// Device memory and a stream freed however the test ends.
struct DeviceBuffer {
  uint8_t* data = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(reinterpret_cast<void**>(&data), bytes) != cudaSuccess) data = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data); }
};
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() {
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) stream = nullptr;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The element bits of `value` in `dtype`.
void store(hopattn_dtype dtype, float value, uint8_t* destination) {
  if (dtype == HOPATTN_DTYPE_FLOAT32) {
    std::memcpy(destination, &value, 4);
    return;
  }
  const uint16_t bits = dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::from_float<hopattn::bfloat16>(value).bits
                                                        : hopattn::from_float<hopattn::float16>(value).bits;
  std::memcpy(destination, &bits, 2);
}

// The values of row `row` of head `head` of batch `b` (head_dim of them).
void fill_row(const QuantizeCase& c, int64_t b, int64_t row, int64_t head, std::mt19937_64& rng,
              std::vector<float>& values) {
  std::normal_distribution<float> normal;
  // float16 holds 2^-24 to 65504: keep its exponents within that.
  const int max_exponent = c.dtype == HOPATTN_DTYPE_FLOAT16 ? 6 : 30;
  std::uniform_int_distribution<int> exponent(-max_exponent, max_exponent);
  std::uniform_int_distribution<int> percent(0, 99);
  const int kind = percent(rng);
  const float magnitude = std::ldexp(1.f, exponent(rng));
  for (float& v : values) {
    const int special = percent(rng);
    v = special == 0 ? 0.f : special == 1 ? -0.f : normal(rng) * magnitude;
  }
  if (kind < 4) std::fill(values.begin(), values.end(), kind < 2 ? 0.f : -0.f);  // a row of zeros
  if (c.values == Values::kSpecial) {
    // A few (batch, head, row)s, so that some blocks hold NaN, some only infinities, most neither.
    const int64_t key = (b * c.heads + head) * c.seqlen + row;
    const auto at = [&](int64_t i) -> float& { return values[static_cast<size_t>(i % c.head_dim)]; };
    if (key % 97 == 3) at(5) = kNaN;
    if (key % 89 == 7) at(0) = kInf;
    if (key % 89 == 8) at(7) = -kInf;
    if (key % 211 == 10) {
      at(1) = kInf;
      at(2) = -kInf;  // +inf and -inf: the rotation makes inf - inf = NaN
    }
    if (key % 101 == 50) {
      // 448 and exact e4m3 midpoints: at scale 1 (no rotation) every value's scaled operand is exact
      // and each code a round-to-nearest-even tie.
      const float ties[] = {448.f, 1.0625f, -1.1875f, 17.f, 9.5f, 0.01171875f, -240.f, 0.0009765625f};
      for (int64_t i = 0; i < c.head_dim; ++i) at(i) = ties[i % 8];
    }
  }
  if (c.values == Values::kExtreme) {
    std::uniform_int_distribution<int> pick(0, 5);
    switch (pick(rng)) {
      case 0:  // subnormal only, amax / 448 far below 2^-126: the scale's floor
        for (float& v : values) v = normal(rng) * 0x1p-146f;
        break;
      case 1:  // subnormal and a few normal
        for (float& v : values) v = normal(rng) * 0x1p-135f;
        values[0] = 0x1p-100f;
        break;
      case 2:  // the largest floats: the rotation's sums overflow
        for (float& v : values) v = (normal(rng) > 0 ? 1 : -1) * 3.0e38f;
        break;
      case 3:  // one huge value: inf after the rotation only if its partner adds up
        values[static_cast<size_t>(row % c.head_dim)] = 3.4e38f;
        break;
      default: break;  // as kMixed
    }
  }
}

void make_input(const QuantizeCase& c, std::mt19937_64& rng, Input& x) {
  const int64_t bytes_per = element_bytes(c.dtype);
  const int64_t head_stride = c.head_dim + c.x_padding;
  const int64_t seq_stride = c.broadcast_rows ? 0 : c.heads * head_stride;
  const int64_t rows = c.broadcast_rows ? 1 : c.seqlen;
  const int64_t batch_stride = (rows + 1) * c.heads * head_stride;  // a spare row between batches
  const int64_t elements = c.x_offset + c.batch * batch_stride;
  x.host.assign(static_cast<size_t>(elements * bytes_per), 0x77);
  std::vector<float> values(static_cast<size_t>(c.head_dim));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t h = 0; h < c.heads; ++h) {
        fill_row(c, b, row, h, rng, values);
        const int64_t first = c.x_offset + b * batch_stride + row * seq_stride + h * head_stride;
        for (int64_t i = 0; i < c.head_dim; ++i) store(c.dtype, values[size_t(i)], &x.host[size_t((first + i) * bytes_per)]);
      }
    }
  }
  if (cudaMalloc(&x.device, x.host.size()) != cudaSuccess) {
    x.device = nullptr;
    return;
  }
  cudaMemcpy(x.device, x.host.data(), x.host.size(), cudaMemcpyHostToDevice);
  x.host_view = {x.host.data() + c.x_offset * bytes_per, c.dtype, c.batch, c.seqlen, c.heads, c.head_dim,
                 batch_stride, seq_stride, head_stride};
  x.device_view = x.host_view;
  x.device_view.data = static_cast<uint8_t*>(x.device) + c.x_offset * bytes_per;
}

// out's layout inside its buffer: kGuardBytes, then out_offset bytes, then the view.
struct OutLayout {
  int64_t head_stride, seq_stride, batch_stride;
  size_t view_begin, bytes;  // the view's first byte in the buffer; the buffer's size

  explicit OutLayout(const QuantizeCase& c) {
    head_stride = c.head_dim + c.out_padding;
    seq_stride = c.heads * head_stride;
    batch_stride = c.seqlen * seq_stride + 16;  // 16 spare bytes between batches
    view_begin = kGuardBytes + size_t(c.out_offset);
    bytes = view_begin + size_t(c.batch * batch_stride) + kGuardBytes;
  }
  hopattn_tensor view(const QuantizeCase& c, uint8_t* buffer) const {
    return {buffer + view_begin, HOPATTN_DTYPE_FLOAT8_E4M3, c.batch, c.seqlen, c.heads, c.head_dim,
            batch_stride, seq_stride, head_stride};
  }
  // Which bytes of the buffer are elements of the view.
  std::vector<bool> element_mask(const QuantizeCase& c) const {
    std::vector<bool> mask(bytes, false);
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t row = 0; row < c.seqlen; ++row) {
        for (int64_t h = 0; h < c.heads; ++h) {
          const size_t first = view_begin + size_t(b * batch_stride + row * seq_stride + h * head_stride);
          for (int64_t i = 0; i < c.head_dim; ++i) mask[first + size_t(i)] = true;
        }
      }
    }
    return mask;
  }
};

size_t scale_count(const QuantizeCase& c) {
  if (c.scaling == HOPATTN_FP8_SCALE_TENSOR) return 1;
  const int64_t blocks = c.scaling == HOPATTN_FP8_SCALE_BLOCK ? (c.seqlen - 1) / c.block_rows + 1 : 1;
  return size_t(c.batch * c.heads * blocks);
}

hopattn_quantize_options options_of(const QuantizeCase& c, hopattn_backend backend, cudaStream_t stream) {
  hopattn_quantize_options options = hopattn_default_quantize_options();
  options.scaling = c.scaling;
  options.block_rows = c.block_rows;
  options.hadamard = c.hadamard ? 1 : 0;
  options.seed = c.seed;
  options.backend = backend;
  options.cuda_stream = stream;
  return options;
}

// Where byte `index` of out's buffer lies in the view, for messages.
std::string where(const QuantizeCase& c, const OutLayout& layout, size_t index) {
  if (index < layout.view_begin) return "byte " + std::to_string(index) + " (before the view)";
  int64_t offset = int64_t(index - layout.view_begin);
  const int64_t b = offset / layout.batch_stride;
  offset %= layout.batch_stride;
  const int64_t row = offset / layout.seq_stride;
  offset %= layout.seq_stride;
  const int64_t h = offset / layout.head_stride;
  const int64_t i = offset % layout.head_stride;
  return "byte " + std::to_string(index) + " = (b " + std::to_string(b) + ", row " + std::to_string(row) +
         ", head " + std::to_string(h) + ", i " + std::to_string(i) + (i < c.head_dim && row < c.seqlen ? ")" : ", outside the view)");
}

class Sm90QuantizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

class Sm90Quantize : public ::testing::TestWithParam<QuantizeCase> {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

// The case on the CPU backend, then twice on the GPU (two poisons): codes, padding, guards and
// scales compared byte for byte.
void expect_bitwise_equal_to_cpu(const QuantizeCase& c) {
  std::mt19937_64 rng(std::hash<std::string>{}(name_of(c)));  // the same inputs every run
  Input x;
  make_input(c, rng, x);
  ASSERT_NE(x.device, nullptr) << "cudaMalloc failed";
  const OutLayout layout(c);
  const size_t scales = scale_count(c);
  const size_t scale_bytes = kGuardBytes + scales * 4 + kGuardBytes;

  // The reference: the CPU backend on the host copy, into buffers poisoned like the device's.
  std::vector<uint8_t> cpu_out(layout.bytes, kPoisons[0]);
  std::vector<uint8_t> cpu_scales(scale_bytes, kScalePoison);
  hopattn_tensor cpu_out_view = layout.view(c, cpu_out.data());
  const hopattn_quantize_options cpu_options = options_of(c, HOPATTN_BACKEND_CPU, nullptr);
  ASSERT_EQ(hopattn_quantize_fp8(&x.host_view, &cpu_out_view, reinterpret_cast<float*>(cpu_scales.data() + kGuardBytes),
                                 &cpu_options),
            HOPATTN_OK)
      << hopattn_last_error();
  const std::vector<bool> mask = layout.element_mask(c);

  const Stream owned_stream;
  const DeviceBuffer out_buffer(layout.bytes), scales_buffer(scale_bytes);
  ASSERT_NE(owned_stream.stream, nullptr) << "cudaStreamCreateWithFlags failed";
  ASSERT_TRUE(out_buffer.data && scales_buffer.data) << "cudaMalloc failed";
  cudaStream_t stream = owned_stream.stream;
  uint8_t* out_device = out_buffer.data;
  uint8_t* scales_device = scales_buffer.data;
  std::vector<uint8_t> gpu_out(layout.bytes), gpu_scales(scale_bytes);
  for (const uint8_t poison : kPoisons) {
    SCOPED_TRACE(testing::Message() << "out poisoned with 0x" << std::hex << int(poison));
    ASSERT_CUDA(cudaMemsetAsync(out_device, poison, layout.bytes, stream));
    ASSERT_CUDA(cudaMemsetAsync(scales_device, kScalePoison, scale_bytes, stream));
    hopattn_tensor out_view = layout.view(c, out_device);
    const hopattn_quantize_options options = options_of(c, HOPATTN_BACKEND_SM90, stream);
    ASSERT_EQ(hopattn_quantize_fp8(&x.device_view, &out_view, reinterpret_cast<float*>(scales_device + kGuardBytes),
                                   &options),
              HOPATTN_OK)
        << hopattn_last_error();
    ASSERT_CUDA(cudaMemcpyAsync(gpu_out.data(), out_device, layout.bytes, cudaMemcpyDeviceToHost, stream));
    ASSERT_CUDA(cudaMemcpyAsync(gpu_scales.data(), scales_device, scale_bytes, cudaMemcpyDeviceToHost, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));

    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < layout.bytes; ++i) {
      const uint8_t expected = mask[i] ? cpu_out[i] : poison;
      if (gpu_out[i] != expected && mismatches++ == 0) first = i;
    }
    EXPECT_EQ(mismatches, 0u) << "first at " << where(c, layout, first) << ": GPU 0x" << std::hex << int(gpu_out[first])
                              << ", expected 0x" << int(mask[first] ? cpu_out[first] : poison);
    for (size_t i = 0; i < scale_bytes; i += 4) {
      uint32_t got, expected;
      std::memcpy(&got, &gpu_scales[i], 4);
      std::memcpy(&expected, &cpu_scales[i], 4);
      if (got != expected) {
        const bool guard = i < kGuardBytes || i >= kGuardBytes + scales * 4;
        float got_value, expected_value;
        std::memcpy(&got_value, &got, 4);
        std::memcpy(&expected_value, &expected, 4);
        ADD_FAILURE() << (guard ? "guard word at byte " : "scale ") << (guard ? i : (i - kGuardBytes) / 4)
                      << ": GPU " << got_value << " (0x" << std::hex << got << "), CPU " << expected_value << " (0x"
                      << expected << ")";
        break;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
}

TEST_P(Sm90Quantize, MatchesTheCpuBackendBitForBit) { expect_bitwise_equal_to_cpu(GetParam()); }

// Every scaling for one (dtype, head_dim, rotation): tensor and head scales over short (one tile)
// and long heads, block scales of 128 (the FP8 kernel's tile), 1, 7, 64, 129 and 1000 rows over row
// counts that are not multiples of them (blocks that fit a fused tile, up to 128 rows or 64 at
// head_dim 257-512, are the fused schedule's; longer ones and tensor scales the two passes').
void add_scalings(std::vector<QuantizeCase>& cases, QuantizeCase c) {
  const struct {
    hopattn_fp8_scaling scaling;
    int64_t block_rows, seqlen;
  } scalings[] = {{HOPATTN_FP8_SCALE_TENSOR, 0, 300},  {HOPATTN_FP8_SCALE_TENSOR, 0, 100},
                  {HOPATTN_FP8_SCALE_HEAD, 0, 300},    {HOPATTN_FP8_SCALE_HEAD, 0, 100},
                  {HOPATTN_FP8_SCALE_BLOCK, 128, 300}, {HOPATTN_FP8_SCALE_BLOCK, 1, 130},
                  {HOPATTN_FP8_SCALE_BLOCK, 7, 300},   {HOPATTN_FP8_SCALE_BLOCK, 64, 300},
                  {HOPATTN_FP8_SCALE_BLOCK, 129, 300}, {HOPATTN_FP8_SCALE_BLOCK, 1000, 2100}};
  for (const auto& s : scalings) {
    c.scaling = s.scaling;
    c.block_rows = s.scaling == HOPATTN_FP8_SCALE_BLOCK ? s.block_rows : 128;
    c.seqlen = s.seqlen;
    cases.push_back(c);
  }
}

std::vector<QuantizeCase> quantize_matrix() {
  std::vector<QuantizeCase> cases;
  const hopattn_dtype dtypes[] = {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16};
  const struct {
    int64_t head_dim;
    bool hadamard;
  } dims[] = {{64, true}, {128, true}, {256, true}, {80, false}, {128, false}};
  int index = 0;
  for (const hopattn_dtype dtype : dtypes) {
    for (const auto& d : dims) {
      QuantizeCase c;
      c.dtype = dtype;
      c.head_dim = d.head_dim;
      c.hadamard = d.hadamard;
      c.seed = uint64_t(index) * 0x9e3779b97f4a7c15ull;
      // Every other one strided: padding after each head vector of x and of out.
      c.x_padding = index % 2 ? 8 : 0;
      c.out_padding = index % 2 ? 16 : 0;
      ++index;
      add_scalings(cases, c);
    }
  }
  // The rotation at every power of two up to 512 (tiny ones spread over fewer lanes than a warp's).
  for (const hopattn_dtype dtype : dtypes) {
    for (const int64_t head_dim : {1, 2, 4, 8, 16, 32, 512}) {
      QuantizeCase c;
      c.dtype = dtype;
      c.head_dim = head_dim;
      c.seed = uint64_t(head_dim) + 5;
      c.scaling = HOPATTN_FP8_SCALE_BLOCK;
      c.block_rows = 16;
      c.seqlen = 150;
      cases.push_back(c);
      c.scaling = HOPATTN_FP8_SCALE_TENSOR;
      cases.push_back(c);
    }
  }
  // Rows of 32 lanes (head_dim 512) make fused tiles of 64 rows: blocks of 64 rows fuse, of 65 and
  // 128 take two passes (tiles of 16 rows, a block spanning several).
  for (const int64_t block_rows : {64, 65, 128}) {
    QuantizeCase c;
    c.head_dim = 512;
    c.scaling = HOPATTN_FP8_SCALE_BLOCK;
    c.block_rows = block_rows;
    c.seqlen = 300;
    cases.push_back(c);
  }
  // Rows of one or two lanes (head_dim up to 32) make two-pass tiles of 512 or 256 rows, each
  // holding several blocks longer than a fused tile, which start at any phase of the tile; more
  // tiles than one-warp fused CTAs in flight at head_dim 8 with 16-row blocks.
  for (const int64_t head_dim : {8, 16, 32}) {
    for (const int64_t block_rows : {129, 200, 511}) {
      QuantizeCase c;
      c.head_dim = head_dim;
      c.scaling = HOPATTN_FP8_SCALE_BLOCK;
      c.block_rows = block_rows;
      c.seqlen = 1100;
      cases.push_back(c);
    }
  }
  {
    QuantizeCase c;
    c.head_dim = 8;
    c.scaling = HOPATTN_FP8_SCALE_BLOCK;
    c.block_rows = 16;
    c.batch = 1;
    c.heads = 2;
    c.seqlen = 300000;
    cases.push_back(c);
  }
  // Without it, head_dims of every vector width: 1 element (odd), 2, 4 and 8.
  for (const hopattn_dtype dtype : dtypes) {
    for (const int64_t head_dim : {1, 3, 6, 100, 200, 510, 511, 512}) {
      QuantizeCase c;
      c.dtype = dtype;
      c.head_dim = head_dim;
      c.hadamard = false;
      c.scaling = HOPATTN_FP8_SCALE_BLOCK;
      c.block_rows = 7;
      c.seqlen = 100;
      cases.push_back(c);
      c.scaling = HOPATTN_FP8_SCALE_HEAD;
      c.seqlen = 200;
      cases.push_back(c);
    }
  }
  // Alignments that rule out the widest vectors: an odd element offset of x, odd head strides, odd
  // byte offsets of out (the kernel falls back to narrower loads and stores).
  for (const hopattn_dtype dtype : dtypes) {
    for (const bool hadamard : {true, false}) {
      QuantizeCase c;
      c.dtype = dtype;
      c.head_dim = 128;
      c.hadamard = hadamard;
      c.x_offset = 1;
      cases.push_back(c);
      c.x_offset = 0;
      c.x_padding = 1;
      cases.push_back(c);
      c.x_padding = 2;
      cases.push_back(c);
      c.x_padding = 0;
      c.out_offset = 3;
      cases.push_back(c);
      c.out_offset = 4;
      c.out_padding = 4;
      c.head_dim = 256;
      cases.push_back(c);
    }
  }
  // x broadcast over its rows (seq_stride 0).
  for (const hopattn_fp8_scaling scaling : {HOPATTN_FP8_SCALE_BLOCK, HOPATTN_FP8_SCALE_TENSOR}) {
    QuantizeCase c;
    c.broadcast_rows = true;
    c.scaling = scaling;
    cases.push_back(c);
  }
  // NaN and infinities, and the extremes of float32 and bfloat16, in every scaling.
  for (const hopattn_dtype dtype : dtypes) {
    for (const bool hadamard : {true, false}) {
      QuantizeCase c;
      c.dtype = dtype;
      c.hadamard = hadamard;
      c.head_dim = 64;
      c.values = Values::kSpecial;
      add_scalings(cases, c);
      if (dtype == HOPATTN_DTYPE_FLOAT16) continue;
      c.values = Values::kExtreme;
      add_scalings(cases, c);
    }
  }
  // More tiles than the grid has CTAs (the kernels' grid-stride loops), fused and in two passes.
  for (const hopattn_fp8_scaling scaling : {HOPATTN_FP8_SCALE_BLOCK, HOPATTN_FP8_SCALE_TENSOR, HOPATTN_FP8_SCALE_HEAD}) {
    QuantizeCase c;
    c.head_dim = 64;
    c.batch = 1;
    c.heads = 4;
    c.seqlen = 40000;
    c.scaling = scaling;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(QuantizeMatrix, Sm90Quantize, ::testing::ValuesIn(quantize_matrix()),
                         [](const ::testing::TestParamInfo<QuantizeCase>& info) { return name_of(info.param); });

// HOPATTN_FP8_LAYOUT_V_TRANSPOSED: the GPU against the CPU backend byte for byte, the whole
// contiguous transposed tensor (its pad positions included) between guard bytes, poisoned twice;
// seqlens below, at and past a group of 16, every scaling, odd and large head_dims.
TEST_F(Sm90QuantizeTest, VTransposedMatchesTheCpuBackendBitForBit) {
  const Stream owned_stream;
  ASSERT_NE(owned_stream.stream, nullptr) << "cudaStreamCreateWithFlags failed";
  cudaStream_t stream = owned_stream.stream;
  int index = 0;
  for (const hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT32}) {
    for (const int64_t head_dim : {1, 64, 80, 128, 256, 512}) {
      for (const int64_t seqlen : {1, 17, 300, 1000}) {
        QuantizeCase c;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.hadamard = false;
        c.seqlen = seqlen;
        c.x_padding = index % 2 ? 8 : 0;
        const hopattn_fp8_scaling scalings[] = {HOPATTN_FP8_SCALE_BLOCK, HOPATTN_FP8_SCALE_HEAD, HOPATTN_FP8_SCALE_TENSOR};
        c.scaling = scalings[index % 3];
        c.values = index % 2 ? Values::kSpecial : Values::kMixed;
        ++index;
        SCOPED_TRACE(name_of(c));
        std::mt19937_64 rng(std::hash<std::string>{}(name_of(c)));
        Input x;
        make_input(c, rng, x);
        ASSERT_NE(x.device, nullptr) << "cudaMalloc failed";
        const int64_t pitch = (seqlen + 15) / 16 * 16;
        const int64_t head_stride = head_dim * pitch, batch_stride = c.heads * head_stride;
        // Every other view starts one byte off 8-byte alignment (the transpose's byte stores).
        const size_t begin = kGuardBytes + size_t(index % 2), view_bytes = size_t(c.batch * batch_stride);
        const size_t bytes = begin + view_bytes + kGuardBytes;
        const auto view = [&](uint8_t* buffer) {
          return hopattn_tensor{buffer + begin, HOPATTN_DTYPE_FLOAT8_E4M3, c.batch, seqlen, c.heads, head_dim,
                                batch_stride, 1, head_stride};
        };
        const size_t scale_bytes = scale_count(c) * 4;
        std::vector<uint8_t> cpu_out(bytes, kPoisons[0]);
        std::vector<float> cpu_scales(scale_count(c));
        hopattn_tensor cpu_view = view(cpu_out.data());
        hopattn_quantize_options options = options_of(c, HOPATTN_BACKEND_CPU, nullptr);
        options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
        ASSERT_EQ(hopattn_quantize_fp8(&x.host_view, &cpu_view, cpu_scales.data(), &options), HOPATTN_OK)
            << hopattn_last_error();

        const DeviceBuffer out_buffer(bytes), scales_buffer(scale_bytes);
        ASSERT_TRUE(out_buffer.data && scales_buffer.data) << "cudaMalloc failed";
        std::vector<uint8_t> gpu_out(bytes);
        std::vector<float> gpu_scales(cpu_scales.size());
        for (const uint8_t poison : kPoisons) {
          ASSERT_CUDA(cudaMemsetAsync(out_buffer.data, poison, bytes, stream));
          ASSERT_CUDA(cudaMemsetAsync(scales_buffer.data, kScalePoison, scale_bytes, stream));
          hopattn_tensor out_view = view(out_buffer.data);
          options = options_of(c, HOPATTN_BACKEND_SM90, stream);
          options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
          ASSERT_EQ(hopattn_quantize_fp8(&x.device_view, &out_view, reinterpret_cast<float*>(scales_buffer.data), &options),
                    HOPATTN_OK)
              << hopattn_last_error();
          ASSERT_CUDA(cudaMemcpyAsync(gpu_out.data(), out_buffer.data, bytes, cudaMemcpyDeviceToHost, stream));
          ASSERT_CUDA(cudaMemcpyAsync(gpu_scales.data(), scales_buffer.data, scale_bytes, cudaMemcpyDeviceToHost, stream));
          ASSERT_CUDA(cudaStreamSynchronize(stream));
          for (size_t i = 0; i < bytes; ++i) {
            const bool guard = i < begin || i >= begin + view_bytes;
            const uint8_t expected = guard ? poison : cpu_out[i];
            ASSERT_EQ(gpu_out[i], expected) << "byte " << i << (guard ? " (a guard byte)" : " of the view")
                                            << ", poison 0x" << std::hex << int(poison);
          }
          ASSERT_EQ(std::memcmp(gpu_scales.data(), cpu_scales.data(), scale_bytes), 0) << "the scales differ";
        }
      }
    }
  }
}

}  // namespace
