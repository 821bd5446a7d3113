"""The paper's `tab:main` and `tab:ablation` in miniature, on the toy (`bash run.sh toy --tables`).

    python -m worlds.toy_tables                       # tab:main's rows, 3 training seeds (44, 45, 46), 2 jobs at a time
    python -m worlds.toy_tables --rows all            # tab:ablation's rows too (about twice the time)
    python -m worlds.toy_tables --rows credo,grpo --seeds 2 --out runs/toy-tables-small
    python -m worlds.toy_tables --seed-list 47,48     # more seeds into the same tables (resumes the rest)
    python -m worlds.toy_tables --world runs/w1       # on a world built with `python -m worlds.toy_build --rebuild`

Holds: the rows (each a `credo.py configs/toy.yaml` override set and the channel it is read
through), one job per row and training seed (train, then evaluate the last checkpoint on the
held-out split), and the tables and figure made from the jobs' results. It does not hold the
world (worlds/toy_build.py; the shipped one is worlds/toy_world/), the loop (credo.py), the
metrics (metrics.py, evaluation/report.py) or the claims and their statistics
(worlds/toy_claims.py).

Each finished job leaves `<out>/<row>/s<seed>/result.json`, written last: an interrupted run
started again with the same arguments skips the jobs that finished and redoes the others
from scratch. The configuration is configs/toy.yaml for every row, as `worlds/toy.py` trains it; the
training seeds are not the tuning seed (101) nor those of docs/toy.md's first measurements.

`--split dev` evaluates on the development split instead: the first 250 *training* problems
(`dev.jsonl` in the world's folder), where a configuration is tuned (with training seed 101) before
it is fixed and measured on the held-out split with fresh seeds. `--split extra` evaluates on 750
more held-out problems (`extra.jsonl`: the held-out generator's problems 250-999, after the world's
250; like those, none of them a training problem), where a claim measured on the 250 can be
measured again with 1/sqrt(3) of the problem-sampling SD. `--checkpoints-from DIR` evaluates
the checkpoints that a finished run under DIR trained (same world and overrides) instead of
training again: the same models on another split.

Outputs under `--out` (default runs/toy-tables/): `tables.md` (both tables as the paper lays
them out, mean and 95% t-interval over seeds, with the date, machine and wall time),
`tables.json` (every job's metrics and the aggregates) and `tables.png`/`.pdf` (each row's
Acc, ECE, AUROC and Brier with their intervals and the seeds as dots). tab:main's Base row is the
warm start read through its verbalized numeral, as in the paper; "Base (readout)" is the same warm
start read through the readout, CREDO's before (each with the training seeds as evaluation seeds).
`--document` writes the prediction range of each method's row for one more training seed into
worlds/toy_expected.json, which `bash run.sh toy` sets its result beside (ranges made for a default
toy run's toy.FIGURES figures at once: documented_ranges); `--document-from DIR,DIR` writes them
from finished runs' saved tables (the documented ones: docs/results.md), training nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from tqdm import tqdm

from evaluation.figures import plot_row_intervals
from evaluation.report import pool_metrics, read_samples
from infra.checkpoint import latest_checkpoint
from worlds import toy, toy_build
from worlds.toy_claims import BASE, BASE_READOUT, T_975, claims, interval, prediction_range, problem_interval

ROOT = Path(__file__).resolve().parent.parent
SEEDS = (44, 45, 46)  # fresh training seeds: 43 is configs/toy.yaml's, 101 was the tuning seed
EVAL_SEED = 43
DEV_SIZE, EXTRA_END = toy_build.DEV_SIZE, toy_build.EXTRA_END  # the splits (toy_build.split_file)
SPLITS = {
    "test": "held-out split",
    "dev": f"development split (the first {DEV_SIZE} training problems)",
    "extra": f"extra held-out split (held-out problems 250-{EXTRA_END - 1})",
}


class Row(NamedTuple):
    table: str  # "main" (tab:main) or "ablation" (tab:ablation)
    label: str  # as the paper's table writes it
    short: str  # in the figure
    overrides: list[str]  # credo.py overrides on configs/toy.yaml
    channel: str  # what eval reads: the readout, or the verbalized numeral


VERBALIZED = ["channel=verbalized", "alpha=0", "kappa=0"]
BASES = {BASE: "verbalized", BASE_READOUT: "readout"}  # the warm start, evaluated only, through each channel
BASE_LABELS = {BASE: "Base (warm start)", BASE_READOUT: "Base (readout)"}
ROWS = {
    "grpo": Row("main", "GRPO", "GRPO", ["method=grpo", *VERBALIZED], "verbalized"),
    "rlcr": Row("main", "RLCR", "RLCR", ["method=rlcr", *VERBALIZED], "verbalized"),
    "dcpo": Row("main", "DCPO", "DCPO", ["method=dcpo", *VERBALIZED], "verbalized"),
    "credo": Row("main", "CREDO", "CREDO", [], "readout"),
    "credo_alpha0": Row("ablation", "w/o differentiable regression (alpha=0)", "alpha=0", ["alpha=0"], "readout"),
    "credo_noanalysis": Row(
        "ablation", "w/o uncertainty-analysis segment", "no analysis", ["channel=readout_noanalysis"], "readout"
    ),
    "credo_noconfadv": Row(
        "ablation", "w/o confidence-segment advantage (A^conf = 0)", "no A^conf", ["conf_advantage=false"], "readout"
    ),
    "credo_kappa0": Row("ablation", "w/o discrepancy weighting (kappa=0)", "kappa=0", ["kappa=0"], "readout"),
}
MAIN_ROWS = tuple(name for name, row in ROWS.items() if row.table == "main")  # --tables' default
COLUMNS = (
    ("acc", "Acc"),
    ("ece", "ECE"),
    ("auroc", "AUROC"),
    ("brier", "Brier"),
    ("effective_levels", "Eff. levels"),
    ("auroc_ceiling", "AUROC ceiling"),  # toy_build.auroc_ceiling(): what a confidence of level and style alone reaches
)


def shown(path: Path) -> str:
    """`path` as the tables print it: relative to the checkout when inside it, so that tables
    committed under docs/ name no path of the machine they were run on."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def parse_rows(text: str) -> list[str]:
    """`--rows`: comma-separated names of ROWS, or `all`; ValueError naming what is unknown."""
    return list(ROWS) if text.strip() == "all" else toy.parse_names(text, "--rows", ROWS)


def parse_seeds(count: str, listed: str | None) -> list[int]:
    """`--seeds 3` -> the first three of 44, 45, ...; `--seed-list 44,47` -> those seeds (it wins).
    ValueError, naming the option, for anything else."""
    limit = len(T_975) + 1
    if listed is not None:
        try:
            seeds = [int(s) for s in listed.split(",")]
        except ValueError:
            seeds = []
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or len(seeds) > limit:
            raise ValueError(f"--seed-list {listed!r}: 1 to {limit} distinct non-negative seeds, comma-separated")
        return seeds
    if not count.isdigit() or not 1 <= int(count) <= limit:
        raise ValueError(f"--seeds {count!r}: a count of training seeds from 1 to {limit}")
    return [SEEDS[0] + i for i in range(int(count))]


def check_plan(out: Path, plan: dict) -> None:
    """Record what the jobs under `out` are trained with (plan.json); a run resumed with another
    world or other overrides would mix two configurations in one table: ValueError instead."""
    path = out / "plan.json"
    if path.exists() and (old := json.loads(path.read_text())) != plan:
        raise ValueError(
            f"{out} holds jobs of another configuration ({old}, now {plan}): choose another --out, "
            f"or delete it to start over"
        )
    path.write_text(json.dumps(plan, indent=1))


def job_dir(out: Path, row: str, seed: int) -> Path:
    return out / row / f"s{seed}"


def split_done(out: Path, jobs: list[tuple[str, int]]) -> tuple[list[dict], list[tuple[str, int]]]:
    """The results of the jobs that finished (their result.json, written last) and the jobs to run."""
    results, todo = [], []
    for row, seed in jobs:
        done = job_dir(out, row, seed) / "result.json"
        if done.exists():
            results.append(json.loads(done.read_text()))
        else:
            todo.append((row, seed))
    return results, todo


def with_ceiling(out: Path, world_dir: Path, result: dict) -> dict:
    """A finished job's result from before the AUROC ceiling column, with the ceiling computed from
    its samples and written into its result.json (nothing else changes)."""
    where = job_dir(out, result["row"], result["seed"])
    samples = where / "eval" / "samples.jsonl"
    if not samples.exists():
        raise FileNotFoundError(f"{samples}: the samples of a finished job are gone; cannot add its AUROC ceiling")
    pool = [r for r in read_samples(samples) if r["source"] == result["channel"]]
    result["metrics"]["auroc_ceiling"] = toy_build.auroc_ceiling(pool, toy_build.levels_of(world_dir / "test.jsonl"))
    (where / "result.json").write_text(json.dumps(result, indent=1))
    return result


def trained_checkpoint(source: Path, row: str, seed: int) -> Path:
    """The last checkpoint of `row`'s job with training seed `seed` under a finished run `source`."""
    if not (job_dir(source, row, seed) / "result.json").exists():
        raise FileNotFoundError(f"{job_dir(source, row, seed)}: no finished job to take the checkpoint of")
    return latest_checkpoint(job_dir(source, row, seed) / "run")


def check_source(source: Path, plan: dict) -> None:
    """`--checkpoints-from` must name a run of the same world and overrides: ValueError otherwise."""
    path = source / "plan.json"
    if not path.exists():
        raise ValueError(f"--checkpoints-from {source}: no plan.json there (not a toy_tables run)")
    theirs = json.loads(path.read_text())
    for key in ("world", "overrides"):
        if theirs.get(key) != plan[key]:
            raise ValueError(f"--checkpoints-from {source}: its {key} is {theirs.get(key)!r}, this run's {plan[key]!r}")


def run_job(
    out: Path,
    world_dir: Path,
    row: str,
    seed: int,
    overrides: list[str],
    eval_n: int,
    eval_file: Path,
    source: Path | None = None,
) -> dict:
    """Train `row` with training seed `seed` (or, with `source`, take the checkpoint that finished run
    trained), evaluate its last checkpoint on `eval_file` (a split: toy_build.split_file) (the base row:
    evaluate the warm start with evaluation seed `seed`), write result.json last."""
    where = job_dir(out, row, seed)
    shutil.rmtree(where, ignore_errors=True)  # an unfinished job starts over
    where.mkdir(parents=True)
    model_dir = world_dir / "model"
    t0 = time.perf_counter()
    if row in BASES:
        entry, eval_seed = (
            {"label": f"{row}/s{seed}", "path": str(model_dir), "channel": BASES[row], "method": "Base"},
            seed,
        )
    elif source is not None:
        entry, eval_seed = {"label": f"{row}/s{seed}", "path": str(trained_checkpoint(source, row, seed))}, EVAL_SEED
    else:
        toy.run_stage(
            [
                "credo.py",
                "configs/toy.yaml",
                f"out_dir={where}",
                "run_name=run",
                f"model={model_dir}",
                f"train_data={world_dir / 'train.jsonl'}",
                f"seed={seed}",
                *ROWS[row].overrides,
                *overrides,
            ],
            where / "train.log",
        )
        entry, eval_seed = {"label": f"{row}/s{seed}", "path": str(latest_checkpoint(where / "run"))}, EVAL_SEED
    train_s = time.perf_counter() - t0
    (where / "eval_plan.json").write_text(json.dumps([entry]))
    toy.run_stage(
        [
            "eval.py",
            "--plan",
            str(where / "eval_plan.json"),
            "--sets",
            f"toy={eval_file}:math",
            "--n",
            str(eval_n),
            "--temperature",
            "0.7",
            "--seed",
            str(eval_seed),
            "--config",
            "toy",
            "--out",
            str(where / "eval"),
            "--no-report",
        ],
        where / "eval.log",
    )
    records = read_samples(where / "eval" / "samples.jsonl")
    channel = BASES[row] if row in BASES else ROWS[row].channel
    pool = [r for r in records if r["source"] == channel]
    metrics = pool_metrics(pool) | {"auroc_ceiling": toy_build.auroc_ceiling(pool, toy_build.levels_of(eval_file))}
    result = {
        "row": row,
        "seed": seed,
        "channel": channel,
        "metrics": metrics,
        "train_s": round(train_s, 1),
        "total_s": round(time.perf_counter() - t0, 1),
    }
    (where / "result.json").write_text(json.dumps(result, indent=1))
    return result


def aggregate(results: list[dict]) -> dict:
    """{row: {column: (mean, half-width), "seeds": [...]}} over each row's seeds."""
    rows = {}
    for row in [*BASES, *ROWS]:
        mine = sorted((r for r in results if r["row"] == row), key=lambda r: r["seed"])
        if not mine:
            continue
        rows[row] = {"seeds": [r["seed"] for r in mine]}
        for key, _ in COLUMNS:
            values = [r["metrics"][key] for r in mine]
            rows[row][key] = None if any(v is None for v in values) else interval(values)
    return rows


def tabulate(jobs: list[tuple[dict, list[dict]]]) -> dict:
    """aggregate() of the jobs' results, each row with the interval of its AUROC over problems
    (problem_interval of the row's samples, seed by seed): `jobs` pairs a result with its samples."""
    rows = aggregate([result for result, _ in jobs])
    for row, values in rows.items():  # the problems' share of the AUROC's spread
        values["auroc_problems"] = problem_interval(
            [pool for result, pool in sorted(jobs, key=lambda job: job[0]["seed"]) if result["row"] == row]
        )
    return rows


def paired_differences(first: list[dict], second: list[dict]) -> dict:
    """{row: {"seeds": [...], column: (mean, 95% t half-width)}} of first - second seed by seed, over
    the seeds both ran: two configurations of the same rows on the same training seeds (each a
    tables.json's "jobs"). Pairing takes out what a seed's data order and samples share."""
    key = {(r["row"], r["seed"]): r["metrics"] for r in second}
    rows = {}
    for row in [*BASES, *ROWS]:
        pairs = [
            (r["seed"], r["metrics"], key[row, r["seed"]]) for r in first if r["row"] == row and (row, r["seed"]) in key
        ]
        pairs.sort(key=lambda pair: pair[0])
        if pairs:
            rows[row] = {"seeds": [seed for seed, _, _ in pairs]}
            for column, _ in COLUMNS:
                rows[row][column] = interval([a[column] - b[column] for _, a, b in pairs])
    return rows


def markdown_differences(rows: dict, first: str, second: str) -> str:
    """paired_differences as a markdown table."""
    lines = [
        f"**{first} - {second}, paired by training seed** (mean ± 95% t-interval half-width over seeds)",
        "",
        "| Row | " + " | ".join(name for _, name in COLUMNS) + " | seeds |",
        "|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for row, values in rows.items():
        cells = [f"{values[c][0]:+.3f} ± {values[c][1]:.3f}" for c, _ in COLUMNS]
        label = BASE_LABELS.get(row) or ROWS[row].label
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {', '.join(map(str, values['seeds']))} |")
    return "\n".join(lines) + "\n"


def documented_ranges(results: list[dict]) -> dict:
    """{METHOD: {metric: {mean, low, high, min, max}}} for each method row that worlds/toy.py also
    trains (toy.METHODS), over its seeds: low-high is toy_claims.prediction_range for toy.FIGURES
    figures, where one more training seed's default toy run has all its after figures 19 times in 20."""
    ranges = {}
    for row in toy.METHODS:
        mine = [r["metrics"] for r in results if r["row"] == row]
        if len(mine) < 2:
            continue
        ranges[row.upper()] = {}
        for key, _ in toy.COMPARED:
            values = [m[key] for m in mine if m[key] is not None]
            if len(values) == len(mine):
                mean, low, high = prediction_range(values, figures=toy.FIGURES)
                floor, ceiling = (1.0, float("inf")) if key == "effective_levels" else (0.0, 1.0)
                low, high = max(low, floor), min(high, ceiling)  # on the metric's own scale
                ranges[row.upper()][key] = {
                    "mean": mean,
                    "low": low,
                    "high": high,
                    "min": min(values),
                    "max": max(values),
                }
    return ranges


def saved_jobs(dirs: list[Path], world_digest: str) -> list[dict]:
    """The jobs of finished tables runs (each dir's tables.json and plan.json, as committed under
    docs/results/), pooled: ValueError unless every run is of this world, with the toy's
    configuration (no overrides) on the held-out split at the same samples per problem, and no
    row and seed is in two of them."""
    jobs, plans = [], []
    for folder in dirs:
        try:
            plan = json.loads((folder / "plan.json").read_text())
            saved = json.loads((folder / "tables.json").read_text())
        except FileNotFoundError as error:
            raise ValueError(f"--document-from {folder}: no {Path(error.filename).name} there") from error
        if plan.get("world") != world_digest:
            raise ValueError(f"--document-from {folder}: a run of world {str(plan.get('world'))[:12]}, not of this one")
        if plan.get("overrides") or plan.get("split", "test") != "test" or plan.get("checkpoints_from"):
            raise ValueError(f"--document-from {folder}: not the toy's configuration on the held-out split ({plan})")
        plans.append(plan)
        jobs += saved["jobs"]
    if len({plan["eval_n"] for plan in plans}) > 1:
        raise ValueError(f"--document-from: the runs evaluate different samples per problem ({plans})")
    keys = [(job["row"], job["seed"]) for job in jobs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        named = ", ".join(f"{row}/s{seed}" for row, seed in twice[:3]) + (
            f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        )
        raise ValueError(f"--document-from: {named} in two runs (each job counts once)")
    return jobs


def document(results: list[dict], world_dir: Path, source_line: str) -> dict:
    """Write documented_ranges(results) with their training seeds into worlds/toy_expected.json's
    "after" section; returns the ranges."""
    after = documented_ranges(results)
    seeds = sorted({r["seed"] for r in results if r["row"] in toy.METHODS})
    toy.document(toy.EXPECTED, "after", {"seeds": seeds, "figures": toy.FIGURES, **after}, world_dir, source_line)
    seed_list = ", ".join(map(str, seeds))
    print(f"[tables] the prediction ranges of {', '.join(after)} (seeds {seed_list}) written into {toy.EXPECTED}")
    return after


def job_pool(out: Path, result: dict) -> list[dict]:
    """A finished job's evaluated samples, read through its row's channel."""
    samples = job_dir(out, result["row"], result["seed"]) / "eval" / "samples.jsonl"
    return [r for r in read_samples(samples) if r["source"] == result["channel"]]


def _cell(value, digits: int) -> str:
    """`.752 ± .013` as the paper writes a mean and its spread; `-` where a metric is undefined."""
    if value is None:
        return "-"
    mean, half = value
    text = f"{mean:.{digits}f}"
    text = text if half is None else f"{text} ± {half:.{digits}f}"
    return text.replace("0.", ".") if digits == 3 else text


def markdown_tables(rows: dict, header: str, split: str = "test") -> str:
    """tab:main (Base and the methods) and tab:ablation (CREDO and its leave-one-out rows)."""
    cols = " | ".join(name for _, name in COLUMNS)
    out = [header, ""]
    for table, title, names in (
        (
            "main",
            f"tab:main in miniature: the toy's {SPLITS[split]}, each method through its own channel",
            [BASE, BASE_READOUT, "grpo", "rlcr", "dcpo", "credo"],
        ),
        (
            "ablation",
            "tab:ablation in miniature: CREDO and its leave-one-out rows",
            ["credo", "credo_alpha0", "credo_noanalysis", "credo_noconfadv", "credo_kappa0"],
        ),
    ):
        present = [n for n in names if n in rows]
        if not present or present == ["credo"] and table == "ablation":  # CREDO alone is no ablation
            continue
        out += [
            f"**{title}** (mean ± 95% t-interval half-width over training seeds)",
            "",
            f"| {'Method' if table == 'main' else 'Row'} | {cols} | seeds |",
            "|---|" + "---|" * (len(COLUMNS) + 1),
        ]
        for name in present:
            label = BASE_LABELS.get(name) or ROWS[name].label
            seeds = ", ".join(map(str, rows[name]["seeds"]))
            cells = [_cell(rows[name][key], 1 if key == "effective_levels" else 3) for key, _ in COLUMNS]
            out.append(f"| {label} | " + " | ".join(cells) + f" | {seeds} |")
        out.append("")
    spreads = [(name, rows[name]["auroc_problems"]) for name in rows if rows[name].get("auroc_problems")]
    if spreads:
        out += [
            "AUROC over problems (the 95% interval of the seeds' mean AUROC when the problems are drawn "
            "again, toy_claims.problem_interval): "
            + "; ".join(
                f"{BASE_LABELS.get(name) or ROWS[name].label} {low:.3f}-{high:.3f}" for name, (low, high) in spreads
            ),
            "",
        ]
    out += [
        "AUROC ceiling: the AUROC of the best confidence that knows only each sample's level and "
        "solution style (each sample given its cell's accuracy, in-sample); a confidence that reads "
        "nothing else cannot pass it.",
        "",
    ]
    found = claims(rows)
    if found:
        out += (
            ["**The toy's claims** (docs/journal/toy-protocol-v13.md)", ""]
            + [f"- {'holds' if holds else 'FAILS'}: {claim}" for claim, holds in found]
            + [""]
        )
    return "\n".join(out)


def compare(spec: str) -> dict:
    """--compare A,B: A/paired.md from the two folders' tables.json (their plans named in it)."""
    folders = [Path(f.strip()).resolve() for f in spec.split(",") if f.strip()]
    if len(folders) != 2 or not all((f / "tables.json").exists() for f in folders):
        sys.exit(f"toy_tables: --compare {spec!r}: two finished runs' folders, each holding tables.json")
    runs = [json.loads((f / "tables.json").read_text()) for f in folders]
    rows = paired_differences(runs[0]["jobs"], runs[1]["jobs"])
    if not rows:
        sys.exit(f"toy_tables: --compare {spec!r}: no row and training seed in common")
    names = [shown(f) for f in folders]
    text = "\n\n".join(f"{name}: {run['header']}" for name, run in zip(names, runs))
    text += "\n\n" + markdown_differences(rows, *names)
    (folders[0] / "paired.md").write_text(text)
    print(text)
    return rows


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(
        description="tab:main and tab:ablation in miniature on the toy (module docstring)."
    )
    parser.add_argument(
        "--rows",
        default=",".join(MAIN_ROWS),
        help=f"comma-separated, from {', '.join(ROWS)}, or all (default: tab:main's, {','.join(MAIN_ROWS)}; "
        "tab:ablation's rows double the time)",
    )
    parser.add_argument("--seeds", default=str(len(SEEDS)), help="how many training seeds (default 3: 44, 45, 46)")
    parser.add_argument(
        "--seed-list", default=None, help="the training seeds themselves, comma-separated (instead of --seeds)"
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="jobs at a time (one core each)")
    parser.add_argument(
        "--world",
        default=str(toy_build.SHIPPED),
        help="a built world's folder (default: the shipped worlds/toy_world/; worlds/toy.py --world)",
    )
    parser.add_argument(
        "--eval-n", type=int, default=4, help="samples per problem evaluated (default 4, as worlds/toy.py)"
    )
    parser.add_argument(
        "--split",
        default="test",
        help="what the models are evaluated on: test (the held-out split, default), dev (the first "
        f"{DEV_SIZE} training problems, for tuning) or extra (held-out problems 250-{EXTRA_END - 1})",
    )
    parser.add_argument("--out", default=str(ROOT / "runs" / "toy-tables"))
    parser.add_argument(
        "--checkpoints-from",
        default=None,
        help="a finished run's --out: evaluate the checkpoints it trained (same world and overrides) "
        "instead of training",
    )
    parser.add_argument(
        "--document",
        action="store_true",
        help="write each method's prediction range for one more training seed into worlds/toy_expected.json "
        "(for whoever updates the documented results; bash run.sh toy compares with it)",
    )
    parser.add_argument(
        "--document-from",
        default=None,
        help="comma-separated folders of finished runs (tables.json and plan.json, as under docs/results/): "
        "write the ranges over all their seeds into worlds/toy_expected.json, training nothing",
    )
    parser.add_argument(
        "--compare",
        default=None,
        help="A,B: two finished runs' --out folders (the same rows and training seeds, other overrides): "
        "write A/paired.md, each row's A - B paired by seed, training nothing",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every training (e.g. max_steps=40)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(args.compare)
    try:  # bad input: one line, before anything runs
        rows, seeds = parse_rows(args.rows), parse_seeds(args.seeds, args.seed_list)
        if args.jobs < 1 or args.eval_n < 1:
            raise ValueError(f"--jobs {args.jobs} / --eval-n {args.eval_n}: each at least 1")
        if args.split not in SPLITS:
            raise ValueError(f"--split {args.split!r}: one of {', '.join(SPLITS)}")
        world, world_dir = toy_build.load_world(Path(args.world))
        if args.document_from:
            folders = [Path(f.strip()).resolve() for f in args.document_from.split(",") if f.strip()]
            results = saved_jobs(folders, toy.model_digest(world_dir))
    except (ValueError, toy_build.WorldError) as error:
        sys.exit(f"toy_tables: {error}")
    if args.document_from:
        document(results, world_dir, f"python -m worlds.toy_tables --document-from {args.document_from}")
        return None
    t_start = time.perf_counter()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    source = None if args.checkpoints_from is None else Path(args.checkpoints_from).resolve()
    plan = {
        "world": toy.model_digest(world_dir),
        "overrides": args.overrides,
        "eval_n": args.eval_n,
        **({"split": args.split} if args.split != "test" else {}),  # held-out plans stay as they were
        **({"checkpoints_from": str(source)} if source else {}),
    }
    try:
        if source is not None:
            check_source(source, plan)
        check_plan(out, plan)
    except ValueError as error:
        sys.exit(f"toy_tables: {error}")
    eval_file = toy_build.split_file(world_dir, args.split)
    # tab:main's rows seed by seed, then tab:ablation's: an interrupted run leaves whole main rows
    main_rows = ([*BASES] if any(ROWS[row].table == "main" for row in rows) else []) + [
        r for r in rows if ROWS[r].table == "main"
    ]
    jobs = [(row, seed) for seed in seeds for row in main_rows]
    jobs += [(row, seed) for seed in seeds for row in rows if ROWS[row].table == "ablation"]
    results, todo = split_done(out, jobs)
    older = [r for r in results if "auroc_ceiling" not in r["metrics"]]
    if older:
        print(f"[tables] adding the AUROC ceiling column to {len(older)} finished jobs", flush=True)
        results = [with_ceiling(out, world_dir, r) if r in older else r for r in results]
    if results:
        print(f"[tables] resuming: {len(results)} of {len(jobs)} jobs already finished under {out}", flush=True)
    with (
        ThreadPoolExecutor(args.jobs) as pool,
        tqdm(total=len(jobs), initial=len(results), desc="toy tables", dynamic_ncols=True) as bar,
    ):
        futures = {
            pool.submit(run_job, out, world_dir, row, seed, args.overrides, args.eval_n, eval_file, source): (row, seed)
            for row, seed in todo
        }
        for future in as_completed(futures):
            result = future.result()  # a failed job raises here, naming its log
            results.append(result)
            bar.set_postfix_str(f"{result['row']}/s{result['seed']}: acc {result['metrics']['acc']:.3f}")
            bar.update()
    aggregated = tabulate([(r, job_pool(out, r)) for r in results])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    wall = time.perf_counter() - t_start
    header = (
        f"Toy tables: world {shown(world_dir)} (version {world['version']}, seed {world['seed']}, weights "
        f"{plan['world'][:12]}), training seeds "
        f"{', '.join(map(str, seeds))}, evaluation seed {EVAL_SEED} (Base: the training seeds), {SPLITS[args.split]} "
        f"x {args.eval_n} samples at T = 0.7; {stamp}, {platform.machine()} with {os.cpu_count()} cores, "
        f"{wall / 60:.1f} min this invocation ({args.jobs} jobs at a time)"
        + (f"; overrides: {' '.join(args.overrides)}" if args.overrides else "")
        + (f"; the checkpoints trained under {source}" if source else "")
    )
    text = markdown_tables(aggregated, header, args.split)
    (out / "tables.md").write_text(text)
    saved = {"header": header, "jobs": results, "rows": aggregated}
    (out / "tables.json").write_text(json.dumps(saved, indent=1))
    panels = {
        (BASE_LABELS.get(row) or ROWS[row].short): {
            name: (*values[key], [j["metrics"][key] for j in results if j["row"] == row])
            for key, name in COLUMNS[:4]
            if values[key] is not None
        }
        for row, values in aggregated.items()
    }
    plot_row_intervals(
        panels,
        out / "tables",
        f"Toy tables: world {plan['world'][:12]}, training seeds "
        f"{', '.join(map(str, seeds))} (bars: 95% t-intervals; dots: seeds)",
    )
    print(text)
    print(f"[tables] tables.md, tables.json and tables.png under {out}")
    if args.document:
        document(results, world_dir, f"python -m worlds.toy_tables --document ({shown(out)}; {header})")
    return aggregated


if __name__ == "__main__":
    main()
