#!/usr/bin/env bash
# The sanitizer and fuzzer stages of CI (issue 10), run by scripts/test.sh when CI=true or
# HOPATTN_SANITIZERS=1, or alone. CPU only, each in its own build folder beside build/:
#   asan   build-asan/: the CPU test suites under AddressSanitizer + UBSan (GCC), every finding
#          fatal (-fno-sanitize-recover=all, halt_on_error=1); the install tests are left out.
#   tsan   build-tsan/: ThreadSanitizer over the thread pool's tests and callers on several
#          threads at once (the fork tests are left out: TSan refuses threads after a fork).
#   fuzz   build-fuzz/: the libFuzzer harness of the C ABI (clang, ASan + UBSan) for
#          HOPATTN_FUZZ_SECONDS (default 60) over tests/fuzz/corpus, new inputs to a temporary
#          folder; prints its call and outcome counts. A finding leaves its input in build-fuzz/.
#
#   scripts/sanitize.sh [asan] [tsan] [fuzz]     (default: all three)
# Quiet like scripts/test.sh: a stage prints a line and its time, or its failure in full.
set -euo pipefail
exec 1>&2

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stages=("$@")
((${#stages[@]})) || stages=(asan tsan fuzz)
jobs="$(nproc)"
status=0

log() { printf '[sanitize] %s\n' "$*"; }

# configure DIR COMPILER_ENV... -- CMAKE_ARGS...: configures DIR once per set of arguments.
configure() {
  local dir="$1" stamp args
  shift
  args=(-S "$REPO" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=OFF
        -DHOPATTN_BUILD_TOOLS=OFF "$@")
  stamp="$dir/.hopattn-configure-args"
  [[ -f "$dir/build.ninja" && -f "$stamp" && "$(cat "$stamp")" == "${args[*]}" ]] && return
  rm -f "$stamp"
  cmake --log-level=WARNING "${args[@]}" |
    { grep -Ev '^-- (Configuring done|Generating done|Build files have been written to|hopattn: built with)' || true; }
  echo "${args[*]}" >"$stamp"
}

build() {  # build DIR [TARGETS...]
  local dir="$1"
  shift
  local targets=()
  (($#)) && targets=(--target "$@")
  cmake --build "$dir" --parallel "$jobs" "${targets[@]}" -- --quiet |
    { grep -v '^ninja: no work to do\.$' || true; }
}

# Runs "$@" with its output kept in a log; prints the log only when it fails.
quietly() {
  local log="$1"
  shift
  if "$@" >"$log" 2>&1; then return 0; fi
  tail -n 80 "$log"
  log "FAILED: $* (full log: $log)"
  return 1
}

stage_asan() {
  local dir="$REPO/build-asan"
  configure "$dir" -DHOPATTN_SANITIZE=address,undefined
  build "$dir"
  # The install tests configure and build outside this build's flags; they run in build/. The
  # forks taken while another thread runs jobs or creates the pool hang their children under GCC
  # 12's libasan (the sanitizer's allocator is not locked across fork(), so the child can inherit
  # its lock held); those tests run in the plain build.
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    quietly "$dir/ctest.log" ctest --test-dir "$dir" --output-on-failure --parallel "$jobs" \
      --exclude-regex "^install\\.|^ThreadPoolFork\\.ForkWhileAnotherThreadRunsJobs$|^ThreadPoolForkDuringCreation$" --timeout 300 || return 1
  log "asan+ubsan: $(grep -Eo '[0-9]+% tests passed.*' "$dir/ctest.log")"
}

stage_tsan() {
  local dir="$REPO/build-tsan"
  configure "$dir" -DHOPATTN_SANITIZE=thread -DHOPATTN_BUILD_EXAMPLES=OFF
  build "$dir" hopattn_internal_tests hopattn_cpu_tests hopattn_concurrent_calls_test
  # setarch -R: GCC 12's TSan cannot map its shadow under the high ASLR entropy of newer kernels.
  local norandom=()
  command -v setarch >/dev/null && setarch -R true 2>/dev/null && norandom=(setarch -R)
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 HOPATTN_NUM_THREADS=4
  quietly "$dir/tsan.log" bash -c '
    "$@" "$0/tests/cpu/hopattn_internal_tests" --gtest_filter="ThreadPool.*:ThreadCount.*" &&
    "$@" "$0/tests/cpu/hopattn_cpu_tests" --gtest_filter="*Concurrent*:CpuForward.*Causal*" &&
    "$@" "$0/tests/concurrency/hopattn_concurrent_calls_test"' "$dir" "${norandom[@]}" || return 1
  log "tsan: $(grep -c '^\[       OK \]' "$dir/tsan.log") tests passed, no race reported"
}

stage_fuzz() {
  local dir="$REPO/build-fuzz" seconds="${HOPATTN_FUZZ_SECONDS:-60}"
  if ! command -v clang++ >/dev/null; then
    log "FAILED: fuzz: clang++ not found (scripts/setup.sh installs clang)"
    return 1
  fi
  CC=clang CXX=clang++ configure "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DHOPATTN_BUILD_TESTS=OFF -DHOPATTN_BUILD_EXAMPLES=OFF -DHOPATTN_BUILD_FUZZER=ON \
    -DHOPATTN_SANITIZE=address,undefined,fuzzer-no-link
  build "$dir" hopattn_fuzz_c_abi
  local new_inputs
  new_inputs="$(mktemp -d)"
  # One process; inputs the corpus lacks go to a temporary folder, not into the repository.
  (cd "$dir" && ASAN_OPTIONS=halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    quietly "$dir/fuzz.log" "$dir/tests/fuzz/hopattn_fuzz_c_abi" -max_total_time="$seconds" \
      -timeout=20 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
      "$new_inputs" "$REPO/tests/fuzz/corpus") || { rm -rf "$new_inputs"; return 1; }
  rm -rf "$new_inputs"
  log "fuzz: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second\(s\)' "$dir/fuzz.log")," \
      "corpus $(ls "$REPO/tests/fuzz/corpus" | wc -l) files, no finding"
  # The outcome counts on one line (the table is in fuzz.log), so test.sh stays short.
  log "fuzz: $(grep '^\[fuzz\]' "$dir/fuzz.log" | sed 's/^\[fuzz\] *//; s/  */ /g' | paste -sd ';' - | sed 's/:;/: /; s/;/; /g; s/;  /; /g')"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    asan | tsan | fuzz) ;;
    *) echo "usage: scripts/sanitize.sh [asan] [tsan] [fuzz]" >&2; exit 2 ;;
  esac
  start=$SECONDS
  log "$stage ..."
  "stage_$stage" || status=1
  log "$stage: $((SECONDS - start)) s"
done
exit "$status"
