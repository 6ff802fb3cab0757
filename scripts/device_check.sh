#!/usr/bin/env bash
# On the GPU machine: build, resource report, SASS excerpt, every test, compute-sanitizer, and the
# side-by-side benchmarks with FlashAttention-3 built from source in the same run. Each step is
# skipped when its output already exists in this (warm) machine's build folders, so a run cut short
# by the 10-minute limit continues in the next call. Logs go to $OUT/logs_<mode>.tar.gz, the benchmark
# JSON and PNG beside it; the last lines printed are the summary tables.
#   usage: scripts/device_check.sh [quick|tests|sanitizers|bench|bench-backward|fp8|profile|timeline|all]
#          (carry .deps and .peers)
#     all: tests, sanitizers, bench and bench-backward (more than one call's 10 minutes: a warm
#          machine keeps the build, so the modes can also go one per call)
#     quick: the representative kernel only, its GPU tests (a first check of a new kernel)
#     tests: every kernel, ptxas/SASS, every test, the CLI's default run
#     sanitizers: compute-sanitizer's four tools on small shapes of the forward, backward and FP8
#     bench: FlashAttention-3 build, forward sweep and varlen benchmark
#     bench-backward: the backward sweep (FA3's backward is in the same FA3 build)
#     fp8: the FP8 GPU tests, then the FP8 sweep with FA3's FP8 (its own build) and
#          cuDNN's FP8 (the cudnn-frontend wheel carried in .peers/wheels)
#     profile: Nsight Compute on hopattn's kernel and FA3's at one point (PROFILE_ARGS,
#          bench/profile_kernel.py's, default "--head-dim 128 --seqlen 8192 --causal"; with
#          "--pass backward" the backward's main kernels): each kernel's details page and source
#          page, and the key loop's mix and stalls side by side (bench/ncu_source.py hot).
#          PROFILE_LIBRARY: a prebuilt libhopattn.so to profile instead (e.g. an A/B's variant);
#          PROFILE_SECTIONS: more ncu sections. "--dtype e4m3" profiles FA3's FP8 build (the fp8
#          mode's, if it ran on this warm machine)
#     timeline: the forward's phases per key step and tile from its timeline build
#          (bench/timeline.py) at each of TIMELINE_POINTS (';'-separated argument lists of
#          bench/timeline.py; default head_dim 128 8k, both masks). TIMELINE_LIBRARY: a prebuilt
#          timeline build (CMAKE_ARGS=-DHOPATTN_TIMELINE=ON scripts/build_variant.sh NAME true
#          KERNELS); else the representative kernels are built with -DHOPATTN_TIMELINE=ON
#   DEVICE_BUILD=DIR: every kernel built elsewhere (scripts/pack_device_build.sh DIR, carried), laid
#          out as build-device, so that no mode builds here; `tests` then takes the ptxas report
#          from DIR and leaves the CPU suites (ctest needs the CMake tree) to CI.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
RESULTS=${OUT:-$PWD/device-out}
LOGS=$(mktemp -d)/logs
mkdir -p "$LOGS" "$RESULTS"
# The device returns at most 8 files from $OUT: the tarball holds everything; beside it go the first
# JSONs, then PNGs, leaving two places for the tarballs of later calls in the same command (a
# timeline of 7 points writes 14, and files past the cap were dropped unnamed, the tarball among them).
publish() {
  local room=$((8 - $(find "$RESULTS" -maxdepth 1 -type f | wc -l))) file
  if ((room < 1)); then  # an earlier step of the same command filled $OUT: this one's tarball would be dropped
    echo "device_check.sh: $RESULTS already holds 8 files; logs_$mode.tar.gz not written" >&2
    return
  fi
  tar czf "$RESULTS/logs_$mode.tar.gz" -C "$(dirname "$LOGS")" logs
  room=$((room - 1))
  for file in "$LOGS"/*.json "$LOGS"/*.png; do
    [[ -f $file && $room -gt 2 ]] || continue
    cp "$file" "$RESULTS"/ && room=$((room - 1))
  done
}
trap publish EXIT
commit=${HOPATTN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [[ -n "${DEVICE_BUILD:-}" ]]; then
  commit=${HOPATTN_COMMIT:-$(head -1 "$DEVICE_BUILD/COMMIT")}
  mkdir -p build-device/src build-device/tests/gpu build-device/tools
  cp "$DEVICE_BUILD/libhopattn.so.0" build-device/src/ && ln -sf libhopattn.so.0 build-device/src/libhopattn.so
  cp "$DEVICE_BUILD"/test_sm90_* build-device/tests/gpu/ && cp "$DEVICE_BUILD/hopattn-bench" build-device/tools/
  export LD_LIBRARY_PATH=$PWD/build-device/src:${LD_LIBRARY_PATH:-}  # their run path names the other machine's
  echo "== every kernel built elsewhere: $(tr '\n' ' ' <"$DEVICE_BUILD/COMMIT")"
fi
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$LOGS/gpu.txt"

# FlashAttention-3 builds in the background while the rest runs (scripts/build_fa3_peer.sh: its
# source and build stay outside the repository's tracked files), one folder per feature set.
# $1: the features (backward varlen | fp8; none: the forward only); sets FA3_DIR.
start_fa3_build() {
  FA3_DIR=$PWD/build-fa3-${1:-forward}
  FA3_DIR=${FA3_DIR// /-}
  [[ -f .peers/fa3.tar.gz ]] || { echo "FA3: .peers/fa3.tar.gz not carried" >"$LOGS/fa3_build.log"; return; }
  ls "$FA3_DIR"/fa/hopper/flash_attn_3/_C*.so >/dev/null 2>&1 && return
  (MAX_JOBS=10 bash scripts/build_fa3_peer.sh .peers/fa3.tar.gz "$FA3_DIR" ${1:-} >"$LOGS/fa3_build.log" 2>&1) &
  FA3_PID=$!
}

build() {  # $1: build folder, $2: all | representative, $3...: more configure options
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=ON -DHOPATTN_SM90_KERNELS="$2" \
    -DHOPATTN_PTXAS_VERBOSE=ON "${@:3}" >"$LOGS/configure_$2.log" 2>&1 || { tail -30 "$LOGS/configure_$2.log"; exit 1; }
  cmake --build "$1" -j 12 >"$LOGS/build_$2.log" 2>&1 || { grep -E "error" "$LOGS/build_$2.log" | head -40; exit 1; }
  echo "== built $2 kernels (commit $commit)"
}

ptxas_report() {  # registers, spills and stack of every kernel, from this machine's build or DEVICE_BUILD's
  if [[ -n "${DEVICE_BUILD:-}" ]]; then
    cp "$DEVICE_BUILD/ptxas_report.txt" "$LOGS/"
  else
    grep -E "Compiling entry|Function properties|Used [0-9]+ registers|stack frame" "$LOGS/build_all.log" 2>/dev/null | sed 's/^ *//' >"$LOGS/ptxas_report.txt"
  fi
}

# The modes after `tests` reuse its build on a warm machine, or build it first.
build_once() { [[ -f build-device/src/libhopattn.so ]] || build build-device all; }

# A kernel that hangs must not take the whole call: each binary gets a bound well above its
# normal run (about a minute), and a binary that hit it is not run under the sanitizers.
hung=""
gpu_tests() {  # $1: build folder, $2: gtest filter; the forward's and the backward's binaries
  local binary name rc
  for name in test_sm90_forward test_sm90_backward test_sm90_fp8; do
    binary=$(find "$1" -name $name -type f | head -1)
    echo "== $name"
    timeout 240 "$binary" --gtest_filter="$2" >"$LOGS/${name}.log" 2>&1
    rc=$?
    ((rc == 0)) || status=1
    ((rc == 124)) && { hung="$hung $name"; echo "$name: timed out (hung?)"; }
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|FAILED  \]" "$LOGS/${name}.log" | head -40
  done
}

run_mode() {
case $1 in
quick)
  build build-quick representative
  gpu_tests build-quick '*bf16_d128*:Sm90Test.*:Sm90Backend.*'
  ;;
tests)
  [[ -n "${DEVICE_BUILD:-}" ]] || build build-device all
  ptxas_report
  echo "ptxas: $(grep -c 'Used' "$LOGS/ptxas_report.txt") kernels; spills/stack:"
  grep "stack frame" "$LOGS/ptxas_report.txt" | sort | uniq -c
  lib=$(find build-device -name 'libhopattn.so' | head -1)
  cuobjdump -sass "$lib" >"$LOGS/sass_full.txt" 2>&1
  echo "SASS: $(grep -c HGMMA "$LOGS/sass_full.txt") HGMMA, $(grep -c QGMMA "$LOGS/sass_full.txt") QGMMA, $(grep -cE '\bLDL|\bSTL' "$LOGS/sass_full.txt") LDL/STL"
  # The install tests need pkg-config and the wheel test PyPI, neither of which the device has;
  # CI runs both.
  if [[ -z "${DEVICE_BUILD:-}" ]]; then
    (cd build-device && timeout 300 ctest --output-on-failure -j 8 -LE "gpu|install") >"$LOGS/ctest.log" 2>&1 || status=1
    tail -3 "$LOGS/ctest.log"
  fi
  gpu_tests build-device '*'
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python
  pytest_filter=()
  [[ $hung == *test_sm90_backward* ]] && pytest_filter=(-k "not cuda")  # they would hang the same way
  HOPATTN_SKIP_WHEEL_TEST=1 timeout 180 python3 -m pytest -q tests/python "${pytest_filter[@]}" >"$LOGS/pytest.log" 2>&1 || status=1
  tail -3 "$LOGS/pytest.log"
  cli=$(find build-device -name hopattn-bench -type f | head -1)
  "$cli" | tee "$LOGS/cli_default.txt" || status=1
  ;;
sanitizers)
  build_once
  echo "== compute-sanitizer"
  binary=$(find build-device -name test_sm90_forward -type f | head -1)
  # Small shapes over every head_dim, both dtypes and masks: odd lengths, seqlen 1, GQA 2 and 8,
  # strided views, seqlen_q != seqlen_k both ways, varlen (with seqused_k), corrupted metadata,
  # NaN inputs, the rows computed again for extreme scores (exact_rows.cuh) and the host checks.
  small='ShapeMatrix/*bf16_d128_causal_sq17_*:ShapeMatrix/*bf16_d128_full_sq129_*:ShapeMatrix/*fp16_d256_causal_sq300_sk77_*:ShapeMatrix/*bf16_d64_causal_sq77_sk300_*'
  small+=':ShapeMatrix/*fp16_d96_full_sq127_*:ShapeMatrix/*bf16_d192_causal_sq1_*:ShapeMatrix/*fp16_d64_full_sq1_sk1000_*:ShapeMatrix/*bf16_d256_full_sq1000_sk129_*'
  small+=':VarlenMatrix/*bf16_d128_causal*:VarlenMatrix/*fp16_d64_full*:VarlenMatrix/*d192*:Sm90Test.Sm90VarlenMetadata*:Sm90Test.Sm90ExtremeValuesNaN*:Sm90Test.Sm90ExtremeValuesWithGroupedHeads*:Sm90Test.Sm90HostChecks*'
  backward=$(find build-device -name test_sm90_backward -type f | head -1)
  small_backward='ShapeMatrix/*bf16_d128_causal_sq17_*:ShapeMatrix/*bf16_d128_full_sq129_*:ShapeMatrix/*fp16_d64_full_sq300_sk77_*:ShapeMatrix/*bf16_d96_causal_sq77_sk300_*:ShapeMatrix/*d256_causal_sq300_sk77_*:ShapeMatrix/*fp16_d192_full_sq129_*:VarlenMatrix/*d128*:VarlenMatrix/*bf16_d256_causal*:Sm90Test.Sm90Backward*'
  fp8=$(find build-device -name test_sm90_fp8 -type f | head -1)
  small_fp8='Fp8Matrix/*d128_causal_sq129_*:Fp8Matrix/*d64_full_sq17_*:Fp8Matrix/*d256_causal_sq300_sk77_*:Sm90Fp8Test.*:*Sm90Quantize*bf16_d128_rot*'
  for tool in memcheck racecheck synccheck initcheck; do
    if [[ $hung != *test_sm90_forward* ]]; then
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$binary" --gtest_filter="$small" \
        >"$LOGS/sanitizer_$tool.log" 2>&1 || status=1
      echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer_$tool.log" | tail -1) ($(grep -c '^\[       OK' "$LOGS/sanitizer_$tool.log") tests ok)"
    fi
    if [[ $hung != *test_sm90_backward* ]]; then
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$backward" --gtest_filter="$small_backward" \
        >"$LOGS/sanitizer_backward_$tool.log" 2>&1 || status=1
      echo "$tool backward: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer_backward_$tool.log" | tail -1) ($(grep -c '^\[       OK' "$LOGS/sanitizer_backward_$tool.log") tests ok)"
    fi
    if [[ $hung != *test_sm90_fp8* ]]; then
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$fp8" --gtest_filter="$small_fp8" \
        >"$LOGS/sanitizer_fp8_$tool.log" 2>&1 || status=1
      echo "$tool fp8: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer_fp8_$tool.log" | tail -1) ($(grep -c '^\[       OK' "$LOGS/sanitizer_fp8_$tool.log") tests ok)"
    fi
  done
  ;;
bench)
  start_fa3_build "backward varlen"
  build_once
  [[ -n "${FA3_PID:-}" ]] && { wait "$FA3_PID"; tail -2 "$LOGS/fa3_build.log"; }
  lib=$(find build-device -name 'libhopattn.so' | head -1)
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python HOPATTN_COMMIT=$commit
  export HOPATTN_FA3_PATH=${FA3_DIR:-}/fa/hopper
  echo "== forward sweep"
  timeout 330 python3 bench/bench_forward.py --json "$LOGS/forward_h200.json" --plot "$LOGS/forward_h200.png" \
    2>"$LOGS/bench_progress.log" | tee "$LOGS/bench_table.txt" || status=1
  echo "== varlen"
  timeout 150 python3 bench/bench_varlen.py --json "$LOGS/varlen_h200.json" --plot "$LOGS/varlen_h200.png" \
    2>"$LOGS/varlen_progress.log" | tee "$LOGS/varlen_table.txt" || status=1
  ;;
bench-backward)
  start_fa3_build "backward varlen"
  build_once
  [[ -n "${FA3_PID:-}" ]] && { wait "$FA3_PID"; tail -2 "$LOGS/fa3_build.log"; }
  lib=$(find build-device -name 'libhopattn.so' | head -1)
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python HOPATTN_COMMIT=$commit
  export HOPATTN_FA3_PATH=${FA3_DIR:-}/fa/hopper
  echo "== backward sweep"
  timeout 400 python3 bench/bench_backward.py --json "$LOGS/backward_h200.json" --plot "$LOGS/backward_h200.png" \
    2>"$LOGS/backward_progress.log" | tee "$LOGS/backward_table.txt" || status=1
  ;;
fp8)
  start_fa3_build "fp8"
  build_once
  fp8_tests=$(find build-device -name test_sm90_fp8 -type f | head -1)
  echo "== test_sm90_fp8"
  # HOPATTN_FP8_TESTED=1: the tests mode just ran them on this build (device_check.sh tests).
  [[ ${HOPATTN_FP8_TESTED:-0} == 1 ]] && fp8_tests=true
  timeout 300 "$fp8_tests" >"$LOGS/test_sm90_fp8.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|FAILED  \]|Failure|Expected|Which is|rel " "$LOGS/test_sm90_fp8.log" \
    | grep -v "^\[ sm90 fp8 \]" | head -40
  # One line per case and V layout; the case's name is field 5, its error follows "rel" (the layout
  # before it is one or three words).
  awk '/^\[ sm90 fp8 \]/ {n++; for (i = 6; i < NF; i++) if ($i == "rel" && $(i + 1) + 0 > worst) {worst = $(i + 1) + 0; name = $5}}
       END {print n " FP8 results (a case in one V layout each), largest relative error " worst " (" name ")"}' \
    "$LOGS/test_sm90_fp8.log"
  lib=$(find build-device -name 'libhopattn.so' | head -1)
  ptxas_report
  cuobjdump -sass "$lib" >"$LOGS/sass_full.txt" 2>&1
  echo "SASS: $(grep -c QGMMA "$LOGS/sass_full.txt") QGMMA, $(grep -cE '\bLDL|\bSTL' "$LOGS/sass_full.txt") LDL/STL"
  # cuDNN's FP8 peer: the frontend wheel carried in .peers/wheels, cuDNN itself from torch's package.
  python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-frontend .peers/wheels/nvidia_cudnn_frontend-*.whl \
    >"$LOGS/cudnn_frontend_install.log" 2>&1 || echo "cudnn-frontend: install failed"
  cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), 'lib'))" 2>/dev/null)
  [[ -n "${FA3_PID:-}" ]] && { wait "$FA3_PID"; tail -2 "$LOGS/fa3_build.log"; }
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python:/tmp/cudnn-frontend HOPATTN_COMMIT=$commit
  export HOPATTN_FA3_PATH=${FA3_DIR:-}/fa/hopper LD_LIBRARY_PATH=${cudnn_lib:-}:${LD_LIBRARY_PATH:-}
  echo "== FP8 sweep"
  timeout 300 python3 bench/bench_fp8.py --json "$LOGS/fp8_h200.json" --plot "$LOGS/fp8_h200.png" \
    2>"$LOGS/fp8_progress.log" | tee "$LOGS/fp8_table.txt" || status=1
  tail -5 "$LOGS/fp8_progress.log"
  ;;
profile)
  # FA3's build with the features the pass needs and, unless PROFILE_LIBRARY names one or `tests`
  # built every kernel on this machine, the representative kernels (head_dim 128, PROFILE_ARGS'
  # default) only: a profile fits one call.
  read -r -a point <<<"${PROFILE_ARGS:---head-dim 128 --seqlen 8192 --causal}"
  backward=false  # bench/profile_kernel.py takes no abbreviated options: these are its two spellings
  for ((i = 0; i < ${#point[@]}; ++i)); do
    [[ ${point[i]} == --pass=backward || (${point[i]} == --pass && ${point[i + 1]:-} == backward) ]] && backward=true
  done
  fa3_features=  # FP8 points need FA3's FP8 build (the fp8 mode's, when this machine has it)
  [[ " ${point[*]} " == *" --dtype e4m3 "* ]] && fa3_features=fp8
  if $backward; then start_fa3_build "backward varlen"; else start_fa3_build $fa3_features; fi
  if [[ -n "${PROFILE_LIBRARY:-}" ]]; then
    lib=$(realpath "$PROFILE_LIBRARY")
  else
    profiled=build-device
    [[ -f build-device/src/libhopattn.so ]] || { profiled=build-quick; build build-quick representative; }
    lib=$PWD/$(find "$profiled" -name 'libhopattn.so' | head -1)
  fi
  [[ -n "${FA3_PID:-}" ]] && { wait "$FA3_PID"; tail -2 "$LOGS/fa3_build.log"; }
  export HOPATTN_LIBRARY=$lib PYTHONPATH=$PWD/python HOPATTN_FA3_PATH=${FA3_DIR:-}/fa/hopper
  # PROFILE_SECTIONS: more ncu sections, each a replay more (the details page holds what they
  # print; MemoryWorkloadAnalysis_Tables printed only its rules' advice).
  sections="--section SpeedOfLight --section WarpStateStats --section SourceCounters"
  for section in ${PROFILE_SECTIONS:-}; do sections+=" --section $section"; done
  for impl in hopattn fa3; do
    if $backward; then
      kernel=BackwardKernel
      [[ $impl == fa3 ]] && kernel=FlashAttnBwdSm90
    else
      kernel=ForwardKernel
      [[ $impl == fa3 ]] && kernel=FlashAttnFwd
    fi
    echo "== $impl ${point[*]}"
    # The last of three launches, clocks as the benchmarks leave them; the report stays out of the
    # returned logs (tens of MB), its pages go in.
    report=$(mktemp -d)/profile_$impl
    timeout 240 ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$kernel" \
      --launch-skip 2 --launch-count 1 $sections -o "$report" \
      python3 bench/profile_kernel.py --impl "$impl" "${point[@]}" >"$LOGS/profile_$impl.log" 2>&1 || status=1
    ncu -i "$report.ncu-rep" --page details >"$LOGS/details_$impl.txt" 2>&1
    grep -E "Duration|SM Frequency|Elapsed Cycles|Executed Ipc Active|highest-utilized" "$LOGS/details_$impl.txt"
    ncu -i "$report.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$LOGS/source_$impl.csv.gz"
    python3 bench/ncu_source.py hot "$LOGS/source_$impl.csv.gz" >"$LOGS/hot_$impl.txt" 2>&1 || status=1
    head -4 "$LOGS/hot_$impl.txt"
  done
  ;;
timeline)
  if [[ -n "${TIMELINE_LIBRARY:-}" ]]; then
    lib=$(realpath "$TIMELINE_LIBRARY")
  else
    build build-timeline representative -DHOPATTN_TIMELINE=ON
    lib=$PWD/$(find build-timeline -name 'libhopattn.so' | head -1)
  fi
  export HOPATTN_LIBRARY=$lib PYTHONPATH=$PWD/python HOPATTN_COMMIT=$commit
  IFS=';' read -r -a points <<<"${TIMELINE_POINTS:---head-dim 128 --seqlen 8192;--head-dim 128 --seqlen 8192 --causal}"
  for point in "${points[@]}"; do
    read -r -a arguments <<<"$point"
    name=timeline$(tr -c 'a-z0-9' '_' <<<"$point" | sed 's/_*$//; s/__*/_/g')
    echo "== timeline $point"
    timeout 120 python3 bench/timeline.py "${arguments[@]}" --json "$LOGS/$name.json" --png "$LOGS/$name.png" \
      2>&1 | tee "$LOGS/$name.txt" || status=1
  done
  ;;
*) echo "unknown mode $1 (allowed: quick tests sanitizers bench bench-backward fp8 profile timeline all)" >&2; exit 2 ;;
esac
}

if [[ $mode == all ]]; then
  run_mode tests
  run_mode sanitizers
  run_mode bench
  [[ $hung == *test_sm90_backward* ]] || run_mode bench-backward
else
  run_mode "$mode"
fi
exit $status
