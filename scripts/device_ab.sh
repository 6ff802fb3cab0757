#!/usr/bin/env bash
# On the GPU machine, one call: the tree and experiments built side by side, then timed in one run
# with FlashAttention-3 and the SDPA peers (bench_forward.py --variant; bench_varlen.py too with
# --varlen; with --fp8, bench_fp8.py --variant instead, each variant in both V layouts, beside
# FA3's FP8 and cuDNN's FP8 when its wheel is carried; with --backward, bench_backward.py
# --variant beside FA3's backward). Each experiment is NAME=EDIT, EDIT a shell command run in a
# copy of the tree (scripts/build_variant.sh, into .variants/), e.g. a sed of a tuning constant or
# `patch -p1 < $root/.peers/exp/x.patch` ($root: the tree). Every build first passes
# bench/variant_smoke.py (small calls against a float64 reference, under a timeout) or is left
# out, so that a hanging experiment costs its smoke test only.
# The representative kernels (bf16, head_dim 128) unless --kernels all or a list of the kernels the
# benchmark times (forward_fp8_bf16_hdim256,forward_bf16_hdim256,...: generate.py --only), so the
# default sweep is head_dim 128 (--head-dims for others, with their kernels).
#   usage: scripts/device_ab.sh [--varlen | --fp8 | --backward] [--kernels all | NAME,...]
#          [--head-dims "128"] [--seqlens "1024 2048 8192 16384"] [--rounds N] [--rep-ms MS]
#          [--no-fa3] NAME=EDIT ...
#      or: scripts/device_ab.sh [...] --prebuilt DIR NAME ...
# --prebuilt DIR: the libraries were built beforehand (build_variant.sh on another machine, then
# each .variants/NAME/src/libhopattn.so copied to DIR/NAME.so, the tree's own as DIR/base.so; carry
# DIR): nothing is built here but FA3. --no-fa3: nor FA3, for an A/B read as ratios to the base
# (the peers' columns then say why they are missing). Together they leave a call its timed run.
# --rounds N, --rep-ms MS: passed to the benchmark (bench_common.py's defaults: 5 rounds); where a
# same-code control moves by several percent in one run (an H100, 2026-12-05 ninth: ±5%), more
# rounds interleave the builds more finely in the same time.
#   (carry .deps and .peers; the JSON and tables in $OUT, the build logs in $OUT/logs_ab.tar.gz:
#   the device returns a few files per call)
set -uo pipefail
cd "$(dirname "$0")/.."
R=${OUT:-$PWD/device-out}
L=$(mktemp -d)/logs
mkdir -p "$R" "$L"
trap 'tar czf "$R/logs_ab${features:+_$features}.tar.gz" -C "$(dirname "$L")" logs' EXIT
varlen=0 fp8=0 backward=0 kernels=representative head_dims=128 seqlens="1024 2048 8192 16384"
prebuilt="" fa3=1 timing=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --varlen) varlen=1; shift ;;
    --fp8) fp8=1; shift ;;
    --backward) backward=1; shift ;;
    --kernels) kernels=$2; shift 2 ;;
    --head-dims) head_dims=$2; shift 2 ;;
    --seqlens) seqlens=$2; shift 2 ;;
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --no-fa3) fa3=0; shift ;;
    --rounds | --rep-ms) timing+=("$1" "$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
for experiment in "$@"; do  # every argument checked before anything is built
  name=${experiment%%=*}
  if [[ -n $prebuilt && ! -f $prebuilt/$experiment.so ]]; then
    echo "device_ab.sh: --prebuilt: no $prebuilt/$experiment.so" >&2
    exit 2
  elif [[ -z $prebuilt && ($experiment != *=* || -z $name || $name == base) ]]; then
    echo "device_ab.sh: '$experiment' is not NAME=EDIT with a NAME other than 'base'" >&2
    exit 2
  fi
done
commit=${HOPATTN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
features="" && ((varlen)) && features=varlen
((fp8)) && features=fp8
((backward)) && features=backward
fa3_dir=$PWD/build-fa3-ab${features:+-$features}
pids=""
if ((fa3)); then
  (MAX_JOBS=4 bash scripts/build_fa3_peer.sh .peers/fa3.tar.gz "$fa3_dir" $features >"$L/fa3_build.log" 2>&1) &
  pids=$!
fi
library_of() { if [[ -n $prebuilt ]]; then echo "$prebuilt/$1.so"; else echo "$PWD/.variants/$1/src/libhopattn.so"; fi; }
[[ -z $prebuilt ]] && (JOBS=3 bash scripts/build_variant.sh base true "$kernels" >"$L/build_base.log" 2>&1) &
pids="$pids $!"
names=()
for experiment in "$@"; do
  name=${experiment%%=*}
  names+=("$name")
  [[ -z $prebuilt ]] && (JOBS=3 bash scripts/build_variant.sh "$name" "${experiment#*=}" "$kernels" >"$L/build_$name.log" 2>&1) &
  pids="$pids $!"
done
for pid in $pids; do wait "$pid"; done
for log in "$L"/build_*.log; do [[ -f $log ]] && echo "== $(basename "$log" .log)" && tail -4 "$log"; done
((fa3)) && tail -1 "$L/fa3_build.log"
# build_variant.sh leaves no library where a build failed: such an experiment is left out, and
# without the base there is nothing to compare.
[[ -f $(library_of base) ]] || { echo "device_ab.sh: the base build failed" >&2; exit 1; }
export PYTHONPATH=$PWD/python
((fa3)) && export HOPATTN_FA3_PATH=$fa3_dir/fa/hopper
operation=forward && ((fp8)) && operation=fp8
((backward)) && operation=backward
# Each build first runs small calls against a float64 reference (bench/variant_smoke.py): an
# experiment that hangs or is wrong is left out, rather than stalling or skewing the timed run.
smoke() {
  # shellcheck disable=SC2086
  HOPATTN_LIBRARY=$(library_of "$1") timeout 120 python3 bench/variant_smoke.py "$operation" \
    --head-dims $head_dims 2>&1 | tail -8 | sed "s/^/$1: /"
  return "${PIPESTATUS[0]}"
}
smoke base || { echo "device_ab.sh: the base build failed its smoke test" >&2; exit 1; }
export HOPATTN_LIBRARY=$(library_of base)
variants=()
for name in "${names[@]}"; do
  library=$(library_of "$name")
  if [[ ! -f $library ]]; then echo "== $name: build failed, left out"
  elif ! smoke "$name"; then echo "== $name: smoke test failed or timed out, left out"
  else variants+=(--variant "$name=$library"); fi
done
if ((fp8)); then
  # cuDNN's FP8 peer: the cudnn-frontend wheel carried in .peers/wheels, cuDNN from torch's package.
  python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-frontend .peers/wheels/nvidia_cudnn_frontend-*.whl \
    >"$L/cudnn_frontend_install.log" 2>&1 || echo "cudnn-frontend: install failed (no cuDNN FP8 peer)"
  cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), 'lib'))" 2>/dev/null)
  # shellcheck disable=SC2086
  PYTHONPATH=$PYTHONPATH:/tmp/cudnn-frontend LD_LIBRARY_PATH=${cudnn_lib:-}:${LD_LIBRARY_PATH:-} \
    timeout 400 python3 -u bench/bench_fp8.py --json "$R/ab_fp8.json" --head-dims $head_dims --seqlens $seqlens \
    --commit "$commit" "${timing[@]}" "${variants[@]}" --variant-of hopattn_fp8,hopattn_fp8_vt \
    2>"$L/ab_fp8_progress.log" | tee "$R/ab_fp8.txt"
  exit
fi
if ((backward)); then
  # shellcheck disable=SC2086
  timeout 400 python3 -u bench/bench_backward.py --json "$R/ab_backward.json" --head-dims $head_dims --seqlens $seqlens \
    --commit "$commit" "${timing[@]}" "${variants[@]}" 2>"$L/ab_backward_progress.log" | tee "$R/ab_backward.txt"
  exit
fi
# shellcheck disable=SC2086
timeout 300 python3 -u bench/bench_forward.py --json "$R/ab_forward.json" --head-dims $head_dims --seqlens $seqlens \
  --no-ablation --commit "$commit" "${timing[@]}" "${variants[@]}" 2>"$L/ab_forward_progress.log" | tee "$R/ab_forward.txt"
if ((varlen)); then
  timeout 200 python3 -u bench/bench_varlen.py --json "$R/ab_varlen.json" --commit "$commit" "${timing[@]}" "${variants[@]}" \
    2>"$L/ab_varlen_progress.log" | tee "$R/ab_varlen.txt"
fi
