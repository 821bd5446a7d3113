"""The toy demonstration: CREDO's readout learns a calibrated confidence on an ordinary machine.

    python -m worlds.toy            # or: bash run.sh toy   (CREDO and RLCR; 2 CPU cores: see docs/toy.md for times)
    python -m worlds.toy --methods grpo,credo,rlcr seed=44   # GRPO too, another training seed
    python -m worlds.toy --world runs/w1        # a world built with `python -m worlds.toy_build --rebuild runs/w1`
    python -m worlds.toy --quick    # the shortened run of tests/test_toy.py (CREDO only, 40 steps)
    python -m worlds.toy_tables     # tab:main and tab:ablation in miniature (bash run.sh toy --tables)

What it shows. The same `credo.py` loop, vLLM engine, math-verify verifier and
`eval.py` as the paper's runs, on a world small enough for a CPU:

1. *World* (worlds/toy_build.py; shipped, built once, in worlds/toy_world/ and checked against its
   SHA256SUMS before every run; never rebuilt here): chained sums of one-digit numbers (1-9),
   difficulty level L = 1..5 with L + 2 operands (`What is 3 + 2 + 5?` at level 1), the only
   questions the toy model can answer; train / held-out splits that share no problem; a
   byte-level BPE tokenizer (no hub); a tiny Qwen3-architecture model (3 layers, hidden 96,
   head_dim 32); a supervised warm start on the completions of a *scripted solver* that writes
   one of two styles, half and half: every partial sum ("steps": reliable on easy problems, often
   wrong on hard ones) or the whole sum at once ("direct": much less reliable
   from level 2 on). Wrong solutions slip by 1-2 and are in the SFT data. The
   rollout formats: readout (`... \\boxed{n} <analysis> ... </analysis> <confidence>`),
   verbalized (`... </analysis> <confidence>0.X</confidence>`, an honest but coarse
   numeral: the style's accuracy at the level, rounded to one of five values). In the warm start
   only, the readout format goes on past the slot with `high</confidence>` or `low</confidence>`
   ("high" with the style's rate), so the rows the reserved tokens copy carry a confidence
   before RL, as on a real model (world version 11 on). The build
   ends with an addition check (level-1 sums, and level-2 sums written in steps, sampled at
   T = 0.7): a warm start that cannot add gets more steps, and fails the build, in one
   line, if it still cannot.
2. *Training*: CREDO (readout channel), the verbalized baseline RLCR and, with
   `--methods`, plain GRPO: the real loop (`python credo.py configs/toy.yaml ...`),
   the same settings and budget for every method, two trainings at a time (`--jobs`).
3. *Evaluation*: `eval.evaluate` on the held-out split (T = 0.7, n samples per
   problem) of the warm-started model read through each channel ("before") and
   of each trained checkpoint ("after").

Outputs in `runs/toy/` (or `--out`; the methods' earlier runs there are replaced, and it says so):
`report.json` (`{"CREDO": {"before": {...}, "after": {...}}, "RLCR": {...}}`, the keys of
`evaluation.report.pool_metrics` plus `mean_conf`), `report.md` (the table printed at the end),
`reliability_<method>.png` (before and after panels) and `collapse.png` (the reported values,
`fig:collapse`). On the shipped world the run ends by setting its figures beside the documented
ones (worlds/toy_expected.json: the before rows to three decimals, effective levels within 5%;
the after rows' prediction ranges over the committed runs' training seeds, wide enough that a
typical default run has every after figure inside 19 times in 20), so a user sees whether the
run is typical.

What to expect (docs/toy.md, "Current results"):
RL raises accuracy (the direct style is learned away, GRPO and CREDO alike); CREDO's
readout becomes calibrated with a continuum of values, while the verbalized reports
stay on a handful of values. The toy trains at the evaluation temperature 0.7 (the
paper trains at 1.0): a readout is calibrated to the rollouts it is trained on, and
this small model's accuracy depends strongly on temperature (docs/toy.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from evaluation.figures import plot_collapse, plot_reliability
from evaluation.report import pool_metrics, read_samples
from infra.checkpoint import latest_checkpoint
from worlds import toy_build

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm"))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # One intra-op thread for the trainer: on a 2-core machine shared with anything else, two
    # OpenMP threads spin against each other and a step gets several times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _failure(args: list[str], code: int, log_path: Path) -> RuntimeError:
    tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
    return RuntimeError(f"`{' '.join(args)}` failed (exit {code}); last lines of {log_path}:\n{tail}")


def start_stage(args: list[str], log_path: Path) -> subprocess.Popen:
    """`python *args` in the checkout, its output (stdout and stderr) to `log_path`."""
    with log_path.open("w") as log:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)


def run_stage(args: list[str], log_path: Path) -> None:
    """One stage, to its end; a failure raises with its log's tail."""
    run_stages([(args, log_path)], jobs=1)


def pace(stages: int, jobs: int) -> str:
    """How the trainings share the machine, for the line that starts them ("" for one training).

    >>> pace(1, 2), pace(2, 2), pace(3, 1)
    ('', ', 2 at a time', ', one after the other')
    """
    if stages == 1:
        return ""
    at_once = min(stages, jobs)
    return ", one after the other" if at_once == 1 else f", {at_once} at a time"


def run_stages(stages: list[tuple[list[str], Path]], jobs: int) -> dict[Path, float]:
    """Each (args, log) stage as run_stage runs it, `jobs` at a time; the seconds each took, by
    its log. The first failure stops the others and raises, with the failed stage's log tail."""
    pending, running, seconds = list(stages), [], {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                args, log_path = pending.pop(0)
                running.append((start_stage(args, log_path), args, log_path, time.perf_counter()))
            time.sleep(0.2)  # polled: a stage takes seconds to minutes
            for stage in [stage for stage in running if stage[0].poll() is not None]:
                proc, args, log_path, t0 = stage
                running.remove(stage)
                seconds[log_path] = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise _failure(args, proc.returncode, log_path)
    finally:
        for proc, _, _, _ in running:
            proc.kill()
            proc.wait()
    return seconds


def pool_report(mine: list[dict]) -> dict:
    """The metrics of one model's records as worlds/toy_tables.py measures a row (pool_metrics: `acc`
    over every sample, the calibration metrics over those that reported a confidence), with their
    mean confidence."""
    parsed = [r for r in mine if r["c"] is not None]
    return pool_metrics(mine) | {"mean_conf": float(np.mean([r["c"] for r in parsed])) if parsed else None}


def summarize(records: list[dict], out: Path, labels: dict) -> dict:
    """report.json / report.md / figures from the eval records (each method's own channel)."""
    report, pools = {}, {}
    for method, (before, after, source) in labels.items():
        report[method] = {}
        for when, label in (("before", before), ("after", after)):
            mine = [r for r in records if r["run"] == label and r["source"] == source]
            if not mine:
                continue
            report[method][when] = pool_report(mine)
            parsed = [r for r in mine if r["c"] is not None]
            if parsed:
                pools.setdefault(method, {})[f"{method} {when}"] = (
                    np.array([r["c"] for r in parsed], dtype=float),
                    np.array([r["a"] for r in parsed], dtype=float),
                )
    for method, method_pools in pools.items():
        plot_reliability(
            method_pools, out / f"reliability_{method.lower()}", f"{method} ({labels[method][2]}), held-out toy split"
        )
    if pools:
        plot_collapse(
            {row: pool for method_pools in pools.values() for row, pool in method_pools.items()},
            out / "collapse",
            "Reported confidence values, held-out toy split",
        )
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown_table(report))
    return report


def markdown_table(report: dict) -> str:
    cols = [
        ("acc", "Acc"),
        ("auroc", "AUROC"),
        ("ece", "ECE"),
        ("brier", "Brier"),
        ("mean_conf", "Mean c"),
        ("effective_levels", "Eff. levels"),
        ("top_share", "Top share"),
        ("parse_fail", "Parse fail"),
        ("n", "n"),
    ]
    lines = ["| method (channel) | when | " + " | ".join(c for _, c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    channel = {name.upper(): ch for name, (_, ch) in METHODS.items()}
    for method, whens in report.items():
        for when, m in whens.items():
            cells = []
            for key, _ in cols:
                v = m.get(key)
                cells.append("-" if v is None else (str(v) if isinstance(v, int) else f"{v:.3f}"))
            lines.append(f"| {method} ({channel.get(method, '?')}) | {when} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# The methods the toy trains: credo.py overrides on configs/toy.yaml, and the channel evaluated.
METHODS = {
    "credo": ([], "readout"),
    "rlcr": (["method=rlcr", "channel=verbalized", "alpha=0", "kappa=0"], "verbalized"),
    "grpo": (["method=grpo", "channel=verbalized", "alpha=0", "kappa=0"], "verbalized"),
}
DEFAULT_METHODS = ("credo", "rlcr")  # what `bash run.sh toy` trains when --methods is not given


def parse_names(text: str, option: str, known) -> list[str]:
    """`credo,rlcr` -> ["credo", "rlcr"], each one of `known`; ValueError naming `option` and what
    is unknown (worlds/toy.py's --methods, worlds/toy_tables.py's --rows)."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in known]
    if unknown or not names:
        raise ValueError(
            f"{option} {text!r}: unknown {', '.join(unknown) or '(none given)'}; the choices are "
            f"{', '.join(known)} (comma-separated)"
        )
    return names


# The options of worlds/toy_tables.py that this run does not have: given here, they are refused
# with a line that says where they belong (tests/test_toy_tables.py checks the list)
TABLES_ONLY = (
    "--rows",
    "--seeds",
    "--seed-list",
    "--split",
    "--eval-n",
    "--checkpoints-from",
    "--document-from",
    "--compare",
)


def tables_option(argv: list[str]) -> str | None:
    """The first option of `argv` that belongs to `--tables` (TABLES_ONLY), with or without `=value`."""
    return next((arg.split("=")[0] for arg in argv if arg.split("=")[0] in TABLES_ONLY), None)


def replacing(out: Path, methods: list[str]) -> str | None:
    """The line that says which earlier runs under `out` this run deletes, and from when; None
    where there are none."""
    earlier = [m for m in methods if (out / m).exists()]
    if not earlier:
        return None
    stamp = max((out / m).stat().st_mtime for m in earlier)
    when = datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"[toy] replacing the earlier {', '.join(m.upper() for m in earlier)} run{'s' if len(earlier) > 1 else ''} "
        f"under {out} (last written {when}); --out DIR keeps them"
    )


# --- the documented results (worlds/toy_expected.json) and a run set beside them ---------------
EXPECTED = ROOT / "worlds" / "toy_expected.json"
COMPARED = (("acc", "Acc"), ("auroc", "AUROC"), ("ece", "ECE"), ("brier", "Brier"), ("effective_levels", "Eff. levels"))
# The after figures a default run sets beside their documented ranges. Each range is a prediction
# range for one of this many figures (toy_claims.prediction_range, Bonferroni), so that a typical
# default run has all of them inside at least 19 times in 20; at 95% each, some figure of a typical
# run would fall outside in about two runs of five.
FIGURES = len(DEFAULT_METHODS) * len(COMPARED)


def model_digest(world_dir: Path) -> str:
    """The SHA-256 of a world's weights, as its SHA256SUMS lists it: which world a result is of."""
    for line in (world_dir / toy_build.CHECKSUMS).read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        if name.lstrip("*") == "model/model.safetensors":
            return digest
    raise toy_build.WorldError(f"{world_dir / toy_build.CHECKSUMS}: lists no model/model.safetensors")


def document(path: Path, section: str, entries: dict, world_dir: Path, source: str) -> None:
    """Write `entries` ({method: {metric: value}} for "before"; {method: {metric: {mean, low, high,
    min, max}}} for "after") as `section` of the documented results at `path`, with where they
    come from; the other section is kept if it is of the same world, dropped otherwise."""
    digest = model_digest(world_dir)
    old = json.loads(path.read_text()) if path.exists() else {}
    kept = old if old.get("model_sha256") == digest else {}
    source = source.replace(f"{ROOT}/", "")  # committed: no path of the machine it was run on
    kept.update({"model_sha256": digest, section: {"source": source, **entries}})
    path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")


# How far a "before" figure may be from its documented value and still be the same evaluation.
# Accuracy, AUROC, ECE and Brier agree to three decimals between machines. Effective levels count
# exactly equal confidences, and the readout's float32 values near 1 tie or not by their last bits,
# which another machine's arithmetic moves: under MKL's compatible code path the warm start's
# readout gave 643.5 levels for 640.2, every sample and other figure the same (docs/toy.md,
# "Between machines"). So they are the same within 5%.
LEVELS_TOLERANCE = 0.05


def _figure(value) -> str:
    return "-" if value is None else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def _before_cell(key: str, name: str, mine, theirs) -> tuple[str, bool]:
    """One "before" figure beside its documented value: the cell, and whether it is the same."""
    if mine is None or theirs is None:
        return (
            f"{name} {_figure(mine)} ({'same' if mine is theirs else 'documented ' + _figure(theirs)})",
            mine is theirs,
        )
    if round(mine, 3) == round(theirs, 3):
        return f"{name} {_figure(mine)} (same)", True
    if key == "effective_levels" and abs(mine - theirs) <= LEVELS_TOLERANCE * theirs:
        return f"{name} {_figure(mine)} (documented {_figure(theirs)}: same within {LEVELS_TOLERANCE:.0%})", True
    return f"{name} {_figure(mine)} (documented {_figure(theirs)})", False


def against_documented(report: dict, documented: dict, digest: str) -> list[str]:
    """Lines that set each row of `report` beside the documented results: a "before" figure is the
    same or differs (three decimals; effective levels within LEVELS_TOLERANCE), an "after" figure
    is inside or outside its documented prediction range for one more training seed (made for
    `figures` figures at once, FIGURES). The last line says whether the run is typical."""
    if documented.get("model_sha256") != digest:
        return [f"[toy] this world is not the one {EXPECTED.name}'s results are of: nothing to compare"]
    lines = ['[toy] this run beside the documented results (docs/toy.md, "Current results"):']
    odd, missing = [], []
    for method, whens in report.items():
        for when, metrics in whens.items():
            doc = documented.get(when, {}).get(method)
            if doc is None:
                lines.append(f"  {method} {when}: not documented")
                missing.append(f"{method} {when}")
                continue
            cells = []
            for key, name in COMPARED:
                mine, theirs = metrics.get(key), doc.get(key)
                if when == "before":
                    cell, same = _before_cell(key, name, mine, theirs)
                    cells.append(cell)
                else:
                    same = mine is not None and theirs is not None and theirs["low"] <= mine <= theirs["high"]
                    span = "-" if theirs is None else f"{_figure(theirs['low'])}-{_figure(theirs['high'])}"
                    cells.append(f"{name} {_figure(mine)} ({span}{'' if same else ': OUTSIDE'})")
                if not same:
                    odd.append(f"{method} {when} {name}")
            lines.append(f"  {method} {when}: " + ", ".join(cells))
    seeds = documented.get("after", {}).get("seeds")
    if seeds:
        figures = documented["after"]["figures"]  # what the ranges were made for (toy_tables.document)
        seed_list = ", ".join(map(str, seeds))
        what = f"all {figures} after figures" if figures > 1 else "its after figure"
        lines.append(f"  after: ranges that hold {what} of one more training seed 19 times in 20 (seeds {seed_list})")
    if odd:
        why = (
            "a before figure differs: this machine, thread count or code evaluates otherwise; docs/toy.md, "
            '"Between machines"'
            if any(" before " in entry for entry in odd)
            else "a typical run has some after figure outside its range at most one time in twenty; docs/toy.md, "
            '"Current results", has the spread over seeds'
        )
        lines.append(f"[toy] not as documented: {', '.join(odd)} ({why})")
    elif missing:
        lines.append(f"[toy] as documented where documented; nothing documented yet for {', '.join(missing)}")
    else:
        lines.append("[toy] typical: every figure as documented")
    return lines


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    misplaced = tables_option(argv)
    if misplaced:
        sys.exit(
            f"toy: {misplaced} is an option of the tables, not of this run: bash run.sh toy --tables {misplaced} ... "
            f"(python -m worlds.toy_tables)"
        )
    parser = argparse.ArgumentParser(description="CREDO's toy demonstration (see the module docstring).")
    parser.add_argument(
        "--quick", action="store_true", help="the shortened run of the test: CREDO only, fewer steps, smaller eval"
    )
    parser.add_argument("--out", default=str(ROOT / "runs" / "toy"))
    parser.add_argument(
        "--methods", default=None, help="comma-separated: credo,rlcr,grpo (default: credo,rlcr; --quick: credo)"
    )
    parser.add_argument(
        "--world",
        default=str(toy_build.SHIPPED),
        help="a built world's folder (default: the shipped worlds/toy_world/; another one: "
        "python -m worlds.toy_build --rebuild OUT)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="trainings run at a time (default 2: each takes one core; the toy's machine has two)",
    )
    parser.add_argument(
        "--document",
        action="store_true",
        help="write this run's before rows into worlds/toy_expected.json (for whoever updates the documented "
        "results; the after ranges come from worlds/toy_tables.py --document)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="key=value overrides for every training (e.g. alpha=0 for the ablation)"
    )
    args = parser.parse_args(argv)
    try:  # bad input: one line, before anything runs
        default = "credo" if args.quick else ",".join(DEFAULT_METHODS)
        methods = parse_names(args.methods or default, "--methods", METHODS)
        if args.jobs < 1:
            raise ValueError(f"--jobs {args.jobs}: at least one training runs at a time")
        _, world_dir = toy_build.load_world(Path(args.world))
    except (ValueError, toy_build.WorldError) as error:
        sys.exit(f"toy: {error}")
    t_start = time.perf_counter()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    note = replacing(out, methods)
    if note:
        print(note, flush=True)
    quick = ["max_steps=40", "save_every=40"] if args.quick else []
    n_eval, test = (2, out / "test_quick.jsonl") if args.quick else (4, toy_build.split_file(world_dir, "test"))
    if args.quick:  # the first 100 held-out problems (20 per level)
        test.write_text("".join((world_dir / "test.jsonl").read_text().splitlines(keepends=True)[:100]))
    model_dir = str(world_dir / "model")
    spec_ckpts, labels, timings = [], {}, {}
    stages = []
    for method in methods:
        method_overrides, channel = METHODS[method]
        shutil.rmtree(out / method, ignore_errors=True)  # a fresh run (credo.py appends to metrics.jsonl)
        args_train = [
            "credo.py",
            "configs/toy.yaml",
            f"out_dir={out}",
            f"run_name={method}",
            f"model={model_dir}",
            f"train_data={world_dir / 'train.jsonl'}",
            *method_overrides,
            *quick,
            *args.overrides,
        ]
        stages.append((args_train, out / f"train_{method}.log"))
    names = ", ".join(f"{m.upper()} ({METHODS[m][1]} channel)" for m in methods)
    print(f"[toy] training {names} with credo.py configs/toy.yaml{pace(len(stages), args.jobs)} ...", flush=True)
    seconds = run_stages(stages, args.jobs)
    for method in methods:
        name, channel = method.upper(), METHODS[method][1]
        timings[f"train_{method}_s"] = round(seconds[out / f"train_{method}.log"], 1)
        ckpt = latest_checkpoint(out / method)
        spec_ckpts += [
            {"label": f"{method}/before", "path": model_dir, "channel": channel, "method": name},
            {"label": f"{method}/after", "path": str(ckpt), "channel": channel, "method": name},
        ]
        labels[name] = (f"{method}/before", f"{method}/after", channel)
    t0 = time.perf_counter()
    print(f"[toy] evaluating {len(spec_ckpts)} models on the held-out split with eval.py ...", flush=True)
    (out / "eval_plan.json").write_text(json.dumps(spec_ckpts, indent=1))
    run_stage(
        [
            "eval.py",
            "--plan",
            str(out / "eval_plan.json"),
            "--sets",
            f"toy={test}:math",
            "--n",
            str(n_eval),
            "--temperature",
            "0.7",
            "--seed",
            "43",
            "--config",
            "toy",
            "--out",
            str(out / "eval"),
            "--no-report",
        ],
        out / "eval.log",
    )
    timings["eval_s"] = round(time.perf_counter() - t0, 1)
    report = summarize(read_samples(out / "eval" / "samples.jsonl"), out, labels)
    timings["total_s"] = round(time.perf_counter() - t_start, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=1))
    print(markdown_table(report))
    print(f"[toy] {json.dumps(timings)}; report, table and figures under {out}")
    if args.document:
        before = {name: rows["before"] for name, rows in report.items() if "before" in rows}
        document(EXPECTED, "before", before, world_dir, f"python -m worlds.toy --document ({out})")
        print(f"[toy] the before rows written into {EXPECTED}")
    if args.quick or args.overrides or not EXPECTED.exists():
        print("[toy] a quick run, overrides, or no worlds/toy_expected.json: nothing documented to compare with")
    else:
        print("\n".join(against_documented(report, json.loads(EXPECTED.read_text()), model_digest(world_dir))))
    return report


if __name__ == "__main__":
    main()
