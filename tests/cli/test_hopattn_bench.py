"""hopattn-bench's command line: exit statuses, --json as JSON Lines written case by case,
option suggestions, --warmup/--threads, --plot, and the backend's reason in the header.

Run by ctest as `python3 test_hopattn_bench.py PATH/TO/hopattn-bench`. Every case runs on the
CPU backend with tiny shapes; the GPU is hidden (CUDA_VISIBLE_DEVICES=""), so the test says
the same on a machine with a Hopper GPU.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BENCH = None  # set from argv in __main__
TINY = ["--backend", "cpu", "--batch", "1", "--heads", "2", "--head-dim", "32", "--iters", "1"]
ENV = dict(os.environ, CUDA_VISIBLE_DEVICES="")

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_OUTPUT, EXIT_BACKEND = 0, 1, 2, 3, 4


def bench(*args, timeout=120):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def read_json_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def has_matplotlib():
    python = shutil.which("python3")
    return python is not None and subprocess.run(
        [python, "-c", "import matplotlib"], capture_output=True).returncode == 0


class HopattnBenchCli(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hopattn-cli-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_nothing_ran(self, result):
        self.assertEqual(result.stdout, "", "a case or the table header was printed")

    def test_help_documents_every_exit_status(self):
        result = bench("--help")
        self.assertEqual(result.returncode, EXIT_OK)
        for option in ("--json", "--plot", "--warmup", "--threads", "JSON Lines"):
            self.assertIn(option, result.stdout)
        for status in range(5):
            self.assertRegex(result.stdout, rf"\n  {status}  ")

    def test_bad_json_path_fails_before_any_case(self):
        result = bench(*TINY, "--seqlen-q", "64", "--json", self.path("missing/dir/out.jsonl"))
        self.assertEqual(result.returncode, EXIT_OUTPUT, result.stderr)
        self.assertIn("--json: cannot open", result.stderr)
        self.assertIn("no case was run", result.stderr)
        self.assert_nothing_ran(result)

    def test_json_lines_header_then_one_object_per_case(self):
        out = self.path("out.jsonl")
        result = bench(*TINY, "--seqlen-q", "16,33", "--causal", "--json", out)
        self.assertEqual(result.returncode, EXIT_OK, result.stdout + result.stderr)
        header, *cases = read_json_lines(out)
        self.assertEqual(header["type"], "header")
        for key in ("version", "git_commit", "build_info", "command_line", "host",
                    "backend_reason"):
            self.assertIn(key, header)
        self.assertEqual(header["backend"], "cpu")
        self.assertEqual(header["cases"], 2)
        self.assertIn("--json", header["command_line"])
        self.assertEqual([c["type"] for c in cases], ["case", "case"])
        self.assertEqual([c["index"] for c in cases], [0, 1])
        self.assertEqual([c["seqlen_q"] for c in cases], [16, 33])
        for c in cases:
            self.assertEqual(c["status"], "HOPATTN_OK")
            self.assertTrue(c["pass"])
            self.assertTrue(c["causal"])
            self.assertEqual(len(c["times_ms"]), 1)

    def test_interrupted_run_keeps_the_finished_cases(self):
        # A tiny case, then one that takes seconds: stopped as soon as the first is written.
        out = self.path("cut.jsonl")
        process = subprocess.Popen(
            [BENCH, *TINY, "--seqlen-q", "16,4096", "--heads", "16", "--head-dim", "128",
             "--iters", "50", "--json", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                if os.path.exists(out):
                    with open(out, encoding="utf-8") as f:
                        if len(f.readlines()) >= 2:
                            break
                time.sleep(0.02)
            self.assertIsNone(process.poll(), "the run ended before it could be interrupted")
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        header, *cases = read_json_lines(out)
        self.assertEqual(header["cases"], 2)
        self.assertEqual(len(cases), 1)
        self.assertEqual(cases[0]["seqlen_q"], 16)

    def test_a_refused_case_is_a_library_error(self):
        out = self.path("refused.jsonl")
        result = bench(*TINY, "--seqlen-q", "16", "--head-dim", "32,600", "--json", out)
        self.assertEqual(result.returncode, EXIT_BACKEND, result.stdout + result.stderr)
        self.assertIn("HOPATTN_ERROR_UNSUPPORTED", result.stdout)
        _, passed, refused = read_json_lines(out)
        self.assertTrue(passed["pass"])
        self.assertEqual(refused["status"], "HOPATTN_ERROR_UNSUPPORTED")
        self.assertIn("head_dim 600", refused["error"])

    def test_e4m3_runs_the_fp8_forward_and_checks_it_within_fp8_accuracy(self):
        out = self.path("fp8.jsonl")
        result = bench(*TINY, "--seqlen-q", "300", "--seqlen-k", "200", "--heads", "4",
                       "--heads-kv", "2", "--head-dim", "64,48", "--causal", "--dtype",
                       "e4m3,bf16", "--json", out)
        self.assertEqual(result.returncode, EXIT_OK, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"\(1,300,200,4,2,64\) +e4m3 +yes .* PASS")
        _, *cases = read_json_lines(out)
        self.assertEqual([(c["dtype"], c["head_dim"]) for c in cases],
                         [("e4m3", 64), ("bf16", 64), ("e4m3", 48), ("bf16", 48)])
        fp8, bf16 = cases[0], cases[1]
        self.assertTrue(fp8["pass"] and bf16["pass"])
        self.assertEqual((fp8["rel_error_tolerance"], fp8["lse_tolerance"]), (0.1, 0.25))
        # Against the unquantised inputs: FP8 costs accuracy (a few percent), bf16 little.
        self.assertGreater(fp8["rel_error"], 5 * bf16["rel_error"])
        self.assertLess(fp8["rel_error"], 0.1)
        self.assertEqual(fp8["flops"], bf16["flops"])

    def test_e4m3_has_no_varlen_form(self):
        result = bench("--backend", "cpu", "--varlen", "16,32", "--dtype", "e4m3")
        self.assertEqual(result.returncode, EXIT_USAGE)
        self.assertIn("--varlen: cannot be combined with --dtype e4m3", result.stderr)
        self.assert_nothing_ran(result)
        result = bench(*TINY, "--dtype", "fp8")
        self.assertEqual(result.returncode, EXIT_USAGE)
        self.assertIn("--dtype: 'fp8' is not one of fp32, bf16, fp16, e4m3", result.stderr)

    def test_unknown_option_suggests_the_nearest(self):
        for given, suggested in (("--warmpu", "--warmup"), ("--jsn", "--json"),
                                 ("--thread", "--threads"), ("-plot", "--plot")):
            result = bench(given, "1")
            self.assertEqual(result.returncode, EXIT_USAGE, given)
            self.assertIn(f"{given}: unknown option; did you mean {suggested}?", result.stderr)
            self.assert_nothing_ran(result)
        result = bench("--frobnicate")
        self.assertEqual(result.returncode, EXIT_USAGE)
        self.assertNotIn("did you mean", result.stderr)

    def test_bad_values_are_usage_errors(self):
        for args in (["--warmup", "-1"], ["--threads", "0"], ["--iters", "x"],
                     ["--threads", "100000"]):
            result = bench(*TINY, "--seqlen-q", "16", *args)
            self.assertEqual(result.returncode, EXIT_USAGE, args)
            self.assertIn(args[0], result.stderr)
            self.assert_nothing_ran(result)

    def test_warmup_and_threads_are_accepted(self):
        out = self.path("threads.jsonl")
        result = bench(*TINY, "--seqlen-q", "16", "--warmup", "0", "--threads", "1",
                       "--json", out)
        self.assertEqual(result.returncode, EXIT_OK, result.stdout + result.stderr)
        self.assertIn("(1 thread, set by --threads)", result.stdout)
        header, case = read_json_lines(out)
        self.assertEqual(header["threads"], 1)
        self.assertIn("; 1 threads", header["build_info"])  # the pool the library started
        self.assertEqual(case["warmup"], 0)

    def test_sm90_without_a_gpu_fails_early(self):
        out = self.path("sm90.jsonl")
        result = bench("--backend", "sm90", "--json", out)
        self.assertEqual(result.returncode, EXIT_BACKEND, result.stdout + result.stderr)
        self.assertIn("--backend sm90: the sm90 backend is unavailable", result.stderr)
        self.assertNotIn("unknown GPU", result.stdout + result.stderr)
        self.assert_nothing_ran(result)
        self.assertFalse(os.path.exists(out), "--json was created although nothing ran")

    def test_header_says_why_the_backend_was_chosen(self):
        result = bench(*TINY[2:], "--seqlen-q", "16")  # auto: no GPU is visible
        self.assertEqual(result.returncode, EXIT_OK, result.stdout + result.stderr)
        self.assertIn("\nbackend cpu: no Hopper GPU visible (sm90 backend: ", result.stdout)
        result = bench(*TINY, "--seqlen-q", "16")
        self.assertIn("\nbackend cpu: asked for with --backend cpu\n", result.stdout)

    def test_plot(self):
        png = self.path("plot.png")
        result = bench(*TINY, "--seqlen-q", "16,32", "--plot", png)
        if not has_matplotlib():
            self.assertEqual(result.returncode, EXIT_OUTPUT, result.stdout + result.stderr)
            self.assertIn("matplotlib", result.stderr)
            self.assertIn("no case was run", result.stderr)
            self.assert_nothing_ran(result)
            return
        self.assertEqual(result.returncode, EXIT_OK, result.stdout + result.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        result = bench(*TINY, "--seqlen-q", "16", "--plot", self.path("missing/dir/p.png"))
        self.assertEqual(result.returncode, EXIT_OUTPUT)
        self.assertIn("--plot: cannot open", result.stderr)
        self.assert_nothing_ran(result)


if __name__ == "__main__":
    BENCH = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=1)
