#!/usr/bin/env bash
# Builds bench/fa3_harness.cu with FlashAttention-3's bf16 forward and backward at HEAD_DIM (64, 128
# or 256; default 128) into a shared library for bench/ab_kernels.py, from the tarball
# scripts/build_fa3_peer.sh takes (FA3's source and pinned CUTLASS, carried in the ignored .peers/).
# EDIT, when given, is a shell command run in a copy of FA3's hopper/ folder first: a variant of
# FA3 for an A/B (e.g. a sed of one rule).
# Of the switches scripts/build_fa3_peer.sh sets, those that shape these two instantiations (cluster
# on, as there); about 3 minutes on two cores.
#   usage: scripts/build_fa3_harness.sh FA3.tar.gz OUT.so ['EDIT']
set -euo pipefail
tarball=$1 out=$(realpath -m "$2") edit=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
hopper=$work/fa/hopper
[[ -z $edit ]] || (cd "$hopper" && eval "$edit") || { echo "build_fa3_harness.sh: the edit failed" >&2; exit 1; }
head_dim=${HEAD_DIM:-128}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
disabled="SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA VARLEN SM8x"
flags=(-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I"$hopper" -I"$hopper/../csrc/cutlass/include"
       --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math -DNDEBUG -Xcompiler -fPIC
       -DFA3_HARNESS_HEAD_DIM="$head_dim" -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0)
for feature in $disabled; do flags+=(-DFLASHATTENTION_DISABLE_$feature); done
"$nvcc" "${flags[@]}" -c -o "$work/forward.o" "$hopper/instantiations/flash_fwd_hdim${head_dim}_bf16_sm90.cu"
"$nvcc" "${flags[@]}" -c -o "$work/backward.o" "$hopper/instantiations/flash_bwd_hdim${head_dim}_bf16_sm90.cu"
"$nvcc" "${flags[@]}" -c -o "$work/harness.o" "$root/bench/fa3_harness.cu"
"$nvcc" -shared -cudart static -o "$out" "$work/forward.o" "$work/backward.o" "$work/harness.o"
echo "$out"
