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
cmake --build "$build" -j "${JOBS:-2}" >"$build/pack_build.log" 2>&1 ||
  { grep -E "error|FAILED" "$build/pack_build.log" | head -20; echo "pack_device_build.sh: the build failed" >&2; exit 1; }
# ptxas reports only what a build compiles: each kernel's lines in the folder's report are replaced
# by this build's, so that an incremental build still reports every kernel.
python3 - "$build/pack_build.log" "$build/ptxas_report.txt" <<'MERGE'
import re, sys
from pathlib import Path
log, report = Path(sys.argv[1]), Path(sys.argv[2])
def entries(lines):
    blocks, name = {}, None
    for line in lines:
        line = line.strip()
        if "Compiling entry" in line:
            name = line
        if name and re.search(r"Compiling entry|Function properties|Used [0-9]+ registers|stack frame", line):
            blocks.setdefault(name, []).append(line)
    return blocks
merged = entries(report.read_text().splitlines()) if report.exists() else {}
merged.update(entries(log.read_text(errors="replace").splitlines()))
report.write_text("".join(line + "\n" for block in merged.values() for line in block))
MERGE
rm -rf "$out" && mkdir -p "$out"
cp -L "$build/src/libhopattn.so.0" "$out/"
for binary in tests/gpu/test_sm90_forward tests/gpu/test_sm90_backward tests/gpu/test_sm90_fp8 tools/hopattn-bench; do
  cp "$build/$binary" "$out/"
done
strip --strip-debug "$out"/*
cp "$build/ptxas_report.txt" "$out/"
{ git rev-parse --short HEAD; git status --short --untracked-files=no | sed 's/^/modified: /'; } >"$out/COMMIT"
du -sh "$out"
