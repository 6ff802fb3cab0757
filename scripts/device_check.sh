#!/usr/bin/env bash
# One call on the GPU machine: build, resource report, SASS excerpt, every test, compute-sanitizer on
# small shapes, the CLI's default run and the side-by-side benchmark. Logs go to $OUT/logs.tar.gz
# (the device returns few files), the benchmark's JSON and PNG beside it; the last lines printed
# are the summary tables.
#   usage: scripts/device_check.sh [--skip-bench] [--skip-tests]   (carry .deps: the CUTLASS headers)
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${OUT:-$PWD/device-out}
OUT=$(mktemp -d)/logs
mkdir -p "$OUT" "$RESULTS"
trap 'cp "$OUT"/forward_h200.* "$RESULTS"/ 2>/dev/null; tar czf "$RESULTS/logs.tar.gz" -C "$(dirname "$OUT")" logs' EXIT
run_bench=1 run_tests=1
for arg in "$@"; do
  case $arg in
    --skip-bench) run_bench=0 ;;
    --skip-tests) run_tests=0 ;;
    *) echo "unknown option $arg (allowed: --skip-bench --skip-tests)" >&2; exit 2 ;;
  esac
done
BUILD=build-device
commit=${HOPATTN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

echo "== build (commit $commit)"
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=ON \
  -DHOPATTN_PTXAS_VERBOSE=ON >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $BUILD -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }

# ptxas resource report of every kernel: registers, stack frame, spills.
grep -E "Compiling entry|Used [0-9]+ registers|stack frame" "$OUT/build.log" \
  | sed 's/^ *//' >"$OUT/ptxas_report.txt"
echo "ptxas: $(grep -c 'Used' "$OUT/ptxas_report.txt") kernels; spills/stack:"
grep "stack frame" "$OUT/ptxas_report.txt" | sort | uniq -c
lib=$(find $BUILD -name 'libhopattn.so' | head -1)
cuobjdump -sass "$lib" >"$OUT/sass_full.txt" 2>&1
echo "SASS: $(grep -c HGMMA "$OUT/sass_full.txt") HGMMA, $(grep -cE '\bLDL|\bSTL' "$OUT/sass_full.txt") LDL/STL"

if [ $run_tests = 1 ]; then
  echo "== tests"
  (cd $BUILD && ctest --output-on-failure -j 8 --timeout 900 -LE gpu) >"$OUT/ctest.log" 2>&1 || status=1
  tail -5 "$OUT/ctest.log"
  gpu_test=$(find $BUILD -name test_sm90_forward -type f | head -1)
  "$gpu_test" >"$OUT/gpu_tests.log" 2>&1 || status=1  # the gpu label, run once here for its log
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$OUT/gpu_tests.log"
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python
  python3 -m pytest -q tests/python >"$OUT/pytest.log" 2>&1 || status=1
  tail -3 "$OUT/pytest.log"

  echo "== compute-sanitizer"
  small='ShapeMatrix/Sm90Forward.MatchesFloat64Reference/bf16_d128_causal_sq17_*:ShapeMatrix/Sm90Forward.MatchesFloat64Reference/bf16_d128_full_sq129_*:ShapeMatrix/Sm90Forward.MatchesFloat64Reference/fp16_d256_causal_sq300_sk77_*:ShapeMatrix/Sm90Forward.MatchesFloat64Reference/bf16_d64_causal_sq77_sk300_*'
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$gpu_test" --gtest_filter="$small" \
      >"$OUT/sanitizer_$tool.log" 2>&1 || status=1
    echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1) ($(grep -c '^\[       OK' "$OUT/sanitizer_$tool.log") tests ok)"
  done

  echo "== CLI default run"
  cli=$(find $BUILD -name hopattn-bench -type f | head -1)
  "$cli" | tee "$OUT/cli_default.txt" || status=1
fi

if [ $run_bench = 1 ]; then
  echo "== benchmark"
  export HOPATTN_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python HOPATTN_COMMIT=$commit
  timeout 300 python3 bench/bench_forward.py --json "$OUT/forward_h200.json" --plot "$OUT/forward_h200.png" \
    2>"$OUT/bench_progress.log" | tee "$OUT/bench_table.txt" || status=1
fi
exit $status
