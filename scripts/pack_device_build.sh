#!/usr/bin/env bash
# Builds every kernel on this machine's CPUs (no GPU needed; about 15 minutes on two cores) and packs
# what the GPU machine runs into DIR: libhopattn.so.0, the three GPU test binaries, the CLI, the
# ptxas report and the commit. Carried to the device, `DEVICE_BUILD=DIR scripts/device_check.sh
# tests` (or any mode) then runs them instead of building there, which saves the 250-300 s of
# device time that building every kernel costs.
#   usage: scripts/pack_device_build.sh DIR   (BUILD: the build folder, default build-all; JOBS: 2)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/pack_device_build.sh DIR}
build=${BUILD:-build-all}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPATTN_ENABLE_CUDA=ON -DHOPATTN_SM90_KERNELS=all \
  -DHOPATTN_PTXAS_VERBOSE=ON >/dev/null
# The log keeps every run's (appended): ptxas reports only what a run compiles, so an incremental
# build, or one cut short, leaves the other kernels' reports in the earlier runs' lines.
cmake --build "$build" -j "${JOBS:-2}" >>"$build/pack_build.log" 2>&1 ||
  { tail -200 "$build/pack_build.log" | grep -E "error|FAILED" | head -20; echo "pack_device_build.sh: the build failed" >&2; exit 1; }
# Each kernel's last report in the log.
python3 - "$build/pack_build.log" "$build/ptxas_report.txt" <<'LATEST'
import re, sys
from pathlib import Path
reports, name = {}, None
for line in Path(sys.argv[1]).read_text(errors="replace").splitlines():
    line = line.strip()
    if "Compiling entry" in line:
        name = line
        reports[name] = []
    if name and re.search(r"Compiling entry|Function properties|Used [0-9]+ registers|stack frame", line):
        reports[name].append(line)
Path(sys.argv[2]).write_text("".join(line + "\n" for lines in reports.values() for line in lines))
LATEST
rm -rf "$out" && mkdir -p "$out"
cp -L "$build/src/libhopattn.so.0" "$out/"
for binary in tests/gpu/test_sm90_forward tests/gpu/test_sm90_backward tests/gpu/test_sm90_fp8 tools/hopattn-bench; do
  cp "$build/$binary" "$out/"
done
strip --strip-debug "$out"/*
cp "$build/ptxas_report.txt" "$out/"
{ git rev-parse --short HEAD; git status --short --untracked-files=no | sed 's/^/modified: /'; } >"$out/COMMIT"
du -sh "$out"
