"""Run every benchmark of bench/ in turn (`bash run.sh bench`); each writes bench/results/<name>.json.

    python bench/run_all.py [--quick] [--only logprobs,step,...] [--trl-setup]

Sizes are chosen for the whole suite to take about 20 minutes on a 2-core CPU;
`--quick` shrinks them (a smoke run, ratios noisier). Benchmarks run one after the
other (never two at once: they would share the cores and skew the ratios). The TRL
comparison of bench_step needs .cache/bench-trl-venv: `--trl-setup` creates it
(python3.11 venv, CPU torch, trl from PyPI) when missing; without it bench_step
reports `trl_error`. A failing benchmark is reported and the others still run;
the exit status is 1 if any failed. `--quick` writes its results under
bench/results/quick/ so that it never replaces a full run's.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRL_VENV = ROOT / ".cache" / "bench-trl-venv"

SUITE = {
    "verifier": (
        ["bench/bench_verifier.py", "--math-items", "300", "--repeats", "20"],
        ["bench/bench_verifier.py", "--math-items", "60", "--repeats", "5"],
    ),
    "padding": (["bench/bench_padding.py", "--steps", "6"], ["bench/bench_padding.py", "--no-loop"]),
    "step": (["bench/bench_step.py", "--repeats", "5"], ["bench/bench_step.py", "--models", "tiny", "--repeats", "2"]),
    "ablation": (["bench/bench_ablation.py"], ["bench/bench_ablation.py", "--models", "tiny", "--repeats", "2"]),
    "rollout": (
        ["bench/bench_rollout.py", "--repeats", "3", "--steps", "10"],
        ["bench/bench_rollout.py", "--repeats", "1", "--questions", "2", "--no-loop"],
    ),
    "mfu": (["bench/bench_mfu.py"], ["bench/bench_mfu.py", "--iters", "2", "--seq", "256"]),
    "logprobs": (
        ["bench/bench_logprobs.py", "--seq", "1024", "4096", "8192", "--repeats", "1"],
        ["bench/bench_logprobs.py", "--seq", "1024", "--repeats", "1"],
    ),
}


def trl_setup() -> None:
    python = shutil.which("python3.11") or sys.executable
    subprocess.run([python, "-m", "venv", str(TRL_VENV)], check=True)
    pip = [str(TRL_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"], check=True)
    subprocess.run(pip + ["trl"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(SUITE))
    parser.add_argument("--trl-setup", action="store_true")
    args = parser.parse_args()
    unknown = [name for name in args.only.split(",") if name not in SUITE]
    if unknown:
        sys.exit(f"bench: --only {unknown}: unknown benchmark(s); choose from {', '.join(SUITE)} (comma-separated)")
    if args.trl_setup and not (TRL_VENV / "bin" / "python").exists():
        trl_setup()
    failed, summary = [], {}
    for name in args.only.split(","):
        command = [sys.executable, *SUITE[name][1 if args.quick else 0]]
        print(f"[bench] {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        env = dict(os.environ)
        if args.quick:
            env["CREDO_BENCH_RESULTS"] = str(ROOT / "bench" / "results" / "quick")
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        elapsed = time.perf_counter() - start
        lines = out.stdout.strip().splitlines()
        if out.returncode or not lines:
            failed.append(name)
            print(f"[bench] {name} FAILED ({out.returncode}):\n{out.stderr[-3000:]}", flush=True)
            continue
        result = json.loads(lines[-1])
        keys = (
            "peak_mem_ratio",
            "time_ratio",
            "speedup_vs_reference",
            "speedup_vs_trl",
            "pad_fraction",
            "vllm_vs_hf_tok_s_ratio",
            "share_rollout",
            "share_verify",
            "share_train",
            "share_sync",
            "achieved_tflop_s",
            "mfu",
        )
        summary[name] = {k: result[k] for k in keys if k in result} | {"seconds": round(elapsed, 1)}
        if name == "verifier":
            summary[name] |= {
                "math_items_per_s": {w: v["items_per_s"] for w, v in result["math"]["by_workers"].items()},
                "code_stdio_1_test_ms": result["code"]["stdio_1_test_ms"],
            }
        print(f"[bench] {name} ({elapsed:.0f} s): {json.dumps(summary[name])}", flush=True)
    print(json.dumps({"bench": "suite", "quick": args.quick, "failed": failed, "summary": summary}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
