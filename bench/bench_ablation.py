"""What each change of the training step buys: credo's step with one change taken back at a
time, on bench_step's inputs, timed side by side.

    python bench/bench_ablation.py [--models tiny l4h256] [--repeats 9 3]

Variants (each trains its own copy of the model from the same weights, on the same rollouts):
* credo:              the default step (as bench_step's `credo`: credit's c read by the engine,
                      prepared before the timer for every variant alike).
* no_score_mask:      log-probs of every column, prompt included, through the vocabulary
                      projection (packing.States.logprobs given the prompt's columns to score too).
* row_micro_batches:  micro-batches of `per_device_batch_size` rows of whole groups (the
                      plan before micro_batch_tokens) instead of the token budget.
* padded:             pack_sequences=false (micro-batches padded to their longest row).
* reference:          bench_step's padded full-logits reference.
Before timing, the first step of every variant is checked to give credo's losses (the
variants do the same work). Times are medians over rounds, reported relative to credo
(1.15 = 15% slower without that change). Prints one JSON line and writes
bench/results/step_ablation_<device>.json.
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import bench_step  # noqa: E402
from bench.results_io import report  # noqa: E402
from kernels import packing  # noqa: E402
from schema import Config  # noqa: E402


def row_micro_batches(lengths: list[int], rows: int, group: int) -> list[list[int]]:
    """The plan before micro_batch_tokens: whole groups, ordered by their longest member, rows // group at a time."""
    groups = sorted(range(len(lengths) // group), key=lambda q: (max(lengths[q * group : (q + 1) * group]), q))
    per = max(rows // group, 1)
    return [[q * group + i for q in groups[k : k + per] for i in range(group)] for k in range(0, len(groups), per)]


def prompt_columns(states: packing.States, scored: torch.Tensor) -> torch.Tensor:
    """[N, L-1] host bool: the columns that predict each row's prompt tokens (a packed layout's rows)."""
    if states.packing is None:
        raise ValueError("the no_score_mask variant runs on packed rows (pack_sequences=true)")
    columns = torch.arange(scored.shape[1]).expand_as(scored)  # [N, L-1]
    return columns < states.packing.prompt_len[:, None] - 1


def variant(step_args: tuple, cfg: Config, score_mask: bool = True, row_plan: bool = False, packed: bool = True):
    """credo's step with the given changes taken back (functions swapped for the call: policy.forward
    calls packing.States.logprobs, credo.make_step calls packing.micro_batches), taking the
    engine's reads of c (bench_step.engine_reads)."""

    def step(model, optimizer, reads):
        scored_only, plan = packing.States.logprobs, packing.micro_batches
        if not score_mask:  # the prompt's columns through the vocabulary projection too; the loss reads the scored
            packing.States.logprobs = lambda self, head, ids, scored: torch.where(
                scored.to(self.hidden.device), scored_only(self, head, ids, scored | prompt_columns(self, scored)), 0.0
            )
        if row_plan:
            packing.micro_batches = lambda lengths, budget, group, packed: row_micro_batches(
                lengths, cfg.per_device_batch_size, cfg.group_size
            )
        try:
            return bench_step.credo_step(model, optimizer, *step_args, packed=packed, reads=reads)
        finally:
            packing.States.logprobs, packing.micro_batches = scored_only, plan

    return step


def ablate(name: str, repeats: int) -> dict:
    model, _, _, _, args = bench_step.step_inputs(name)
    cfg = args[4]
    paths = {
        "credo": variant(args, cfg),
        "no_score_mask": variant(args, cfg, score_mask=False),
        "row_micro_batches": variant(args, cfg, row_plan=True),
        "padded": variant(args, cfg, packed=False),
        "reference": lambda m, o, reads: bench_step.reference_step(m, o, *args),
    }
    models = {key: copy.deepcopy(model) for key in paths}
    optimizers = {key: bench_step.make_optimizer(models[key], cfg) for key in paths}
    reads = lambda key: None if key == "reference" else bench_step.engine_reads(models[key], *args)  # noqa: E731
    # warm-up, and the equal-work check
    first = {key: paths[key](models[key], optimizers[key], reads(key)) for key in paths}
    for key, stats in first.items():
        for loss in ("loss_pg", "loss_cal"):
            if abs(getattr(stats, loss) - getattr(first["credo"], loss)) > 1e-5:
                raise AssertionError(
                    f"{name}: {key} gives {loss} {getattr(stats, loss)}, credo {getattr(first['credo'], loss)}"
                )
    times = {key: [] for key in paths}
    for _ in range(repeats):
        for key in paths:
            prepared = reads(key)  # the engine's share: the rollout phase's, not the step's
            start = time.perf_counter()
            paths[key](models[key], optimizers[key], prepared)
            times[key].append(time.perf_counter() - start)
    med = {key: statistics.median(v) for key, v in times.items()}
    return {
        "model": name,
        "rounds": repeats,
        "credo_s": round(med["credo"], 4),
        **{f"{key}_vs_credo": round(med[key] / med["credo"], 3) for key in paths if key != "credo"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "l4h256"], choices=list(bench_step.SHAPES))
    parser.add_argument("--repeats", nargs="+", type=int, default=[9, 3], help="rounds per model, in order")
    parser.add_argument("--threads", type=int, default=0 if torch.cuda.is_available() else 1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = (
        (args.repeats * len(args.models))[: len(args.models)] if len(args.repeats) < len(args.models) else args.repeats
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = {
        "bench": "step_ablation",
        "command": " ".join(["python"] + sys.argv),
        "device": device,
        "threads": torch.get_num_threads(),
        "by_model": {name: ablate(name, r) for name, r in zip(args.models, repeats)},
    }
    report(result, f"step_ablation_{device}")


if __name__ == "__main__":
    main()
