"""Peak memory and time of one update, with LoRA on and off and a KL term on and off, at this
commit and at an earlier one.

    python bench/bench_lora.py --before <commit> [--models tiny l4h256] [--repeats 3]

Each cell is a fresh process (so that one cell's allocations cannot hide another's) that builds
bench_step's inputs for a model (`tiny`: 2 layers, hidden 64, vocabulary 1,088; `l4h256`: 4 layers,
hidden 256, Qwen3's vocabulary of 151,936, an untied head), applies LoRA (lora_rank=8 on the
default targets) where the cell says, adds a KL term (kl_coef=0.01) where it says, and runs
`credo.train_step` once to warm up, then `--repeats` more, timed. The reference of the KL term is
what `credo.setup` gives at that commit: a frozen copy of the starting model, or, at a commit
whose LoRA has `adapters_off`, none under LoRA (the same weights with the adapters off).

Memory is the process's resident set, on the CPU, in MiB above what it held once its libraries
were imported: `held` after the warm-up (the weights, any reference, AdamW's state), `peak` its
high-water mark over the timed updates (VmHWM, reset after the warm-up through
/proc/self/clear_refs). Time: the median update in seconds, one torch thread.

`--before` measures that commit too, in a temporary git worktree that shares this checkout's
.cache (this file is copied into it); every row names the commit it was measured at. Prints one
JSON line and writes bench/results/lora_cpu.json.
"""

import argparse
import copy
import dataclasses
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

import credo  # noqa: E402
import methods  # noqa: E402
import policy as pol  # noqa: E402
import verifier  # noqa: E402
from adapters import lora  # noqa: E402
from bench.bench_step import STEP, step_inputs  # noqa: E402
from bench.results_io import report  # noqa: E402

CELLS = [(False, False), (False, True), (True, False), (True, True)]  # (LoRA, KL)
LORA_RANK, KL_COEF = 8, 0.01


def status_kib(key: str) -> int:
    """A line of /proc/self/status in KiB (VmRSS, VmHWM)."""
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


def needs_copy(cfg, use_lora: bool) -> bool:
    """Whether credo.setup loads a frozen copy of the starting model at this commit (its rule,
    restated): for a KL term, unless LoRA can read the reference with its adapters off."""
    return methods.needs_reference(cfg) and not (use_lora and hasattr(lora, "adapters_off"))


def one_cell(model_name: str, use_lora: bool, use_kl: bool, repeats: int) -> dict:
    """One cell in this process: the update's memory and median time."""
    torch.set_num_threads(1)
    base_kib = status_kib("VmRSS")
    model, _, _, _, args = step_inputs(model_name)
    batch, correct, fmt, valid, cfg, high_id, low_id = args
    cfg = dataclasses.replace(cfg, lora_rank=LORA_RANK if use_lora else 0, kl_coef=KL_COEF if use_kl else 0.0)
    policy = pol.Policy(model, None, high_id, low_id, pol.compute_dtype(cfg))
    reference = None
    if needs_copy(cfg, use_lora):  # the starting model, frozen, as credo.load_reference loads it
        reference = dataclasses.replace(policy, model=copy.deepcopy(model).requires_grad_(False).eval())
    if use_lora:
        lora.apply(model, cfg, (high_id, low_id))
    verdicts = [verifier.Verdict(passed=a == 1, reason="set by hand") for a in correct.tolist()]
    out = credo.Outcomes(
        correct=correct, verdicts=verdicts, fmt=fmt, valid=valid, reported=None, truncated=torch.zeros_like(valid)
    )
    learner = credo.Learner(policy, credo.make_optimizer(model, cfg, "cpu"), cfg)
    learner.reference = reference

    def step() -> float:
        t0 = time.perf_counter()
        credo.train_step(learner, credo.make_step(cfg, STEP, batch, out))
        return time.perf_counter() - t0

    step()  # warm-up: AdamW's state exists from here
    held_kib = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    seconds = [step() for _ in range(repeats)]
    peak_kib = status_kib("VmHWM")
    return {
        "model": model_name,
        "lora": use_lora,
        "kl": use_kl,
        "held_mib": round((held_kib - base_kib) / 1024, 1),
        "peak_mib": round((peak_kib - base_kib) / 1024, 1),
        "step_s": round(statistics.median(seconds), 3),
    }


def commit_of(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def measure(tree: Path, models: list[str], repeats: int) -> list[dict]:
    """Every cell of `models` with the code of `tree` (a checkout holding this file), a process each."""
    rows = []
    for model_name in models:
        for use_lora, use_kl in CELLS:
            argv = [sys.executable, str(tree / "bench" / "bench_lora.py"), "--cell", model_name]
            argv += [str(int(use_lora)), str(int(use_kl)), "--repeats", str(repeats)]
            done = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[1:])} in {tree} failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({**row, "commit": commit_of(tree)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def measure_before(commit: str, models: list[str], repeats: int) -> list[dict]:
    """measure() at `commit`, in a temporary worktree that shares this checkout's .cache."""
    with tempfile.TemporaryDirectory(prefix="credo-before-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True)
        try:
            (tree / ".cache").symlink_to(ROOT / ".cache")
            shutil.copy(Path(__file__), tree / "bench" / "bench_lora.py")
            return measure(tree, models, repeats)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "l4h256"], choices=["tiny", "l4h256"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", help="a commit to measure as well (e.g. the one before a change)")
    parser.add_argument("--cell", nargs=3, metavar=("MODEL", "LORA", "KL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        model_name, use_lora, use_kl = args.cell
        print(json.dumps(one_cell(model_name, use_lora == "1", use_kl == "1", args.repeats)))
        return
    rows = measure(ROOT, args.models, args.repeats)
    if args.before:
        rows += measure_before(args.before, args.models, args.repeats)
    command = "python bench/bench_lora.py " + " ".join(sys.argv[1:])
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.machine()}
    report({"benchmark": "lora", "command": command, "machine": machine, "rows": rows}, "lora_cpu")


if __name__ == "__main__":
    main()
