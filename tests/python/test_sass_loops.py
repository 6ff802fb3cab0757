"""bench/sass_loops.py on a cuobjdump listing (CPU only): the control codes of real sm_90a
encodings decode as ptxas set them, and a backward branch is read as a loop."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sass_loops  # noqa: E402

# Lines of a head_dim-128 forward kernel as cuobjdump -sass prints them (encodings unchanged, the
# addresses renumbered): its first three, an exponential and its key loop's closing branch, then,
# after the EXIT, an out-of-line barrier retry with its branch back into the kernel.
LISTING = """
\tcode for sm_90a
\t\tFunction : kernel_a
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
                                                                            /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                       /* 0x0000000000007919 */
                                                                            /* 0x000e620000002100 */
        /*0020*/                   ISETP.NE.AND P1, PT, R0, RZ, PT ;        /* 0x000000ff0000720c */
                                                                            /* 0x002fe40003f25270 */
        /*0030*/                   MUFU.EX2 R19, R19 ;                      /* 0x0000001300137308 */
                                                                            /* 0x000e620000000800 */
        /*0040*/               @P0 BRA 0x10 ;                               /* 0xffffffd000280947 */
                                                                            /* 0x000fec000383ffff */
        /*0050*/                   EXIT ;                                   /* 0x000000000000794d */
                                                                            /* 0x000fea0003800000 */
        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R15+URZ+0x28008], R12 ; /* 0x0280080c0f0075a7 */
                                                                            /* 0x0002a6000800017f */
        /*0070*/              @!P0 BRA 0x60 ;                               /* 0xfffffffc00ec8947 */
                                                                            /* 0x004fea000383ffff */
        /*0080*/                   BRA 0x20 ;                               /* 0xfffffee800587947 */
                                                                            /* 0x000fea000383ffff */
\t\tFunction : kernel_b
        /*0000*/                   EXIT ;                                   /* 0x000000000000794d */
                                                                            /* 0x000fea0003800000 */
"""

def kernel_a():
    return sass_loops.read_sass(LISTING.splitlines())["kernel_a"]


def test_the_control_codes_decode_as_ptxas_set_them():
    ldc, s2r, isetp, mufu, bra = kernel_a()[:5]
    assert (ldc["stall"], ldc["write"], ldc["wait"]) == (1, 7, 0)
    # S2R's result is variable-latency: it sets write scoreboard 1, and ISETP, which reads R0,
    # waits on that one (wait mask bit 1) after a 2-cycle stall.
    assert (s2r["stall"], s2r["write"]) == (1, 1)
    assert (isetp["stall"], isetp["wait"]) == (2, 1 << 1)
    assert (mufu["opcode"], mufu["stall"], mufu["write"], mufu["read"]) == ("MUFU.EX2", 1, 1, 7)
    assert (bra["opcode"], bra["stall"], bra["write"], bra["wait"]) == ("BRA", 6, 7, 0)


def test_a_backward_branch_is_a_loop_and_an_out_of_line_retry_is_not():
    instructions = kernel_a()
    # The retry's own branch back (0x70 -> 0x60) is a loop; its branch into the kernel (0x80 -> 0x20) is not.
    assert sass_loops.loops(instructions) == [(0x10, 0x40), (0x60, 0x70)]
    body = sass_loops.span(instructions, 0x10, 0x40)
    summary = sass_loops.summary(body, ["MUFU", "ISETP", "HGMMA"])
    assert summary == dict(instructions=4, ops=dict(MUFU=1, ISETP=1, HGMMA=0), stall_cycles=1 + 2 + 1 + 6,
                           waiting=1)


def test_each_kernel_is_read_apart():
    kernels = sass_loops.read_sass(LISTING.splitlines())
    assert list(kernels) == ["kernel_a", "kernel_b"]
    assert [i["opcode"] for i in kernels["kernel_b"]] == ["EXIT"]
    assert sass_loops.loops(kernels["kernel_b"]) == []


def test_an_nsight_compute_page_finds_the_same_loops():
    # ncu_source.py reads (address, SASS, samples, executions, stalls) rows and shares the rule.
    import ncu_source
    page = [(i["address"], i["text"], 1.0, 2.0, {}) for i in kernel_a()]
    assert [(lo, hi) for _, lo, hi, *_ in ncu_source.backward_branches(page)] == [(0x10, 0x40), (0x60, 0x70)]
