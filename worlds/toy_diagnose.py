"""Diagnostics of finished toy runs, behind docs/toy.md's account of CREDO's accuracy cost.

    python -m worlds.toy_diagnose styles ROW [ROW ...] [--bin 20]
    python -m worlds.toy_diagnose cells ROW [ROW ...]
    python -m worlds.toy_diagnose adam ROW [ROW ...] --against GRPO_ROW

A ROW is one row of a `worlds/toy_tables.py` run (`<out>/credo`, holding `s53/`, `s54/`, ...) or one of
its jobs (`<out>/credo/s53`, holding `run/`).

* `styles`: the share of direct-style samples among those of two additions or more (level 1 is
  one text in both styles), in the training rollouts by bins of steps and in the evaluation
  samples, pooled over the row's seeds. RL on the toy gains accuracy by learning the direct style
  away (docs/toy.md), so this share is how fast a row learns, step by step.
* `cells`: the evaluation's accuracy by level and style, pooled over the row's seeds: where a
  row's accuracy differs from another's, the style it chose or the sums it writes in a style.
* `adam`: for each seed, the median over the trunk's tensors (every parameter but the embeddings
  and the output projection) of the ratio of the median square root of AdamW's second moment at
  the last checkpoint to the same seed's of `--against`. A ratio r > 1 means every update of the
  policy gradient's part was divided by about r more than the other row's: a term like `L_cal`
  whose gradient fills the second moment slows RL without pointing against it.

Not here: training (credo.py), evaluation (eval.py), the tables and claims (worlds/toy_tables.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from evaluation.report import read_samples
from infra.checkpoint import latest_checkpoint
from worlds.toy_build import levels_of, solution_style


def jobs_of(row: Path) -> list[Path]:
    """The job directories of a row (or the job itself), each holding `run/`."""
    if (row / "run").is_dir():
        return [row]
    jobs = sorted(p for p in row.glob("s*") if (p / "run").is_dir())
    if not jobs:
        raise SystemExit(f"{row}: neither a toy_tables job (no run/) nor a row of jobs (no s*/run/)")
    return jobs


def world_levels(job: Path) -> dict[str, int]:
    """{problem id: level} over every split of the world the job trained on."""
    cache = Path(yaml.safe_load((job / "run" / "config.yaml").read_text())["train_data"]).parent
    levels: dict[str, int] = {}
    for split in sorted(cache.glob("*.jsonl")):
        levels.update(levels_of(split))
    return levels


def direct_share(records: list[tuple[str, str]], levels: dict[str, int]) -> tuple[int, int]:
    """(direct, counted) over (problem id, text) pairs of level 2 or more.

    >>> direct_share([("a", "1 + 2 + 3 = 6. The answer is"), ("a", "1 + 2 = 3, 3 + 3 = 6. The answer is"),
    ...               ("b", "1 + 2 = 3. The answer is")], {"a": 2, "b": 1})
    (1, 2)
    """
    styles = [solution_style(text) for pid, text in records if levels[pid] >= 2]
    return sum(s == "direct" for s in styles), len(styles)


def training_records(job: Path, bin_steps: int) -> dict[int, list[tuple[str, str]]]:
    """{first step of a bin: [(question id, text)]} from the job's saved rollouts."""
    rollouts = job / "run" / "rollouts"
    if not rollouts.is_dir():
        raise SystemExit(f"{job}: no run/rollouts/ (the training's rollouts were not saved)")
    bins: dict[int, list[tuple[str, str]]] = {}
    for path in sorted(rollouts.glob("step_*.jsonl")):
        step = int(path.stem.split("_")[1])
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        bins.setdefault(step - step % bin_steps, []).extend((r["question_id"], r["text"]) for r in rows)
    return bins


def eval_records(job: Path) -> list[dict]:
    """The job's evaluation samples, one per generated sample: eval.py writes a sample once per
    confidence source it reads (GRPO's: the numeral and the digit readout)."""
    path = job / "eval" / "samples.jsonl"
    if not path.exists():
        return []
    return list({(r["problem_id"], r["sample"]): r for r in read_samples(path)}.values())


def style_table(row: Path, bin_steps: int) -> dict[str, float | None]:
    """{"steps 0-19": share, ..., "eval": share} pooled over the row's jobs (None: nothing counted)."""
    counts: dict[str, list[int]] = {}
    for job in jobs_of(row):
        levels = world_levels(job)
        parts = {f"steps {s}-{s + bin_steps - 1}": recs for s, recs in training_records(job, bin_steps).items()}
        parts["eval"] = [(r["problem_id"], r["text"]) for r in eval_records(job)]
        for name, recs in parts.items():
            d, n = direct_share(recs, levels)
            tally = counts.setdefault(name, [0, 0])
            tally[0], tally[1] = tally[0] + d, tally[1] + n
    order = sorted((k for k in counts if k != "eval"), key=lambda k: int(k.split()[1].split("-")[0])) + ["eval"]
    return {k: (counts[k][0] / counts[k][1] if counts[k][1] else None) for k in order}


def cell_accuracy(row: Path) -> dict[str, tuple[float, int]]:
    """{"L1": (accuracy, samples), "L2 direct": ..., "L2 steps": ..., ...} of the evaluation
    samples by level and style (level 1 is one cell), pooled over the row's jobs."""
    cells: dict[tuple[int, str], list[int]] = {}
    for job in jobs_of(row):
        levels = world_levels(job)
        for r in eval_records(job):
            level = levels[r["problem_id"]]
            tally = cells.setdefault((level, solution_style(r["text"]) if level >= 2 else ""), [0, 0])
            tally[0], tally[1] = tally[0] + int(r["a"]), tally[1] + 1
    if not cells:
        raise SystemExit(f"{row}: no evaluation samples (eval/samples.jsonl) in its jobs")
    return {f"L{level} {style}".strip(): (a / n, n) for (level, style), (a, n) in sorted(cells.items())}


def second_moment_scale(ckpt: Path) -> dict[str, float]:
    """{parameter name: median sqrt(AdamW second moment)} of a single-process checkpoint."""
    state_path = ckpt / "optimizer.pt"
    if not state_path.exists():
        raise SystemExit(f"{ckpt}: no optimizer.pt (a sharded checkpoint, or not a credo checkpoint)")
    with torch.device("meta"):  # names in model.parameters() order, which the optimizer's state follows
        names = [n for n, _ in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt)).named_parameters()]
    state = torch.load(state_path, map_location="cpu", weights_only=False)["state"]
    if len(state) != len(names):
        raise SystemExit(f"{ckpt}: optimizer state holds {len(state)} tensors, the model {len(names)}")
    return {names[i]: s["exp_avg_sq"].sqrt().flatten().median().item() for i, s in state.items()}


def trunk_ratio(mine: dict[str, float], other: dict[str, float]) -> float:
    """Median over the trunk's tensors of mine / other (tensors where `other` is 0 are left out).

    >>> names = ["model.layers.0.w", "model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"]
    >>> trunk_ratio(dict(zip(names, [2.0, 3.0, 9.0, 9.0])), dict.fromkeys(names, 1.0))
    2.5
    """
    trunk = [n for n in mine if "embed_tokens" not in n and "lm_head" not in n and other.get(n)]
    if not trunk:
        raise SystemExit("no trunk tensor with a second moment in both checkpoints")
    return statistics.median(mine[n] / other[n] for n in trunk)


def adam_ratios(row: Path, against: Path) -> dict[str, float]:
    """{seed job name: trunk_ratio} for the jobs of `row` that `against` has too."""
    theirs = {job.name: job for job in jobs_of(against)}
    out = {}
    for job in jobs_of(row):
        if job.name not in theirs:
            raise SystemExit(f"{against} has no job {job.name} to compare {job} with")
        mine_ckpt, their_ckpt = (latest_checkpoint(j / "run") for j in (job, theirs[job.name]))
        out[job.name] = trunk_ratio(second_moment_scale(mine_ckpt), second_moment_scale(their_ckpt))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    st = sub.add_parser("styles", help="direct-style share by training steps and at evaluation")
    st.add_argument("rows", nargs="+", type=Path)
    st.add_argument("--bin", type=int, default=20, help="steps per bin of training rollouts")
    ce = sub.add_parser("cells", help="evaluation accuracy by level and style")
    ce.add_argument("rows", nargs="+", type=Path)
    ad = sub.add_parser("adam", help="AdamW second moment of the trunk relative to another row's")
    ad.add_argument("rows", nargs="+", type=Path)
    ad.add_argument("--against", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.what == "styles":
        if args.bin < 1:
            raise SystemExit(f"--bin must be at least 1, got {args.bin}")
        for row in args.rows:
            table = style_table(row, args.bin)
            print(row, "  ".join(f"{k}: {'-' if v is None else f'{v:.3f}'}" for k, v in table.items()))
    elif args.what == "cells":
        for row in args.rows:
            print(row, "  ".join(f"{k}: {acc:.3f} ({n})" for k, (acc, n) in cell_accuracy(row).items()))
    else:
        for row in args.rows:
            ratios = adam_ratios(row, args.against)
            print(row, "  ".join(f"{k}: {v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
