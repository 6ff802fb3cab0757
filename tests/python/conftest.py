import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # optional: bfloat16 NumPy cases are skipped without it
    ml_dtypes = None

BFLOAT16 = None if ml_dtypes is None else np.dtype(ml_dtypes.bfloat16)

# Max abs error allowed per input dtype, for N(0,1) inputs and outputs of magnitude < ~1:
# float32 accumulates in float32; the half types are also rounded on output (8 and 11 bits).
ATOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def dtype_params():
    """float32, float16 and, when ml_dtypes is installed, bfloat16, as pytest params."""
    bf16 = pytest.param(BFLOAT16, id="bfloat16", marks=pytest.mark.skipif(
        BFLOAT16 is None, reason="ml_dtypes is not installed, so NumPy has no bfloat16"))
    return [pytest.param(np.dtype(np.float32), id="float32"),
            pytest.param(np.dtype(np.float16), id="float16"), bf16]


def random_qkv(rng, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype):
    q = rng.standard_normal((batch, seqlen_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, seqlen_k, heads_kv, head_dim)).astype(dtype)
    return q, k, v


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def cu_seqlens(lengths):
    """int32 prefix sums 0, l0, l0 + l1, ... of a list of lengths (the varlen layout's metadata)."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def hopper_skip_reason(torch):
    """Why the CUDA tests cannot run here, or None when a Hopper GPU and an SM90 build are there."""
    import hopattn

    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        return f"CUDA device is sm_{''.join(map(str, capability))}, not Hopper"
    if not hopattn.backend_available("sm90"):
        return "this libhopattn build has no SM90 backend: " + hopattn.build_info()
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "wheel: builds and installs the wheel (about 15 s); HOPATTN_SKIP_WHEEL_TEST=1 "
                   "skips it outside CI")
