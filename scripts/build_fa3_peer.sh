#!/usr/bin/env bash
# On the GPU machine: builds FlashAttention-3 (hopper/ of Dao-AILab/flash-attention), the benchmarks'
# peer, from a tarball of its source and pinned CUTLASS (packed where the source can be fetched, e.g.
# with ../shared/peers/pack_fa3.sh, and carried in the ignored .peers/ folder), into a folder outside
# the tracked tree. Only what the benchmarks compare is compiled: head_dim 64/128/256, the forward,
# and on request the backward (bench_backward.py), FP8 (bench_fp8.py) and varlen (bench_varlen.py);
# every other FA3 feature is switched off through its FLASH_ATTENTION_DISABLE_* variables.
#   usage: scripts/build_fa3_peer.sh FA3.tar.gz BUILD_DIR [backward] [fp8] [varlen]
# Prints the directory to put on PYTHONPATH (or in HOPATTN_FA3_PATH); skips a build already there.
set -euo pipefail
tarball=$1 dir=$2
shift 2
want=" $* "
hopper="$dir/fa/hopper"
if ls "$hopper"/flash_attn_3/_C*.so >/dev/null 2>&1; then
  echo "$hopper"
  exit 0
fi
mkdir -p "$dir"
tar xzf "$tarball" -C "$dir"
cd "$hopper"
# CLUSTER stays on: by default FA3 runs 16-bit head_dim 128 and 256 without a mask on clusters of two
# CTAs. (This script switched it off from 8280a0e until 2026-12-02: FA3's figures of those builds at
# those points are FA3's without its cluster.)
for feature in SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA FP16 SM80 HDIM96 HDIM192 HDIMDIFF64 HDIMDIFF192; do
  export FLASH_ATTENTION_DISABLE_$feature=TRUE
done
[[ $want == *" backward "* ]] || export FLASH_ATTENTION_DISABLE_BACKWARD=TRUE
[[ $want == *" fp8 "* ]] || export FLASH_ATTENTION_DISABLE_FP8=TRUE
[[ $want == *" varlen "* ]] || export FLASH_ATTENTION_DISABLE_VARLEN=TRUE
MAX_JOBS=${MAX_JOBS:-12} python3 setup.py build_ext --inplace >build.log 2>&1 || { tail -30 build.log; exit 1; }
ls flash_attn_3/_C*.so >/dev/null
echo "$hopper"
