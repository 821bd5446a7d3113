"""One command for whoever has a GPU: does the CUDA path work, and how fast is it.

    bash run.sh gpucheck [--only a,b] [--skip a,b] [--out FILE] [--quick] [--budget 600]
    python bench/gpucheck.py ...                       (the same)

Runs the checks below in order, each with a time limit (a limit reached is a `fail` whose
reason says so) inside a total budget (`--budget` seconds, default 600: what is left when
the budget is spent is `skipped` with that reason), and writes one JSON report,
bench/results/gpucheck-<UTC date>-<gpu>.json (or `--out`), then prints a summary table.
Every check gives a status (`pass`, `fail`, `skipped`), a reason, its figures and its
duration; nothing is left out silently. Needs no network.

    environment     torch, CUDA, GPU, transformers and vllm versions
    smoke_train     credo.py configs/tiny.yaml engine=hf precision=bf16 max_steps=3 (engine/trainer gap)
    smoke_torchrun  torchrun --nproc_per_node=1 credo.py ... max_steps=2 (FSDP2 over NCCL)
    numerics        packed vs padded forward, chunked vs naive log-probs, compiled vs eager layers
                    and log-prob blocks (inductor), fp32 on the GPU to 1e-5 (the tests that check
                    them on CPU, with CREDO_TEST_DEVICE=cuda; --quick leaves out the compiled ones)
    bench_logprobs  bench/bench_logprobs.py --seq 1024 4096 8192 (warm-up, medians): eager chunked and
                    compiled blocks against naive; the target is judged on the compiled ones on CUDA
    host_syncs      bench/bench_syncs.py: host synchronisations per micro-batch of a training step
    mfu_4096        bench/bench_mfu.py: Qwen3-1.7B shape, 1 x 4,096 tokens, compiled layers (as
                    training runs on CUDA) and a profile of one more step, then eager layers for comparison
    mfu_paper       bench/bench_mfu.py: the paper's micro-batch, 2 x (1,024 + 8,192) tokens, with a
                    real AdamW step (fused, its state in the peak memory) and a profile; with
                    activation checkpointing when it runs out of memory without
    hf_engine       tokens/s of rollout.HFEngine on the tiny model: a step's rows together, and one by one
    vllm_engine     where vllm imports: sleep mode, seeded generation reproducible, weights pushed
                    and followed within bf16 tolerance, a sleep/wake/push cycle frees and restores memory
    vllm_tiny_run   where vllm imports: `bash run.sh tiny max_steps=2 precision=bf16` and its gap
    credit_source   where vllm imports: credit's c read by the engine at each slot against the trainer's
                    no-grad pass (credit_confidence), on the Qwen3-1.7B shape (random weights, bf16; on a
                    CPU the tiny model): their largest and mean difference, and the seconds of each
    pytest_suite    python -m pytest -m "not slow" on this machine: counts (junit XML) and the failures

A benchmark check passes when it ran; its figures say whether the performance targets (`TARGETS`)
are met (`meets_target`). The numerical and smoke checks pass on their tolerances.

Without CUDA the command says so in one line and exits 2. Test hooks (tests/test_gpucheck.py,
not for users): `--allow-cpu --device cpu` runs the checks on the CPU (GPUs hidden from
every child), so the runner is exercised end to end on the tiny model; `--quick` shrinks
every check's work. `--child NAME` is how the runner starts its in-Python checks in a
fresh process (one JSON line on stdout).

What this file does NOT do: it changes nothing in the training code and tunes nothing;
it measures and reports.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import confidence  # noqa: E402
import config  # noqa: E402
import engine as eng  # noqa: E402
import policy as pol  # noqa: E402
import problems  # noqa: E402
import rollout as ro  # noqa: E402

STATUSES = ("pass", "fail", "skipped")
SCHEMA = 1
GAP_TOLERANCE = {"bf16": 0.02, "fp32": 1e-4}  # engine/trainer mean |log-prob gap| of a smoke run
TARGETS = {"mfu_4096": 0.35, "mfu_paper": 0.45, "logprobs_time_ratio": 1.0, "logprobs_peak_mem_ratio": 0.25}


@dataclass
class Check:
    """One entry of the report."""

    name: str
    status: str
    reason: str
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status must be one of {STATUSES}, got {self.status!r}")
        if not self.reason:
            raise ValueError(f"check {self.name}: every status needs a reason")


class CheckTimeout(Exception):
    """A check's child process ran past its limit; `stdout` is what it had printed."""

    def __init__(self, message: str, stdout: str = ""):
        super().__init__(message)
        self.stdout = stdout


@dataclass
class Context:
    """What every check needs: where it runs, how much work, how long it may take."""

    device: str  # "cuda" or "cpu" (test hook)
    quick: bool
    work: Path  # scratch directory of this run
    timeout: float = 600.0  # seconds left to the current check

    @property
    def slack(self) -> float:
        """How much longer than on a GPU a check may take: the CPU test hook runs its quick
        sizes on a shared 2-core machine, where a smoke step alone can take minutes."""
        return 1.0 if self.device == "cuda" else 5.0

    def env(self) -> dict:
        """The children's environment: no launcher variables; GPUs hidden on a CPU run."""
        env = {
            **os.environ,
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "TOKENIZERS_PARALLELISM": "false",
            "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm")),
            "CREDO_BENCH_RESULTS": str(self.work / "bench"),
        }
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(var, None)
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def run(self, cmd: list[str], extra_env: dict | None = None) -> subprocess.CompletedProcess:
        """A child process in the project root, within this check's time limit."""
        try:
            return subprocess.run(
                cmd,
                cwd=ROOT,
                env={**self.env(), **(extra_env or {})},
                capture_output=True,
                text=True,
                timeout=self.timeout,
            )
        except subprocess.TimeoutExpired as err:
            printed = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            raise CheckTimeout(f"timed out after {self.timeout:.0f} s: {' '.join(cmd)}", printed) from err


# --- pure parts: parsing and deciding (tested on CPU) ----------------------------------------


def gap_from_metrics(lines: list[str]) -> dict:
    """Steps and engine/trainer log-prob gaps of a run's metrics.jsonl lines."""
    rows = [json.loads(line) for line in lines if line.strip()]
    gaps = [r["engine_logprob_gap"] for r in rows if r.get("engine_logprob_gap") is not None]
    return {
        "steps": len(rows),
        "gap_mean": round(sum(gaps) / len(gaps), 6) if gaps else None,
        "gap_max": round(max(gaps), 6) if gaps else None,
    }


def smoke_verdict(returncode: int, figures: dict, steps: int, precision: str) -> tuple[str, str]:
    """A smoke run passes when it exited 0, logged every step and its engine follows the trainer."""
    if returncode != 0:
        return "fail", f"exit status {returncode}"
    if figures["steps"] != steps:
        return "fail", f"{figures['steps']} steps logged, expected {steps}"
    if figures["gap_max"] is None:
        return "fail", "no engine/trainer log-prob gap logged"
    tol = GAP_TOLERANCE[precision]
    if figures["gap_max"] > tol:
        return "fail", f"engine/trainer log-prob gap {figures['gap_max']} > {tol} ({precision})"
    return "pass", f"{steps} steps, log-prob gap {figures['gap_max']} <= {tol} ({precision})"


def parse_junit(xml_text: str) -> dict:
    """Counts and failed test ids of a pytest junit XML report."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "failed": failed}


def parse_pytest_verbose(stdout: str) -> dict:
    """Counts from `pytest -v` lines (`path::test PASSED [ 5%]`), for a run cut short before
    its junit XML was written."""
    outcomes = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", stdout, flags=re.MULTILINE)
    count = lambda *names: sum(1 for _, o in outcomes if o in names)  # noqa: E731
    return {
        "tests": len(outcomes),
        "passed": count("PASSED", "XPASS"),
        "failures": count("FAILED"),
        "errors": count("ERROR"),
        "skipped": count("SKIPPED", "XFAIL"),
        "failed": [t for t, o in outcomes if o in ("FAILED", "ERROR")],
    }


def suite_verdict(counts: dict) -> tuple[str, str]:
    if counts["tests"] == 0:
        return "fail", "no test ran"
    bad = counts["failures"] + counts["errors"]
    summary = (
        f"{counts['passed']} passed, {counts['failures']} failed, {counts['errors']} errors, "
        f"{counts['skipped']} skipped"
    )
    return ("fail" if bad else "pass"), summary


def last_json_line(stdout: str) -> dict:
    """The final JSON line a bench script or a child prints."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in the output (last lines: {stdout.strip().splitlines()[-3:]})")


def out_of_memory(stderr: str) -> bool:
    return "OutOfMemoryError" in stderr or "CUDA out of memory" in stderr


def weights_follow(stale: list[float], fresh: list[float], tol_mean: float, tol_max: float) -> tuple[str, str]:
    """After a push the engine's log-probs follow the trainer's (|engine - trainer| per token,
    before and after the push): close after, and clearly closer than before."""
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    before, after, worst = mean(stale), mean(fresh), max(fresh)
    if after > tol_mean or worst > tol_max:
        return "fail", f"after the push |engine - trainer| mean {after:.4g} / max {worst:.4g} > {tol_mean} / {tol_max}"
    if after * 3 > before:
        return "fail", f"the push changed little: mean gap {before:.4g} before, {after:.4g} after"
    return "pass", f"mean gap {before:.4g} -> {after:.4g} after the push (max {worst:.4g})"


def memory_cycle_verdict(free_awake: int, free_asleep: int, free_woken: int, min_freed: int = 2**30) -> tuple[str, str]:
    """torch.cuda.mem_get_info's free bytes: sleep frees at least `min_freed`, wake-up takes
    back what sleep freed (within 10 %)."""
    freed, taken = free_asleep - free_awake, free_asleep - free_woken
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    if freed < min_freed:
        return "fail", f"sleep freed {gib(freed)} < {gib(min_freed)}"
    if abs(taken - freed) > 0.1 * freed:
        return "fail", f"sleep freed {gib(freed)}, wake-up took back {gib(taken)}"
    return "pass", f"sleep freed {gib(freed)}, wake-up took back {gib(taken)}"


def gpu_slug(name: str) -> str:
    """A file-name part for a device name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def select(names: list[str], only: str | None, skip: str | None) -> dict[str, str | None]:
    """Each check -> None (run it) or the reason it is skipped; unknown names are an error."""
    wanted = [n for n in (only or "").split(",") if n]
    dropped = [n for n in (skip or "").split(",") if n]
    unknown = sorted(set(wanted + dropped) - set(names))
    if unknown:
        raise ValueError(f"unknown check(s) {unknown}; the checks are {', '.join(names)}")
    return {n: ("not in --only" if wanted and n not in wanted else "--skip" if n in dropped else None) for n in names}


def summary(checks: list[Check]) -> dict:
    return {s: sum(c.status == s for c in checks) for s in STATUSES}


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{'check':<{width}}  status   seconds  reason", "-" * (width + 40)]
    lines += [f"{c.name:<{width}}  {c.status:<7}  {c.seconds:7.1f}  {c.reason}" for c in checks]
    s = summary(checks)
    return "\n".join(lines + [f"{s['pass']} pass, {s['fail']} fail, {s['skipped']} skipped"])


# --- the checks --------------------------------------------------------------------------------


def check_environment(ctx: Context) -> tuple[str, str, dict]:
    out = ctx.run([sys.executable, __file__, "--child", "environment", "--device", ctx.device])
    if out.returncode != 0:
        return "fail", f"exit status {out.returncode}: {out.stderr.strip()[-300:]}", {}
    facts = last_json_line(out.stdout)
    if ctx.device == "cuda" and not facts["cuda_available"]:
        return "fail", "torch sees no CUDA device in a child process", facts
    return "pass", f"{facts['device_name']}, torch {facts['torch']}, CUDA {facts['cuda']}", facts


def tiny_overrides(ctx: Context, steps: int) -> list[str]:
    precision = "bf16" if ctx.device == "cuda" else "fp32"
    quick = ["group_size=2", "per_device_batch_size=2", "grad_accum=1", "max_completion_tokens=16"] if ctx.quick else []
    return [
        f"precision={precision}",
        f"max_steps={steps}",
        f"save_every={steps}",
        f"out_dir={ctx.work / 'runs'}",
        *quick,
    ]


def smoke_run(
    ctx: Context, launcher: list[str], run_name: str, steps: int, config: str, engine: str | None
) -> tuple[str, str, dict]:
    cmd = [
        *launcher,
        "credo.py",
        config,
        *(["engine=" + engine] if engine else []),
        *tiny_overrides(ctx, steps),
        f"run_name={run_name}",
    ]
    out = ctx.run(cmd)
    metrics = ctx.work / "runs" / run_name / "metrics.jsonl"
    figures = {
        "command": " ".join(cmd),
        **gap_from_metrics(metrics.read_text().splitlines() if metrics.exists() else []),
    }
    status, reason = smoke_verdict(out.returncode, figures, steps, "bf16" if ctx.device == "cuda" else "fp32")
    if out.returncode != 0:
        figures["stderr_tail"] = out.stderr.strip()[-1500:]
    return status, reason, figures


def check_smoke_train(ctx: Context):
    return smoke_run(ctx, [sys.executable], "gpucheck-hf", 1 if ctx.quick else 3, "configs/tiny.yaml", "hf")


def check_smoke_torchrun(ctx: Context):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    return smoke_run(
        ctx,
        [torchrun, "--standalone", "--nproc_per_node=1"],
        "gpucheck-torchrun",
        1 if ctx.quick else 2,
        "configs/tiny.yaml",
        "hf",
    )


def check_numerics(ctx: Context):
    junit = ctx.work / "numerics.xml"
    tests = [
        "tests/test_policy.py::test_packed_micro_batches_equal_padded_ones",
        "tests/test_logprob_kernels.py::test_chunked_logprobs_and_readout_match_naive",
        "tests/test_logprob_kernels.py::test_logprobs_score_only_the_masked_columns",
        *(
            []
            if ctx.quick
            else [
                "tests/test_policy.py::test_compiled_layers_change_no_output_and_no_gradient",
                "tests/test_logprob_kernels.py::test_compiled_logprob_blocks_match_the_eager_ones",
            ]
        ),
    ]
    out = ctx.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests],
        {"CREDO_TEST_DEVICE": ctx.device},
    )
    if not junit.exists():
        return "fail", f"pytest wrote no report (exit {out.returncode}): {out.stdout.strip()[-300:]}", {}
    counts = parse_junit(junit.read_text())
    status, reason = suite_verdict(counts)
    return status, f"fp32 on {ctx.device}: {reason}", {**counts, "tests_run": tests}


def check_bench_logprobs(ctx: Context):
    """The eager chunked kernel and the compiled one (what the update runs on CUDA, with its
    2,048-row blocks) against the naive computation; the target is judged on the one the
    update runs on this device."""
    args = (
        ["--seq", "256", "--vocab", "4096", "--repeats", "1", "--warmup", "1", "--iters", "1"]
        if ctx.quick
        else ["--seq", "1024", "4096", "8192", "--repeats", "1", "--warmup", "2", "--iters", "5"]
    )
    out = ctx.run([sys.executable, "bench/bench_logprobs.py", *args, "--impls", "chunked", "compiled", "naive"])
    if out.returncode != 0:
        return "fail", f"exit status {out.returncode}: {out.stderr.strip()[-300:]}", {}
    result = last_json_line(out.stdout)
    judged = "compiled_" if ctx.device == "cuda" else ""
    time_ratio, mem_ratio = result[f"{judged}time_ratio"], result[f"{judged}peak_mem_ratio"]
    meets = time_ratio <= TARGETS["logprobs_time_ratio"] and mem_ratio <= TARGETS["logprobs_peak_mem_ratio"]
    return (
        "pass",
        (
            f"{judged or 'chunked_'}kernel/naive time {time_ratio}, memory {mem_ratio} (targets <= "
            f"{TARGETS['logprobs_time_ratio']}, <= {TARGETS['logprobs_peak_mem_ratio']}); eager chunked "
            f"{result['time_ratio']}, {result['peak_mem_ratio']}; compiled {result['compiled_time_ratio']}, "
            f"{result['compiled_peak_mem_ratio']}"
        ),
        {**result, "meets_target": meets},
    )


def check_host_syncs(ctx: Context):
    args = ["--shape", "test", "--rows", "2", "--seq", "64"] if ctx.quick else []
    out = ctx.run([sys.executable, "bench/bench_syncs.py", *args])
    if out.returncode == 2 and ctx.device != "cuda":
        return "skipped", "no CUDA: host synchronisations are counted on a GPU only", {}
    if out.returncode != 0:
        return "fail", f"exit status {out.returncode}: {out.stderr.strip()[-300:]}", {}
    result = last_json_line(out.stdout)
    return (
        "pass",
        (
            f"{result['per_micro_batch']} per micro-batch (target <= {result['target_per_micro_batch']}), "
            f"{result['per_step']} per step"
        ),
        result,
    )


def mfu_run(ctx: Context, args: list[str], target: float) -> tuple[str, str, dict]:
    out = ctx.run([sys.executable, "bench/bench_mfu.py", *args])
    if out.returncode != 0:
        return (
            "fail",
            f"out of memory: {' '.join(args)}"
            if out_of_memory(out.stderr)
            else f"exit status {out.returncode}: {out.stderr.strip()[-300:]}",
            {"oom": out_of_memory(out.stderr)},
        )
    result = last_json_line(out.stdout)
    mfu = result["mfu"]
    result["meets_target"] = mfu is not None and mfu >= target
    shown = (
        f"MFU {mfu} (target >= {target})"
        if mfu is not None
        else f"{result['achieved_tflop_s']} TFLOP/s (no MFU on {ctx.device})"
    )
    return "pass", f"{shown}, {result.get('peak_memory_gib', '-')} GiB peak", result


def check_mfu_4096(ctx: Context):
    args = (
        ["--shape", "small", "--seq", "64", "--iters", "1"]
        if ctx.quick
        else ["--shape", "qwen3-1.7b", "--rows", "1", "--seq", "4096", "--iters", "5"]
    )
    status, reason, figures = mfu_run(ctx, [*args, "--profile"], TARGETS["mfu_4096"])  # what the next lever is
    _, eager_reason, eager = mfu_run(ctx, [*args, "--compile-layers", "off"], TARGETS["mfu_4096"])
    figures["eager_layers"] = eager
    return status, f"{reason}; eager layers: {eager_reason}", figures


def check_mfu_paper(ctx: Context):
    args = (
        ["--shape", "small", "--rows", "2", "--seq", "96", "--prompt", "16", "--iters", "1"]
        if ctx.quick
        else [
            "--shape",
            "qwen3-1.7b",
            "--rows",
            "2",
            "--seq",
            str(1024 + 8192),
            "--prompt",
            "1024",
            "--iters",
            "3",
            "--optimizer",
            "adamw",
        ]
    )
    args.append("--profile")  # what the next lever is
    status, reason, figures = mfu_run(ctx, args, TARGETS["mfu_paper"])
    if status == "fail" and figures.get("oom"):
        status, reason2, figures = mfu_run(ctx, [*args, "--activation-checkpointing"], TARGETS["mfu_paper"])
        reason = f"out of memory without activation checkpointing; with it: {reason2}"
    return status, reason, figures


def child_check(ctx: Context, name: str) -> tuple[str, str, dict]:
    out = ctx.run(
        [sys.executable, __file__, "--child", name, "--device", ctx.device, *(["--quick"] if ctx.quick else [])]
    )
    if out.returncode != 0:
        return "fail", f"exit status {out.returncode}: {out.stderr.strip()[-400:]}", {}
    result = last_json_line(out.stdout)
    return result.pop("status"), result.pop("reason"), result


def check_hf_engine(ctx: Context):
    return child_check(ctx, "hf_engine")


def check_vllm_engine(ctx: Context):
    return child_check(ctx, "vllm_engine")


def check_vllm_tiny_run(ctx: Context):
    probe = ctx.run([sys.executable, "-c", "import vllm"])
    if probe.returncode != 0:
        return "skipped", f"vllm does not import here: {probe.stderr.strip().splitlines()[-1][:200]}", {}
    # what `bash run.sh tiny max_steps=2 precision=bf16` runs (one process; bf16 on a GPU, as the
    # paper's runs), with its output under the scratch directory
    return smoke_run(ctx, [sys.executable], "gpucheck-vllm", 1 if ctx.quick else 2, "tiny", None)


def check_credit_source(ctx: Context):
    return child_check(ctx, "credit_source")


def check_pytest_suite(ctx: Context):
    junit = ctx.work / "suite.xml"
    # Not the `slow` end-to-end runs (minutes each; the smoke checks above cover their paths on
    # the GPU): the rest of the suite fits the budget.
    paths = ["tests/test_losses.py"] if ctx.quick else ["-m", "not slow"]
    try:
        out = ctx.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--junitxml={junit}", *paths])
    except CheckTimeout as err:  # no junit XML yet: count the -v lines printed so far
        counts = parse_pytest_verbose(err.stdout)
        return "fail", f"{err}; so far {suite_verdict(counts)[1]}", counts
    counts = parse_junit(junit.read_text()) if junit.exists() else parse_pytest_verbose(out.stdout)
    status, reason = suite_verdict(counts)
    return status, reason + (" (tests/test_losses.py only: --quick)" if ctx.quick else " (-m 'not slow')"), counts


CHECKS = {  # name -> (function, time limit in seconds)
    "environment": (check_environment, 60),
    "smoke_train": (check_smoke_train, 120),
    "smoke_torchrun": (check_smoke_torchrun, 120),
    "numerics": (check_numerics, 240),
    "bench_logprobs": (check_bench_logprobs, 180),  # 9 child processes; the compiled ones compile first
    "host_syncs": (check_host_syncs, 120),
    "mfu_4096": (check_mfu_4096, 180),
    "mfu_paper": (check_mfu_paper, 240),
    "hf_engine": (check_hf_engine, 90),
    "vllm_engine": (check_vllm_engine, 180),
    "vllm_tiny_run": (check_vllm_tiny_run, 150),
    "credit_source": (check_credit_source, 300),
    "pytest_suite": (check_pytest_suite, 600),
}


def run_checks(ctx: Context, plan: dict[str, str | None], budget: float) -> list[Check]:
    """Every check in order: its own limit, within what is left of the total budget."""
    checks, start = [], time.monotonic()
    for name, (fn, limit) in CHECKS.items():
        if plan[name] is not None:
            checks.append(Check(name, "skipped", plan[name]))
            continue
        left = budget - (time.monotonic() - start)
        if left < 10:
            checks.append(Check(name, "skipped", f"the total budget of {budget:.0f} s was spent (--budget)"))
            continue
        ctx.timeout = min(limit * ctx.slack, left)
        began = time.monotonic()
        try:
            status, reason, figures = fn(ctx)
        except CheckTimeout as err:
            status, reason, figures = "fail", str(err), {}
        except Exception as err:  # noqa: BLE001 - a check that crashes is a failed check, reported with its error
            status, reason, figures = "fail", f"{type(err).__name__}: {err}", {}
        checks.append(Check(name, status, reason, figures, round(time.monotonic() - began, 1)))
        print(f"[gpucheck] {name}: {status} ({checks[-1].seconds:.0f} s) {reason}", file=sys.stderr, flush=True)
    return checks


def report(checks: list[Check], device_name: str, argv: list[str]) -> dict:
    return {
        "schema": SCHEMA,
        "command": " ".join(["python", "bench/gpucheck.py", *argv]),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device_name": device_name,
        "host": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "git_commit": git_commit(),
        "summary": summary(checks),
        "checks": [asdict(c) for c in checks],
    }


def git_commit() -> str | None:
    """The checked-out commit; None outside a git checkout or without git."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return out.stdout.strip() or None


# --- in-Python checks, each in its own process (--child) ---------------------------------------


def child_environment(device: str, quick: bool) -> dict:
    from importlib import metadata

    import transformers

    try:  # installed or not; whether it imports is vllm_engine's business
        vllm_version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        vllm_version = "not installed"
    cuda = torch.cuda.is_available()
    facts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda,
        "transformers": transformers.__version__,
        "vllm": vllm_version,
        "python": platform.python_version(),
    }
    if cuda:
        free, total = torch.cuda.mem_get_info()
        facts.update(
            device_name=torch.cuda.get_device_name(),
            device_count=torch.cuda.device_count(),
            capability=".".join(map(str, torch.cuda.get_device_capability())),
            memory_gib=round(total / 2**30, 1),
            free_gib=round(free / 2**30, 1),
            bf16_supported=torch.cuda.is_bf16_supported(),
            nccl=str(torch.cuda.nccl.version()),
        )
    else:
        facts["device_name"] = f"cpu ({platform.machine()} {os.cpu_count()} cpus)"
    return facts


def tiny_world(device: str, overrides: list[str]):
    """The tiny policy on `device` and its first prompts."""
    cfg = config.load_config("tiny", overrides)
    policy = pol.load_policy(cfg.model, torch.device(device))
    model, tokenizer = policy.model, policy.tokenizer
    rows = problems.load_rows(cfg.train_data, cfg.domain)
    prompts = [ro.build_prompt_ids(tokenizer, r["problem"], cfg.channel, cfg.domain) for r in rows]
    return cfg, model, tokenizer, prompts


def child_hf_engine(device: str, quick: bool) -> dict:
    """Generated tokens per second of the HF engine: a step's rows together (hf_engine_batch),
    then one row at a time (hf_engine_batch=1, the old per-request cost), medians of rounds
    after a warm-up."""
    questions, group, rounds = (2, 2, 1) if quick else (8, 8, 3)
    cfg, model, tokenizer, prompts = tiny_world(
        device, ["max_completion_tokens=16" if quick else "max_completion_tokens=64"]
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    figures = {"rows": questions * group, "max_completion_tokens": cfg.max_completion_tokens, "dtype": str(dtype)}
    for label, batch, n_questions in (("batched", cfg.hf_engine_batch, questions), ("one_by_one", 1, 1)):
        engine = eng.HFEngine(
            model, tokenizer, dataclasses.replace(cfg, hf_engine_batch=batch), confidence.plan(cfg), dtype
        )
        engine.generate(prompts[:1], 1, seed=0)  # warm-up
        rates = []
        for r in range(rounds):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            samples = engine.generate(prompts[:n_questions], group, seed=r)
            rates.append(sum(len(s.token_ids) for s in samples) / (time.perf_counter() - start))
        figures[f"{label}_tokens_per_s"] = round(statistics.median(rates), 1)
        figures[f"{label}_rows"] = n_questions * group
    figures["speedup"] = round(figures["batched_tokens_per_s"] / figures["one_by_one_tokens_per_s"], 2)
    return {
        "status": "pass",
        "reason": f"{figures['batched_tokens_per_s']} tokens/s batched, "
        f"{figures['one_by_one_tokens_per_s']} one row at a time",
        **figures,
    }


def child_vllm_engine(device: str, quick: bool) -> dict:
    """The vLLM engine on the tiny model: sleep mode, seeded reproducibility, a weight push
    the engine follows, and (CUDA) a sleep/wake/push cycle measured by mem_get_info."""
    try:
        import vllm  # noqa: F401
    except Exception as err:  # noqa: BLE001 - the reason is the report
        return {"status": "skipped", "reason": f"vllm does not import here: {type(err).__name__}: {err}"[:300]}
    with tempfile.TemporaryDirectory(prefix="gpucheck-vllm-") as run_dir:
        return vllm_engine_checks(device, run_dir)


def vllm_engine_checks(device: str, run_dir: str) -> dict:
    """child_vllm_engine's checks, the engine's files under `run_dir`."""
    bf16 = device == "cuda"
    cfg, model, tokenizer, prompts = tiny_world(
        device, [f"precision={'bf16' if bf16 else 'fp32'}", "max_completion_tokens=32"]
    )
    dtype = torch.bfloat16 if bf16 else torch.float32
    engine = eng.make_engine(cfg, confidence.plan(cfg), model, tokenizer, cfg.model, run_dir, dtype)
    figures, problems = {"sleep_mode": engine.sleep_mode}, []
    if bf16 and not engine.sleep_mode:
        problems.append("sleep mode is off on CUDA")

    first = engine.generate(prompts[:2], 2, seed=5)
    figures["reproducible"] = [s.token_ids for s in engine.generate(prompts[:2], 2, seed=5)] == [
        s.token_ids for s in first
    ]
    if not figures["reproducible"]:
        problems.append("seeded generation is not reproducible")

    sequences = [prompts[i // 2] + s.token_ids for i, s in enumerate(first)]

    def trainer_logprobs() -> list[list[float]]:
        with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=bf16):
            out = []
            for seq in sequences:
                ids = torch.tensor([seq], device=device)
                logp = model(input_ids=ids).logits.float().log_softmax(-1)[0, :-1]  # [L-1, V]
                out.append(logp.gather(-1, ids[0, 1:, None]).squeeze(-1).tolist())
            return out

    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():  # the trainer's weights change
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator, device=device) * 0.05 * p.float().std())
    want = trainer_logprobs()
    stale = engine.score(sequences)
    if engine.sleep_mode:
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        free_asleep = torch.cuda.mem_get_info()[0]
        engine.push_weights(model)  # wakes the weights, pushes, wakes the KV cache
        free_woken = torch.cuda.mem_get_info()[0]
        status, reason = memory_cycle_verdict(free_awake, free_asleep, free_woken)
        figures.update(
            free_gib={
                "awake": round(free_awake / 2**30, 2),
                "asleep": round(free_asleep / 2**30, 2),
                "after_push": round(free_woken / 2**30, 2),
            },
            memory_cycle=reason,
        )
        if status == "fail":
            problems.append(reason)
    else:
        engine.push_weights(model)
        figures["memory_cycle"] = "not measured: no sleep mode without CUDA"
    fresh = engine.score(sequences)
    gaps = lambda got: [abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)]  # noqa: E731
    tol_mean, tol_max = (0.02, 0.25) if bf16 else (1e-4, 1e-3)
    status, reason = weights_follow(gaps(stale), gaps(fresh), tol_mean, tol_max)
    figures["weights_follow"] = reason
    if status == "fail":
        problems.append(reason)
    engine.close()
    if problems:
        return {"status": "fail", "reason": "; ".join(problems), **figures}
    return {"status": "pass", "reason": f"reproducible, {reason}; {figures['memory_cycle']}", **figures}


def child_credit_source(device: str, quick: bool) -> dict:
    """credit_confidence's two sources side by side: c from the vLLM engine at each slot (engine.
    probe_logprobs) against the trainer's no-grad pass (policy.confidences) on the same rollouts:
    the largest and mean |difference|, and the seconds of the engine's read with the rollouts in
    its prefix cache (as right after generation) and without (a prefill), and of the pass."""
    try:
        import vllm  # noqa: F401
    except Exception as err:  # noqa: BLE001 - the reason is the report
        return {"status": "skipped", "reason": f"vllm does not import here: {type(err).__name__}: {err}"[:300]}
    with tempfile.TemporaryDirectory(prefix="gpucheck-credit-") as run_dir:
        return credit_source_checks(device, quick, Path(run_dir))


def credit_source_checks(device: str, quick: bool, run_dir: Path) -> dict:
    """child_credit_source's measurements, the model and the engine's files under `run_dir`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from infra import memfit
    from kernels import packing

    cuda = device == "cuda"
    # (rollouts, prompt tokens, completion tokens): the paper's groups of 8 with long completions on a GPU
    rows, prompt_len, completion_len = (16, 512, 4096) if cuda and not quick else (8, 48, 64)
    cfg = config.load_config(
        "tiny",
        [
            f"precision={'bf16' if cuda else 'fp32'}",
            "group_size=8",
            f"max_prompt_tokens={prompt_len}",
            f"max_completion_tokens={completion_len}",
            f"micro_batch_tokens={4 * (prompt_len + completion_len)}",
        ],
    )
    policy = pol.load_policy(cfg.model, torch.device(device), pol.compute_dtype(cfg))
    model_dir, shape = cfg.model, "tiny"
    if cuda and not quick:  # the Qwen3-1.7B shape, random weights, with the tiny tokenizer's ids
        shape = "Qwen/Qwen3-1.7B"
        torch.manual_seed(0)
        with torch.device(device):
            policy.model = Qwen3ForCausalLM(Qwen3Config(**memfit.QWEN3_SHAPES[shape], pad_token_id=0)).float()
        model_dir = str(run_dir / "model")
        policy.model.save_pretrained(model_dir)
    read, plan = confidence.READS["readout"], confidence.plan(cfg)
    engine = eng.make_engine(cfg, plan, policy.model, policy.tokenizer, model_dir, run_dir, policy.dtype)
    rng = torch.Generator().manual_seed(0)
    rollouts = []
    for q in range(rows // cfg.group_size):
        prompt = torch.randint(3, 1000, (prompt_len,), generator=rng).tolist()
        for _ in range(cfg.group_size):
            completion = torch.randint(3, 1000, (completion_len,), generator=rng).tolist()
            c = completion_len
            seg = ro.Segments(c - 12, c - 11, c - 3, c - 2, None, True, True, True)
            rollouts.append(ro.Rollout(f"q{q}", prompt, completion, "", "stop", seg))
    contexts, probes = ro.slot_contexts(rollouts), [[policy.high_id], [policy.low_id]]

    def timed(fn):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        value = fn()
        if cuda:
            torch.cuda.synchronize()
        return value, time.perf_counter() - start

    _, cold_s = timed(lambda: eng.probe_logprobs(engine, contexts, probes))  # prefills every context
    logp, warm_s = timed(lambda: eng.probe_logprobs(engine, contexts, probes))  # from the prefix cache
    c_engine = read.from_logprobs(logp).float()
    batch = pol.collate(rollouts, policy.tokenizer.pad_token_id)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    micro = packing.micro_batches(lengths, cfg.micro_batch_tokens, cfg.group_size, packed=True)
    pol.confidences(policy, batch, micro, True, read)  # warm-up
    c_trainer, pass_s = timed(lambda: pol.confidences(policy, batch, micro, True, read))
    engine.close()
    gaps = (c_engine - c_trainer).abs()
    tolerance = 0.05 if cuda else 1e-5  # bf16 kernels against fp32 weights under autocast; fp32 both
    figures = {
        "shape": shape,
        "rollouts": rows,
        "tokens_per_rollout": prompt_len + completion_len,
        "c_gap_mean": round(float(gaps.mean()), 7),
        "c_gap_max": round(float(gaps.max()), 7),
        "engine_read_cached_s": round(warm_s, 4),
        "engine_read_prefill_s": round(cold_s, 4),
        "trainer_pass_s": round(pass_s, 4),
    }
    status = "pass" if figures["c_gap_max"] <= tolerance else "fail"
    reason = (
        f"|c_engine - c_trainer| max {figures['c_gap_max']:.2e} (tolerance {tolerance:g}), mean "
        f"{figures['c_gap_mean']:.2e}; engine read {warm_s:.3f} s cached, {cold_s:.3f} s prefilled; trainer pass "
        f"{pass_s:.3f} s ({shape}, {rows} x {prompt_len + completion_len} tokens)"
    )
    return {"status": status, "reason": reason, **figures}


CHILDREN = {
    "environment": child_environment,
    "hf_engine": child_hf_engine,
    "vllm_engine": child_vllm_engine,
    "credit_source": child_credit_source,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated checks to run, of: {','.join(CHECKS)}")
    parser.add_argument("--skip", help="comma-separated checks not to run (listed as skipped)")
    parser.add_argument("--out", type=Path, help="the report's path (default bench/results/gpucheck-<date>-<gpu>.json)")
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere (test hook; figures meaningless)")
    parser.add_argument("--budget", type=float, default=600, help="total seconds for all checks (default 600)")
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # test hook: run without CUDA
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.device, args.quick)))
        return 0
    if args.device == "cpu" and not args.allow_cpu:
        parser.error("--device cpu is a test hook: it needs --allow-cpu")
    try:
        plan = select(list(CHECKS), args.only, args.skip)
    except ValueError as err:
        parser.error(str(err))

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpucheck: torch sees no CUDA device on this machine; run it where a GPU is (nothing was written)",
            file=sys.stderr,
        )
        return 2
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as work:
        checks = run_checks(Context(args.device, args.quick, Path(work)), plan, args.budget)
    result = report(checks, device_name, argv)
    out = args.out or ROOT / "bench" / "results" / f"gpucheck-{datetime.now(UTC):%Y-%m-%d}-{gpu_slug(device_name)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(checks))
    print(f"report: {out}")
    return 1 if result["summary"]["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
