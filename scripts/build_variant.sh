#!/usr/bin/env bash
# An experiment beside the tree, for an A/B run: a copy of the source tree with EDIT applied (a shell
# command run in the copy's root, e.g. a sed of one tuning constant), built into .variants/NAME/
# (ignored, and outside build*/, so that the package never loads an experiment on its own), the
# representative kernels unless KERNELS is given. Time it against the tree's own build in one
# run, in the same rotation as the peers:
#   bash scripts/build_variant.sh t176 "sed -i '...kBlockN = 128...' src/sm90/kernel/tile_size.hpp"
#   HOPATTN_LIBRARY=build/src/libhopattn.so python3 bench/bench_forward.py --json ab.json \
#     --head-dims 128 --variant t176=.variants/t176/src/libhopattn.so
# The copy lives in /tmp; EDIT should fail (e.g. a trailing grep -q) when it matched nothing.
#   usage: scripts/build_variant.sh NAME 'EDIT' [KERNELS]   (JOBS: parallel compile jobs, default 6;
#   CMAKE_ARGS: more configure options, e.g. -DHOPATTN_TIMELINE=ON for bench/timeline.py's build)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 edit=$2 kernels=${3:-representative}
root=$PWD copy=/tmp/hopattn-variant-$name build=$PWD/.variants/$name
rm -rf "$copy" && mkdir -p "$copy"
# -m: the copied files carry the time of the copy, so that a later EDIT under the same NAME
# recompiles whatever an earlier one touched.
tar --exclude='./build*' --exclude=./.venv --exclude=./.variants --exclude=./.peers --exclude=./.git --exclude=./.deps -cf - . |
  tar -xmf - -C "$copy"
[[ -d .deps ]] && ln -s "$root/.deps" "$copy/.deps"
(cd "$copy" && eval "$edit") || { echo "build_variant.sh: the edit failed in $copy" >&2; exit 1; }
rm -f "$build"/src/libhopattn.so*  # a failed build leaves no library of an earlier one behind
cmake -S "$copy" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=ON \
  -DHOPATTN_SM90_KERNELS="$kernels" -DHOPATTN_PTXAS_VERBOSE=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "${JOBS:-6}" --target hopattn >"$build/build.log" 2>&1 ||
  { grep -E "error" "$build/build.log" | head -20; exit 1; }
echo "ptxas (spills / stack per kernel):"
{ grep "stack frame" "$build/build.log" || true; } | sort | uniq -c
ls "$build/src/libhopattn.so"
