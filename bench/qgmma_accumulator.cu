// Does an FP8 QGMMA write back a float C unchanged when every product it adds is zero? One
// warpgroup: A (64 x 32 e4m3, values up to 2^8) times B (32 x 8, columns of ones and of zeros),
// accumulated into C holding full-mantissa floats from 2^-4 to 2^36, 64 k-steps as in a long key
// loop. Prints how many of the zero columns' values changed. On an H100 (performance log,
// 2026-12-05 twelfth): 255 of 256, so an FP8 accumulator column cannot carry a float across QGMMAs.
//   nvcc -std=c++17 -arch=sm_90a -I<cutlass>/include --expt-relaxed-constexpr qgmma_accumulator.cu
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
using namespace cute;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t e = (call);                                                                      \
    if (e != cudaSuccess) { printf("%s: %s\n", #call, cudaGetErrorString(e)); std::exit(1); } \
  } while (0)

constexpr int kSteps = 64;
constexpr int kAPerThread = 64 * 32 / 128;  // A values each thread holds per k-step
using Fp8 = cutlass::float_e4m3_t;

__global__ void kernel(float const* c_in, Fp8 const* a_in, float* c_out) {
  __shared__ alignas(128) Fp8 b_smem[8 * 32];
  using Mma = decltype(make_tiled_mma(SM90_64x8x32_F32E4M3E4M3_RS_TN<>{}));
  Mma mma;
  auto thr = mma.get_thread_slice(threadIdx.x);
  auto sB = make_tensor(make_smem_ptr(b_smem), tile_to_shape(GMMA::Layout_K_INTER_Atom<Fp8>{}, Shape<_8, _32>{}));
  for (int i = threadIdx.x; i < 8 * 32; i += 128) sB(i % 8, i / 8) = Fp8(i % 8 % 2 == 0 ? 1.f : 0.f);
  __syncthreads();
  cutlass::arch::fence_view_async_shared();
  Tensor acc = partition_fragment_C(mma, Shape<_64, _8>{});
  Tensor cC = thr.partition_C(make_identity_tensor(Shape<_64, _8>{}));
  for (int i = 0; i < size(acc); ++i) acc(i) = c_in[get<0>(cC(i)) * 8 + get<1>(cC(i))];
  Tensor tB = thr.partition_fragment_B(sB);
  Tensor a = thr.partition_fragment_A(make_tensor(make_smem_ptr((Fp8*)nullptr), Shape<_64, _32>{}));
  static_assert(decltype(size(a))::value == kAPerThread);
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < size(a); ++i) a(i) = a_in[(step * 128 + threadIdx.x) * kAPerThread + i];
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    gemm(mma, a, tB, acc);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
  }
  for (int i = 0; i < size(acc); ++i) c_out[get<0>(cC(i)) * 8 + get<1>(cC(i))] = acc(i);
}

int main() {
  const int n_c = 64 * 8;
  const int n_a = kSteps * 128 * kAPerThread;
  float* c_host = new float[n_c];
  Fp8* a_host = new Fp8[n_a];
  uint32_t seed = 12345;
  auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return (seed >> 8) / 16777216.f; };
  for (int i = 0; i < n_c; ++i) c_host[i] = (1.f + rnd()) * std::ldexp(1.f, int(rnd() * 40) - 4);  // 2^-4 .. 2^36
  for (int i = 0; i < n_a; ++i) a_host[i] = Fp8(std::ldexp(1.f + rnd(), int(rnd() * 16) - 8));  // up to 2^8
  float *c_in, *c_out; Fp8* a;
  CHECK(cudaMalloc(&c_in, n_c * 4));
  CHECK(cudaMalloc(&c_out, n_c * 4));
  CHECK(cudaMalloc(&a, n_a));
  CHECK(cudaMemcpy(c_in, c_host, n_c * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(a, a_host, n_a, cudaMemcpyHostToDevice));
  kernel<<<1, 128>>>(c_in, a, c_out);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float* out = new float[n_c];
  CHECK(cudaMemcpy(out, c_out, n_c * 4, cudaMemcpyDeviceToHost));
  int changed = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 1; n < 8; n += 2) changed += out[m * 8 + n] != c_host[m * 8 + n];
  printf("zero columns: %d of %d values changed by %d QGMMAs adding zero products\n", changed, 64 * 4, kSteps);
  return 0;
}
