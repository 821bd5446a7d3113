"""Where credit's detached c comes from (credit_confidence): the engine's read at each slot
against the trainer's no-grad pass, on real runs of the loop: how well they agree, what the
difference does to credit, and what each costs in the step's phases.

    python bench/bench_credit_source.py [--configs tiny toy] [--steps 20] [--runs 2]

For each config, `--runs` runs of each source (`python credo.py <config> max_steps=<steps>
credit_confidence=engine|trainer`, each in its own process, the sources alternating), in a
temporary directory:

* agreement: the engine runs record both c of every rollout (c_engine, and c_trainer from the
  update's forward, the same weights), so the mean and largest |c_engine - c_trainer| over every
  rollout of every step;
* credit: each step's credit computed twice from those records (methods.credit with the run's
  config and the step's kappa: once from c_engine, once from c_trainer), and the largest
  difference of each quantity;
* cost: medians over steps after the first (warm-up) of the rollout phase (which holds the
  engine's read) and the training phase (which holds the trainer's pass), and of the whole step,
  pooled over the runs of a source.

Prints one JSON line and writes bench/results/credit_source_<device>.json.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import config  # noqa: E402
import methods  # noqa: E402
from bench.results_io import report  # noqa: E402

PHASES = ("rollout", "verify", "train", "sync")
CREDIT = ("target", "r_ans", "r_conf", "w", "adv_ans", "adv_conf")


def run(config_name: str, steps: int, source: str, out: Path, name: str) -> Path:
    """One training run in its own process; its run directory."""
    argv = [
        sys.executable,
        str(ROOT / "credo.py"),
        config_name,
        f"max_steps={steps}",
        f"credit_confidence={source}",
        f"out_dir={out}",
        f"run_name={name}",
        "save_every=100000",
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return out / name


def records(run_dir: Path) -> tuple[list[dict], list[list[dict]]]:
    """(metrics.jsonl's lines, each step's rollout records)."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = sorted((run_dir / "rollouts").glob("step_*.jsonl"))
    return metrics, [[json.loads(line) for line in path.read_text().splitlines()] for path in steps]


def credit_differences(run_dir: Path, metrics: list[dict], steps: list[list[dict]]) -> dict:
    """The largest |credit from c_engine - credit from c_trainer| of each quantity, over every step."""
    cfg = config.load_config(str(run_dir / "config.yaml"))
    largest = dict.fromkeys(CREDIT, 0.0)
    for line, rows in zip(metrics, steps):
        correct = torch.tensor([row["a"] for row in rows])
        fmt = torch.tensor([float(row["format"]) for row in rows])
        credit = {}
        for source in ("c_engine", "c_trainer"):
            c = torch.tensor([float("nan") if row[source] is None else row[source] for row in rows])
            credit[source] = methods.credit(correct, fmt, methods.Confidences(c, c), cfg, line["kappa"])
        for name in CREDIT:
            gap = (getattr(credit["c_engine"], name) - getattr(credit["c_trainer"], name)).abs().max()
            largest[name] = max(largest[name], float(gap))
    return largest


def bench_config(config_name: str, steps: int, runs: int) -> dict:
    by_source = {"engine": [], "trainer": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(runs):
            for source in by_source:
                run_dir = run(config_name, steps, source, Path(tmp), f"{source}-{k}")
                by_source[source].append((run_dir, *records(run_dir)))
        gaps, gap_max, credit = [], 0.0, dict.fromkeys(CREDIT, 0.0)
        for run_dir, metrics, steps_rows in by_source["engine"]:
            for rows in steps_rows:
                gaps += [abs(r["c_engine"] - r["c_trainer"]) for r in rows if r["c_engine"] is not None]
            gap_max = max([gap_max] + [m["engine_conf_gap_max"] or 0.0 for m in metrics])
            for name, value in credit_differences(run_dir, metrics, steps_rows).items():
                credit[name] = max(credit[name], value)
    result = {"config": config_name, "steps": steps, "runs_per_source": runs}
    for source, done in by_source.items():
        lines = [m for _, metrics, _ in done for m in metrics[1:]]  # after each run's first step
        result[source] = {
            **{f"t_{p}_s": round(statistics.median(m[f"t_{p}"] for m in lines), 4) for p in PHASES},
            "step_s": round(statistics.median(sum(m[f"t_{p}"] for p in PHASES) for m in lines), 4),
            "readout_pass_rows": sorted({m["readout_pass_rows"] for m in lines}),
            "rollouts_per_step": len(done[0][2][0]),
        }
    result["c_gap_mean"] = statistics.fmean(gaps) if gaps else None
    result["c_gap_max"] = gap_max
    result["rollouts_with_both_c"] = len(gaps)
    result["credit_max_diff"] = credit
    result["train_phase_engine_vs_trainer"] = round(result["engine"]["t_train_s"] / result["trainer"]["t_train_s"], 3)
    result["rollout_phase_engine_vs_trainer"] = round(
        result["engine"]["t_rollout_s"] / result["trainer"]["t_rollout_s"], 3
    )
    result["step_engine_vs_trainer"] = round(result["engine"]["step_s"] / result["trainer"]["step_s"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "toy"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    by_config = {name: bench_config(name, args.steps, args.runs) for name in args.configs}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = {
        "bench": "credit_source",
        "command": " ".join(["python"] + sys.argv),
        "device": device,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "by_config": by_config,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    report(result, f"credit_source_{device}")


if __name__ == "__main__":
    main()
