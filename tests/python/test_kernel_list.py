"""src/sm90/instantiations/generate.py, the list of SM90 kernels a build holds: what a build of all
kernels, the representative build (CI's) and an A/B build of named kernels (--only) generate, and
the error for a name it does not know. Runs the generator as CMake does, no CUDA needed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

GENERATOR = Path(__file__).resolve().parents[2] / "src" / "sm90" / "instantiations" / "generate.py"


def generate(out_dir, *args):
    """(translation units it lists, their kernel-table entries as (table, dtype, head_dim))."""
    run = subprocess.run([sys.executable, str(GENERATOR), str(out_dir), *args],
                         capture_output=True, text=True, check=True)
    units = [Path(p).name for p in run.stdout.strip().split(";")]
    table = (out_dir / "kernel_table.cu").read_text()
    entries = []
    for name, body in re.findall(r"const KernelEntry<\w+> (\w+)\[\] = \{(.*?)\n\};", table, re.S):
        entries += [(name, dtype, int(head_dim))
                    for dtype, head_dim in re.findall(r"\{DType::(\w+), (\d+), &", body)]
    return units, entries


def test_all_kernels_cover_every_operation_dtype_and_head_dim(tmp_path):
    units, entries = generate(tmp_path)
    assert units[-1] == "kernel_table.cu"
    expected = {"kForwardKernels": [64, 96, 128, 192, 256], "kBackwardKernels": [64, 96, 128, 192, 256],
                "kForwardFp8Kernels": [64, 128, 256]}
    for table, head_dims in expected.items():
        for dtype in ("kBFloat16", "kFloat16"):
            assert sorted(h for t, d, h in entries if t == table and d == dtype) == head_dims, (table, dtype)
    assert len(units) - 1 == len(entries) == 26


def test_representative_build_has_one_kernel_per_operation(tmp_path):
    units, entries = generate(tmp_path, "--representative")
    assert units == ["forward_bf16_hdim128.cu", "backward_bf16_hdim128.cu", "forward_fp8_bf16_hdim128.cu",
                     "kernel_table.cu"]
    assert {(d, h) for _, d, h in entries} == {("kBFloat16", 128)}


def test_only_keeps_the_named_kernels_and_removes_stale_units(tmp_path):
    generate(tmp_path)
    units, entries = generate(tmp_path, "--only", "forward_fp8_bf16_hdim256,backward_fp16_hdim192")
    assert sorted(units) == ["backward_fp16_hdim192.cu", "forward_fp8_bf16_hdim256.cu", "kernel_table.cu"]
    assert sorted(p.name for p in tmp_path.glob("*.cu")) == sorted(units)
    assert sorted(entries) == [("kBackwardKernels", "kFloat16", 192), ("kForwardFp8Kernels", "kBFloat16", 256)]
    # An operation without kernels keeps a placeholder its count excludes.
    assert "const int kForwardKernelCount = 0;" in (tmp_path / "kernel_table.cu").read_text()


def test_only_refuses_unknown_names_with_the_allowed_list(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as error:
        generate(tmp_path, "--only", "forward_bf16_hdim100")
    assert "unknown kernels ['forward_bf16_hdim100']" in error.value.stderr
    assert "forward_bf16_hdim128" in error.value.stderr
