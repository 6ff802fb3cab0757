#!/usr/bin/env bash
# An experiment beside the tree, for an A/B run: a copy of the source tree with EDIT applied (a shell
# command run in the copy's root, e.g. a sed of one tuning constant), built into build-variant-NAME/
# (the representative kernels unless KERNELS is given). Time it against the tree's own build in one
# run, in the same rotation as the peers:
#   bash scripts/build_variant.sh t176 "sed -i '...kBlockN = 128...' src/sm90/kernel/tile_size.hpp"
#   python3 bench/bench_forward.py --json ab.json --head-dims 128 --variant t176=build-variant-t176/src/libhopattn.so
# The copy lives in /tmp; EDIT should fail (e.g. a trailing grep -q) when it matched nothing.
#   usage: scripts/build_variant.sh NAME 'EDIT' [KERNELS]   (JOBS: parallel compile jobs, default 6)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 edit=$2 kernels=${3:-representative}
root=$PWD copy=/tmp/hopattn-variant-$name
rm -rf "$copy" && mkdir -p "$copy"
tar --exclude='./build*' --exclude=./.peers --exclude=./.git --exclude=./.deps -cf - . | tar -xf - -C "$copy"
[[ -d .deps ]] && ln -s "$root/.deps" "$copy/.deps"
(cd "$copy" && eval "$edit") || { echo "build_variant.sh: the edit failed in $copy" >&2; exit 1; }
cmake -S "$copy" -B "$root/build-variant-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=ON \
  -DHOPATTN_SM90_KERNELS="$kernels" -DHOPATTN_PTXAS_VERBOSE=ON >/dev/null
cmake --build "$root/build-variant-$name" -j "${JOBS:-6}" --target hopattn >"$root/build-variant-$name/build.log" 2>&1 ||
  { grep -E "error" "$root/build-variant-$name/build.log" | head -20; exit 1; }
echo "ptxas (spills / stack per kernel):"
grep "stack frame" "$root/build-variant-$name/build.log" | sort | uniq -c
ls "$root/build-variant-$name/src/libhopattn.so"
