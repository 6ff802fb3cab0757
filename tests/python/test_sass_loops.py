"""bench/sass_loops.py on a cuobjdump listing (CPU only): the control codes of real sm_90a
encodings decode as ptxas set them, and a backward branch is read as a loop."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sass_loops  # noqa: E402

# The first lines of a head_dim-128 forward kernel as cuobjdump -sass prints them (encodings
# unchanged), then a MUFU and a branch back to the S2R with encodings written for the test.
LISTING = """
\tcode for sm_90a
\t\tFunction : kernel_a
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
                                                                            /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                       /* 0x0000000000007919 */
                                                                            /* 0x000e620000002100 */
        /*0020*/                   ISETP.NE.AND P1, PT, R0, RZ, PT ;        /* 0x000000ff0000720c */
                                                                            /* 0x002fe40003f25270 */
        /*0030*/                   MUFU.EX2 R2, R0 ;                        /* 0x0000000000027308 */
                                                                            /* 0x000f660000000800 */
        /*0040*/               @P1 BRA 0x10 ;                               /* 0x0000000000781947 */
                                                                            /* 0x001fea0003800000 */
\t\tFunction : kernel_b
        /*0000*/                   EXIT ;                                   /* 0x000000000000794d */
                                                                            /* 0x000fea0003800000 */
"""


def kernel_a():
    return sass_loops.read_sass(LISTING.splitlines())["kernel_a"]


def test_the_control_codes_decode_as_ptxas_set_them():
    ldc, s2r, isetp, mufu, bra = kernel_a()
    assert (ldc["stall"], ldc["write"], ldc["wait"]) == (1, 7, 0)
    # S2R's result is variable-latency: it sets write scoreboard 1, and ISETP, which reads R0,
    # waits on that one (wait mask bit 1) after a 2-cycle stall.
    assert (s2r["stall"], s2r["write"]) == (1, 1)
    assert (isetp["stall"], isetp["wait"]) == (2, 1 << 1)
    assert (mufu["stall"], mufu["write"], mufu["read"]) == (3, 5, 7)
    assert (bra["opcode"], bra["stall"], bra["wait"]) == ("BRA", 5, 1 << 0)


def test_a_backward_branch_is_a_loop_with_its_summary():
    instructions = kernel_a()
    assert sass_loops.loops(instructions) == [(0x10, 0x40)]
    body = sass_loops.span(instructions, 0x10, 0x40)
    summary = sass_loops.summary(body, ["MUFU", "ISETP", "HGMMA"])
    assert summary == dict(instructions=4, ops=dict(MUFU=1, ISETP=1, HGMMA=0), stall_cycles=1 + 2 + 3 + 5,
                           waiting=2)


def test_each_kernel_is_read_apart():
    kernels = sass_loops.read_sass(LISTING.splitlines())
    assert list(kernels) == ["kernel_a", "kernel_b"]
    assert [i["opcode"] for i in kernels["kernel_b"]] == ["EXIT"]
    assert sass_loops.loops(kernels["kernel_b"]) == []
