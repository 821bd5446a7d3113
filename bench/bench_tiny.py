"""Throughput of the real loop on `configs/tiny.yaml` (vLLM engine, verifier, update, sync).

    python bench/bench_tiny.py [--steps 12] [key=value ...]

Runs the training loop in a temporary directory and reports medians over the steps
after the first (which includes warm-up): rollout and training tokens/s, and the share
of step time spent in rollout, verify, train and sync. Prints one JSON line and writes
it to bench/results/tiny_step_<device>_<engine>.json.
"""

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import report  # noqa: E402


def tiny_run(steps: int, overrides: list[str], on_batch=None) -> dict:
    """Train `steps` steps of tiny.yaml; the medians of metrics.jsonl after the first step.
    on_batch(batch, cfg): called with every training batch (e.g. to record its lengths)."""
    import torch

    import config
    import credo

    original = credo.train_step

    def recording(learner, step):
        on_batch(step.batch, learner.cfg)
        return original(learner, step)

    if on_batch is not None:
        credo.train_step = recording
    try:
        with tempfile.TemporaryDirectory() as out:
            cfg = config.load_config("tiny", [f"max_steps={steps}", f"out_dir={out}", "save_every=1000", *overrides])
            start = time.perf_counter()
            run_dir = credo.train(cfg)
            wall = time.perf_counter() - start
            lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    finally:
        credo.train_step = original
    med = lambda key: statistics.median(m[key] for m in lines)
    phases = ("rollout", "verify", "train", "sync")
    total = sum(med(f"t_{p}") for p in phases)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {
        "bench": "tiny_step",
        "device": device,
        "machine": platform.machine(),
        "engine": cfg.engine,
        "steps": steps,
        "rollouts_per_step": cfg.per_device_batch_size * cfg.grad_accum,
        "rollout_tok_s": round(med("rollout_tok_s"), 1),
        "train_tok_s": round(med("train_tok_s"), 1),
        "step_s": round(total, 4),
        **{f"share_{p}": round(med(f"t_{p}") / total, 3) for p in phases},
        "pad_fraction": round(med("pad_fraction"), 4) if all("pad_fraction" in m for m in lines) else None,
        "wall_s_including_startup": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    result = tiny_run(args.steps, args.overrides)
    report(result, f"tiny_step_{result['device']}_{result['engine']}")


if __name__ == "__main__":
    main()
