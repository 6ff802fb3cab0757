#!/usr/bin/env bash
# cmake/fail_on_serialised_wgmma.sh against this toolchain's ptxas (no GPU needed): the kernel of
# serialised_wgmma.cu must compile clean through the launcher, and fail, naming the kernel and
# leaving no object, once it writes its accumulator while a WGMMA is in flight. A change in ptxas's
# wording would otherwise turn the launcher into a silent no-op.
#   usage: serialised_wgmma_check.sh LAUNCHER NVCC CUTLASS_INCLUDE SOURCE WORK_DIR
set -uo pipefail
launcher=$1 nvcc=$2 cutlass=$3 source=$4 work=$5
mkdir -p "$work"
compile() {  # $1: the object, $2...: more nvcc options
  local object=$1
  rm -f "$object"
  bash "$launcher" "$nvcc" -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -isystem "$cutlass" "${@:2}" -c "$source" -o "$object" 2>&1
}
output=$(compile "$work/clean.o")
status=$?
if ((status != 0)) || [[ ! -f $work/clean.o ]]; then
  printf '%s\n' "$output"
  echo "FAIL: the clean kernel did not compile through the launcher (exit $status)"
  exit 1
fi
output=$(compile "$work/serialised.o" -DWRITE_ACCUMULATOR_IN_FLIGHT)
status=$?
if ((status != 1)) || [[ -f $work/serialised.o ]] || [[ $output != *"error: ptxas serialised the WGMMAs of function '"*two_qgmmas* ]]; then
  printf '%s\n' "$output"
  echo "FAIL: the serialising kernel was not stopped (exit $status; object left: $([[ -f $work/serialised.o ]] && echo yes || echo no))"
  exit 1
fi
echo "ok: clean kernel compiled; the serialising one failed, named and without its object"
