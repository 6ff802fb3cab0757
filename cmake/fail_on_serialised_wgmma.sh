#!/usr/bin/env bash
# The compiler launcher of the SM90 kernels (src/sm90/CMakeLists.txt): runs the compile it is given
# and fails it when ptxas says it serialised a kernel's WGMMAs ("wgmma.mma_async instructions are
# serialized", code C7511 or a sibling, one per reason). ptxas reports that as information and goes
# on, and the kernel then waits after every WGMMA, a loss that nothing but a GPU run would show
# (performance log, 2026-12-05 eleventh: an accumulator write in the key loop did it to every FP8
# kernel).
#   usage: fail_on_serialised_wgmma.sh COMPILER ARGS...
set -uo pipefail
messages=$(mktemp) || exit 1
trap 'rm -f "$messages"' EXIT
# The compile's messages come out once it ends (a kernel's take a minute or two), then are read.
"$@" 2>"$messages"
status=$?
cat "$messages" >&2
serialised="wgmma.mma_async instructions are serialized"
if ((status == 0)) && grep -qF "$serialised" "$messages"; then
  echo "error: ptxas serialised the WGMMAs of $(grep -F "$serialised" "$messages" | grep -o "function '[^']*'" |
    sort -u | tr '\n' ' ')(the reason is in its message above); the object is removed" >&2
  previous=""
  # The object (CMake passes it as `-o FILE`), so that the next build compiles it again.
  for argument in "$@"; do
    [[ $previous == -o ]] && rm -f "$argument"
    previous=$argument
  done
  exit 1
fi
exit $status
