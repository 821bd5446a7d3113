"""bench/gpucheck.py on a CPU: its parsing and deciding parts on hand-made inputs, and the
whole command end to end through its test hook (--allow-cpu --device cpu --quick)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import gpucheck as gc  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1"
skipped="2" tests="7"><testcase classname="tests.test_a" name="test_ok"/><testcase classname="tests.test_a"
name="test_bad"><failure message="x"/></testcase><testcase classname="tests.test_b" name="test_err"><error
message="y"/></testcase><testcase classname="tests.test_b" name="test_skip"><skipped/></testcase></testsuite>
</testsuites>"""


def test_gap_from_metrics_and_the_smoke_verdict():
    lines = [
        json.dumps({"step": 0, "engine_logprob_gap": 0.001}),
        "",
        json.dumps({"step": 1, "engine_logprob_gap": 0.003}),
        json.dumps({"step": 2, "engine_logprob_gap": None}),
    ]
    figures = gc.gap_from_metrics(lines)
    assert figures == {"steps": 3, "gap_mean": 0.002, "gap_max": 0.003}
    assert gc.smoke_verdict(0, figures, 3, "bf16") == ("pass", "3 steps, log-prob gap 0.003 <= 0.02 (bf16)")
    assert gc.smoke_verdict(0, figures, 3, "fp32")[0] == "fail"  # 0.003 > 1e-4
    assert gc.smoke_verdict(1, figures, 3, "bf16") == ("fail", "exit status 1")
    assert gc.smoke_verdict(0, figures, 2, "bf16") == ("fail", "3 steps logged, expected 2")
    assert gc.smoke_verdict(0, gc.gap_from_metrics([]), 0, "bf16") == ("fail", "no engine/trainer log-prob gap logged")


def test_junit_and_verbose_pytest_output_give_the_same_counts():
    counts = gc.parse_junit(JUNIT)
    assert counts == {
        "tests": 7,
        "failures": 1,
        "errors": 1,
        "skipped": 2,
        "passed": 3,
        "failed": ["tests.test_a::test_bad", "tests.test_b::test_err"],
    }
    assert gc.suite_verdict(counts) == ("fail", "3 passed, 1 failed, 1 errors, 2 skipped")
    verbose = (
        "tests/test_a.py::test_ok PASSED   [ 20%]\ntests/test_a.py::test_bad FAILED  [ 40%]\n"
        "tests/test_b.py::test_skip SKIPPED (no gpu)  [ 60%]\nnoise PASSED\n"
    )
    partial = gc.parse_pytest_verbose(verbose)
    assert partial == {
        "tests": 3,
        "passed": 1,
        "failures": 1,
        "errors": 0,
        "skipped": 1,
        "failed": ["tests/test_a.py::test_bad"],
    }
    assert gc.suite_verdict(gc.parse_pytest_verbose("")) == ("fail", "no test ran")
    assert gc.suite_verdict({"tests": 2, "passed": 2, "failures": 0, "errors": 0, "skipped": 0})[0] == "pass"


def test_engine_verdicts():
    assert gc.weights_follow([0.3, 0.5], [0.01, 0.03], 0.05, 0.1) == (
        "pass",
        "mean gap 0.4 -> 0.02 after the push (max 0.03)",
    )
    assert gc.weights_follow([0.3, 0.5], [0.01, 0.3], 0.05, 0.1)[0] == "fail"  # one token too far
    assert (
        gc.weights_follow([0.03, 0.05], [0.02, 0.02], 0.05, 0.1)[1]
        == "the push changed little: mean gap 0.04 before, 0.02 after"
    )
    gib = 2**30
    assert gc.memory_cycle_verdict(10 * gib, 40 * gib, 10 * gib) == (
        "pass",
        "sleep freed 30.00 GiB, wake-up took back 30.00 GiB",
    )
    assert gc.memory_cycle_verdict(10 * gib, 10 * gib + 2**20, 10 * gib)[1] == "sleep freed 0.00 GiB < 1.00 GiB"
    assert gc.memory_cycle_verdict(10 * gib, 40 * gib, 30 * gib)[0] == "fail"  # took back 10 of 30 GiB


def test_selection_schema_and_names():
    plan = gc.select(list(gc.CHECKS), "environment,numerics", "numerics")
    assert plan["environment"] is None and plan["numerics"] == "--skip" and plan["smoke_train"] == "not in --only"
    assert all(v is None for v in gc.select(list(gc.CHECKS), None, None).values())
    with pytest.raises(ValueError, match=r"unknown check\(s\) \['gpu'\]; the checks are environment, "):
        gc.select(list(gc.CHECKS), "gpu", None)
    with pytest.raises(ValueError, match="status must be one of"):
        gc.Check("x", "ok", "why")
    with pytest.raises(ValueError, match="needs a reason"):
        gc.Check("x", "skipped", "")
    assert gc.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gc.out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried") and not gc.out_of_memory("ValueError")
    assert gc.last_json_line('log\n{"a": 1}\n[done]\n') == {"a": 1}
    checks = [gc.Check("a", "pass", "fine", {"x": 1}, 1.5), gc.Check("b", "skipped", "--skip")]
    assert gc.summary(checks) == {"pass": 1, "fail": 0, "skipped": 1}
    assert gc.table(checks).splitlines()[-1] == "1 pass, 0 fail, 1 skipped"


def test_a_timed_out_check_is_a_failure_with_its_reason(tmp_path):
    ctx = gc.Context("cpu", True, tmp_path, timeout=1)
    with pytest.raises(gc.CheckTimeout, match="timed out after 1 s") as err:
        ctx.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"])
    assert "started" in err.value.stdout


def test_without_cuda_it_says_so_and_writes_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: gpucheck runs for real here")
    out = subprocess.run(
        [sys.executable, "bench/gpucheck.py", "--out", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "gpucheck: torch sees no CUDA device on this machine; run it where a GPU is (nothing was written)"
    ]
    assert not (tmp_path / "r.json").exists()


RUN_HERE = ("environment", "numerics", "hf_engine", "credit_source")


@pytest.mark.slow
def test_the_command_end_to_end_on_the_cpu(tmp_path):
    """The command on a CPU, quick sizes, GPUs hidden: a real report from real checks, the
    others skipped with their reason. Run here: the numerical tests (pytest and its junit
    report), the HF engine's throughput, and credit's c from both sources (vLLM on the CPU).
    Left to the GPU: the smoke runs (their metrics parsing is tested above), the suite check
    (it would run this suite again inside itself; its parsing is tested above), the other vLLM
    checks (CUDA's sleep mode), and the benchmarks, which tests/test_bench.py already runs on
    the CPU."""
    out_file = tmp_path / "report.json"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [
            sys.executable,
            "bench/gpucheck.py",
            "--allow-cpu",
            "--device",
            "cpu",
            "--quick",
            "--only",
            ",".join(RUN_HERE),
            "--budget",
            "3000",
            "--out",
            str(out_file),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3100,
    )
    report = json.loads(out_file.read_text())
    by_name = {c["name"]: c for c in report["checks"]}
    assert list(by_name) == list(gc.CHECKS)
    assert set(report) == {"schema", "command", "date", "device_name", "host", "git_commit", "summary", "checks"}
    assert {c["status"] for c in report["checks"]} <= set(gc.STATUSES) and all(c["reason"] for c in report["checks"])
    assert [n for n, c in by_name.items() if c["status"] == "skipped"] == [n for n in gc.CHECKS if n not in RUN_HERE]
    failed = {n: c["reason"] for n, c in by_name.items() if c["status"] == "fail"}
    assert not failed, failed
    assert out.returncode == 0, out.stderr[-2000:]
    assert by_name["numerics"]["figures"]["passed"] >= 5  # 3 packing configs + 4 chunks + masked
    assert by_name["hf_engine"]["figures"]["batched_tokens_per_s"] > 0
    assert by_name["credit_source"]["figures"]["c_gap_max"] <= 1e-5  # fp32 both (tests/test_rollout.py)
    skipped = len(gc.CHECKS) - len(RUN_HERE)
    assert report["summary"] == {"pass": 4, "fail": 0, "skipped": skipped}
    assert out.stdout.splitlines()[-2] == f"4 pass, 0 fail, {skipped} skipped"
