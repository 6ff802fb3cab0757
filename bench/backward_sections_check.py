#!/usr/bin/env python3
"""Large causal backward calls whose grid (tile_order.hpp) has several sections, on a GPU: dq, dk, dv
against a float32 math reference beside SDPA-FA2's, NaN, and the deterministic mode's bitwise repeat.
Exits 1 if a gradient has a NaN, errs more than 1.05x SDPA-FA2's, or the deterministic mode does not
repeat bitwise.
HOPATTN_LIBRARY=... PYTHONPATH=python python3 bench/backward_sections_check.py
"""
# The shapes: head_dim 128, 4k tokens, 2 x 16 pairs of 4 MiB of Q, dO and dQ each, make 4 sections
# of 8 on the H200 (60 MiB of L2); the others 4-8 sections.
import sys

import torch, hopattn
torch.manual_seed(0)
failures = []
def grads(fn, q, k, v, do):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    o = fn(q, k, v)
    return torch.autograd.grad(o, (q, k, v), do)
for d, s, b, h in ((128, 4096, 2, 16), (64, 8192, 2, 32), (256, 4096, 2, 8), (128, 2048, 4, 16)):
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    ref = grads(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2), is_causal=True).transpose(1, 2),
        q, k, v, do.float())
    hop = grads(lambda q, k, v: hopattn.attention(q, k, v, causal=True), q, k, v, do)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        fa2 = grads(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2), q, k, v, do)
    rel = lambda a, r: ((a.float() - r).norm() / r.norm()).item()
    print(f"d{d} s{s} b{b} h{h}: hopattn " + "/".join(f"{rel(a, r):.3e}" for a, r in zip(hop, ref)) +
          "  FA2 " + "/".join(f"{rel(a, r):.3e}" for a, r in zip(fa2, ref)) +
          f"  nan {any(torch.isnan(g).any().item() for g in hop)}", flush=True)
    torch.use_deterministic_algorithms(True)
    d1 = grads(lambda q, k, v: hopattn.attention(q, k, v, causal=True), q, k, v, do)
    d2 = grads(lambda q, k, v: hopattn.attention(q, k, v, causal=True), q, k, v, do)
    torch.use_deterministic_algorithms(False)
    repeat = all(torch.equal(a, b_) for a, b_ in zip(d1, d2))
    print(f"   deterministic: bitwise repeat {repeat}, "
          f"rel {'/'.join(f'{rel(a, r):.3e}' for a, r in zip(d1, ref))}", flush=True)
    case = f"d{d} s{s} b{b} h{h}"
    if any(torch.isnan(g).any().item() for g in hop + d1):
        failures.append(f"{case}: NaN")
    for name, a, f, r in zip(("dq", "dk", "dv"), hop, fa2, ref):
        if rel(a, r) > 1.05 * rel(f, r):
            failures.append(f"{case}: {name} error {rel(a, r):.3e} over 1.05x SDPA-FA2's {rel(f, r):.3e}")
    if not repeat:
        failures.append(f"{case}: the deterministic mode did not repeat bitwise")
for failure in failures:
    print("FAIL", failure)
sys.exit(1 if failures else 0)
