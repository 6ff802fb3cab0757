#!/usr/bin/env python3
"""The loops of a kernel's SASS and the schedule ptxas gave them, read without a GPU, as the
performance log quotes them (static instructions per key step, HGMMA / MUFU / LDL counts, how the
exponentials interleave with other work):
  sass_loops.py loops FILE [--kernel TEXT] [--ops HGMMA,MUFU,...] [--min N]
      every loop (a backward branch) of at least N instructions (default 100) of each kernel whose
      name contains TEXT: its address range, instruction count, the opcodes asked for, the sum of
      the static stall cycles and how many instructions wait on a scoreboard
  sass_loops.py dump FILE LO HI [--kernel TEXT]
      the instructions of [LO, HI] (hex addresses, as `loops` prints them) with their decoded
      control codes: stall cycles, yield, the scoreboard set on write and on read, the scoreboards
      waited on, the operand reuse flags
FILE is `cuobjdump -sass` output, or a .cubin / .so / .o that cuobjdump (on PATH) reads.

The control codes are bits 41-61 of the second 64-bit word cuobjdump prints of each 128-bit
instruction: stall 4 bits, yield 1, write scoreboard 3 (7: none), read scoreboard 3, wait mask 6,
reuse 4 (the layout published by reverse engineering since Volta, e.g. Jia et al.,
"Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"; checked on sm_90a: an S2R
sets a write scoreboard and the instruction that reads its result waits on that one). The stall
is the minimum before the warp's next issue, not the time the instruction takes: a loop's stall
sum is a floor for one warp alone on its sub-partition."""
import argparse
import collections
import re
import signal
import subprocess
import sys

FUNCTION = re.compile(r"Function : (\S+)")
FIRST_WORD = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/")
SECOND_WORD = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/")
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
BRANCH_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")


def control_codes(second_word):
    """The scheduling fields of an instruction from the second 64-bit word of its encoding."""
    bits = second_word >> 41
    return dict(stall=bits & 15, yield_=(bits >> 4) & 1, write=(bits >> 5) & 7, read=(bits >> 8) & 7,
                wait=(bits >> 11) & 63, reuse=(bits >> 17) & 15)


def read_sass(lines):
    """{kernel name: [instruction]} from cuobjdump -sass text; an instruction is a dict with its
    address, text, opcode (predicate dropped, modifiers kept) and control codes."""
    kernels, kernel, pending = collections.OrderedDict(), None, None
    for line in lines:
        match = FUNCTION.search(line)
        if match:  # a name seen again (another architecture's copy) gets a list of its own
            name = match.group(1)
            while name in kernels:
                name += "'"
            kernel = kernels.setdefault(name, [])
            continue
        match = FIRST_WORD.match(line)
        if match and kernel is not None:
            pending = (int(match.group(1), 16), match.group(2).rstrip(" ;"))
            continue
        match = SECOND_WORD.match(line)
        if match and pending:
            address, text = pending
            body = PREDICATE.sub("", text)
            kernel.append(dict(address=address, text=text, opcode=body.split()[0] if body else "",
                               **control_codes(int(match.group(1), 16))))
            pending = None
    return kernels


def backward_branches(instructions):
    """(first, last) addresses of each backward branch's span, from (address, SASS text) pairs in
    address order (this listing's or an Nsight Compute source page's). ptxas puts the retry of a
    barrier wait out of line, after the kernel's last EXIT, with a branch back to the wait: not a
    loop."""
    exits = [address for address, text in instructions if PREDICATE.sub("", text).startswith("EXIT")]
    last_exit = max(exits, default=None)
    spans = []
    for address, text in instructions:
        target = BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            first = int(target.group(1), 16)
            if last_exit is None or not first < last_exit < address:
                spans.append((first, address))
    return spans


def loops(instructions):
    """backward_branches of read_sass's instructions."""
    return backward_branches([(i["address"], i["text"]) for i in instructions])


def span(instructions, first, last):
    return [i for i in instructions if first <= i["address"] <= last]


def summary(body, ops):
    """Instruction count, the counts of the opcodes in ops (by their first dotted part), the stall
    sum and the number of instructions that wait on a scoreboard."""
    counts = collections.Counter(i["opcode"].split(".")[0] for i in body)
    return dict(instructions=len(body), ops={op: counts[op] for op in ops},
                stall_cycles=sum(i["stall"] for i in body), waiting=sum(1 for i in body if i["wait"]))


def describe(instruction):
    scoreboard = lambda n: "-" if n == 7 else str(n)  # noqa: E731
    waited = "".join(str(b) for b in range(6) if instruction["wait"] >> b & 1)
    return (f"{instruction['address']:6x}  stall {instruction['stall']:2d} {'Y' if instruction['yield_'] else ' '} "
            f"set w{scoreboard(instruction['write'])} r{scoreboard(instruction['read'])} wait[{waited:6s}]  "
            f"{instruction['text']}")


def sass_text(path):
    if path.endswith((".cubin", ".so", ".o")) or ".so." in path:
        return subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True,
                              text=True).stdout.splitlines()
    with open(path) as f:
        return f.read().splitlines()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    loops_parser = sub.add_parser("loops")
    loops_parser.add_argument("file")
    loops_parser.add_argument("--kernel", default="")
    loops_parser.add_argument("--ops", default="HGMMA,QGMMA,MUFU,FMNMX,LDL,STL,BAR")
    loops_parser.add_argument("--min", type=int, default=100)
    dump_parser = sub.add_parser("dump")
    dump_parser.add_argument("file")
    dump_parser.add_argument("first")
    dump_parser.add_argument("last")
    dump_parser.add_argument("--kernel", default="")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    kernels = {name: body for name, body in read_sass(sass_text(args.file)).items() if args.kernel in name}
    if not kernels:
        sys.exit(f"no kernel whose name contains {args.kernel!r} in {args.file}")
    for name, instructions in kernels.items():
        print(name)
        if args.command == "loops":
            for first, last in loops(instructions):
                body = span(instructions, first, last)
                if len(body) >= args.min:
                    s = summary(body, args.ops.split(","))
                    ops = " ".join(f"{op} {n}" for op, n in s["ops"].items())
                    print(f"  {first:#x}-{last:#x}: {s['instructions']} instructions, {ops}, "
                          f"stall sum {s['stall_cycles']}, {s['waiting']} waiting")
        else:
            for instruction in span(instructions, int(args.first, 16), int(args.last, 16)):
                print("  " + describe(instruction))


if __name__ == "__main__":
    main()
