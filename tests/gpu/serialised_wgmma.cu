// The kernel that tests/gpu/serialised_wgmma_check.sh compiles through the SM90 compiler launcher:
// two QGMMAs in flight on one accumulator. With WRITE_ACCUMULATOR_IN_FLIGHT the code writes an
// accumulator register between them, which makes ptxas serialise the WGMMAs (C7511); without it
// the kernel compiles clean. Compiled only (-c), never run.
#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

using namespace cute;
using Fp8 = cutlass::float_e4m3_t;

__global__ void two_qgmmas(float* out, int steps) {
  __shared__ alignas(128) Fp8 b_smem[64 * 32];
  auto mma = make_tiled_mma(SM90_64x64x32_F32E4M3E4M3_RS_TN<>{});
  auto thread_mma = mma.get_thread_slice(threadIdx.x);
  auto sB = make_tensor(make_smem_ptr(b_smem), tile_to_shape(GMMA::Layout_K_INTER_Atom<Fp8>{}, Shape<_64, _32>{}));
  Tensor accumulator = partition_fragment_C(mma, Shape<_64, _64>{});
  clear(accumulator);
  Tensor b = thread_mma.partition_fragment_B(sB);
  Tensor a = thread_mma.partition_fragment_A(make_tensor(make_smem_ptr((Fp8*)nullptr), Shape<_64, _32>{}));
  for (int i = 0; i < size(a); ++i) a(i) = Fp8(float(threadIdx.x + i));
  for (int step = 0; step < steps; ++step) {
    warpgroup_fence_operand(accumulator);
    warpgroup_arrive();
    gemm(mma, a, b, accumulator);
    warpgroup_commit_batch();
#ifdef WRITE_ACCUMULATOR_IN_FLIGHT
    accumulator(3) = accumulator(3) * 0.5f;
#endif
    gemm(mma, a, b, accumulator);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(accumulator);
  }
  for (int i = 0; i < size(accumulator); ++i) out[threadIdx.x * 64 + i] = accumulator(i);
}
