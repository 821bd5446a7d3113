"""Training curves of one or more runs: `python -m evaluation.curves runs/a [runs/b ...] [--out DIR] [--smooth N]`.

This file holds the reader of a run's `metrics.jsonl` (one JSON object per step, written by
`credo.train` with the keys of `credo.step_metrics`), the centred moving average that
smooths a curve, and the figure: per step, the reward, accuracy, format rate, mean c, batch
ECE and Brier, the calibration loss and every other loss term logged, every run on the same panels (one colour per run,
raw points faint behind the smoothed line), then one stacked-area panel per run with the
seconds of a step in rollout, verify, train and sync. It writes `curves.png` and
`curves.pdf` into the first run directory, or into `--out`. `bash run.sh plot` calls it.

It does NOT compute any metric (credo.py writes them), evaluate checkpoints or draw the
evaluation figures (eval.py does), and it imports no project module. A key a run lacks, or
holds as null at every step (a GRPO run has no mean c), leaves a note on its panel and
draws no line; a run directory without `metrics.jsonl`, an empty file or a malformed line
is a `CurvesError` naming the file and the line.

Smoothing (`moving_average`): the point of step i is the mean of the window of `window`
consecutive points i - (window - 1) // 2 .. i + window // 2, clipped at the ends of the
curve (centred for an odd window; an even one reaches one point further right)::

    >>> moving_average([0.0, 3.0, 6.0, 3.0], 3).tolist()
    [1.5, 3.0, 4.0, 4.5]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

# (key of metrics.jsonl, panel title), the panels every run shares
METRIC_PANELS = (
    ("reward_ans", "reward"),
    ("acc", "accuracy"),
    ("format_rate", "format rate"),
    ("mean_c", "mean c"),
    ("ece", "batch ECE"),
    ("brier", "batch Brier"),
    ("loss_cal", "calibration loss"),
)
PHASES = ("rollout", "verify", "train", "sync")  # a step's seconds, key t_<phase>
PHASE_COLORS = ("C0", "C1", "C2", "C3")
NCOLS = 4


class CurvesError(ValueError):
    """Input the curves cannot be drawn from; the message names the file, the line and the fix."""


def moving_average(values, window: int) -> np.ndarray:
    """Centred moving average of a 1-D curve, the window clipped at its ends (module docstring)."""
    check_window(window)
    values = np.asarray(values, dtype=np.float64)  # [n]
    n = len(values)
    cumsum = np.concatenate([[0.0], np.cumsum(values)])  # [n + 1]
    idx = np.arange(n)
    lo = np.clip(idx - (window - 1) // 2, 0, n)  # [n] first point of each window
    hi = np.clip(idx + window // 2 + 1, 0, n)  # [n] one past its last point
    return (cumsum[hi] - cumsum[lo]) / (hi - lo)


def check_window(window) -> None:
    if type(window) is not int or window < 1:
        raise CurvesError(f"the smoothing window must be a positive integer (--smooth N), got {window!r}")


def default_window(n_steps: int) -> int:
    """The window when `--smooth` is not given: an odd 1/25 of the longest run, at least 1."""
    return max(1, round(n_steps / 25)) // 2 * 2 + 1


def read_metrics(run_dir) -> list[dict]:
    """The step records of `run_dir/metrics.jsonl`, checked: JSON objects with increasing integer steps."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not run_dir.is_dir():
        raise CurvesError(f"{run_dir}: no such run directory; give the directory a training run wrote (runs/<name>)")
    if not path.is_file():
        raise CurvesError(f"{path}: no such file; a run writes it after its first step (is {run_dir} a run directory?)")
    lines = path.read_text().splitlines()
    if not lines:
        raise CurvesError(f"{path}: empty; the run has not finished a step yet")
    records: list[dict] = []
    for number, line in enumerate(lines, start=1):
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise CurvesError(f"{where}: not JSON ({error}); each line must be the JSON object of one step") from None
        if not isinstance(record, dict) or type(record.get("step")) is not int:
            raise CurvesError(f"{where}: not a step record (a JSON object with an integer 'step')")
        if records and record["step"] <= records[-1]["step"]:
            raise CurvesError(
                f"{where}: step {record['step']} follows step {records[-1]['step']}; "
                "the file must hold one line per step in order (two runs appended into one?)"
            )
        records.append(record)
    return records


def series(records: list[dict], key: str, path) -> tuple[np.ndarray, np.ndarray]:
    """(steps [m], values [m]) of the records where `key` is a number; null or absent steps are left out."""
    steps, values = [], []
    for number, record in enumerate(records, start=1):
        value = record.get(key)
        if value is None:
            continue
        if type(value) not in (int, float):
            raise CurvesError(f"{path} line {number}: {key} is {value!r}, not a number or null")
        steps.append(record["step"])
        values.append(float(value))
    return np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64)


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Legend names: each run directory's name, or the paths as given when two names are the same."""
    names = [Path(d).name or str(d) for d in run_dirs]
    return names if len(set(names)) == len(names) else [str(d) for d in run_dirs]


def step_axes(ax, title: str) -> None:
    """Title, a grid and an x axis of whole steps."""
    ax.set(title=title, xlabel="step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)


def note(ax, text: str) -> None:
    """What a panel does not show, in its top left corner over the curves."""
    ax.text(
        0.03,
        0.97,
        text,
        transform=ax.transAxes,
        ha="left",
        va="top",
        fontsize=7,
        color="0.25",
        bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.85},
    )


def draw_metric(ax, key: str, title: str, runs: list[tuple[str, list[dict], Path]], window: int) -> None:
    """One metric of every run on one axes: raw points faint, the moving average over them."""
    lacking, gaps = [], []
    for color, (label, records, path) in enumerate(runs):
        steps, values = series(records, key, path)
        finite = np.isfinite(values)  # a NaN loss is a gap, said on the panel
        if not finite.any():
            lacking.append(label)
            continue
        ax.plot(steps, values, color=f"C{color}", lw=0.6, alpha=0.25, marker="." if len(steps) < 50 else None, ms=3)
        ax.plot(steps[finite], moving_average(values[finite], window), color=f"C{color}", lw=1.4, label=label)
        if not finite.all():
            gaps.append(f"{label}: {int((~finite).sum())} non-finite steps left out")
    step_axes(ax, title)
    if len(lacking) == len(runs):
        lacking = ["any run"]
    if lacking or gaps:
        note(ax, "\n".join([f"no {key} in {label}" for label in lacking] + gaps))


def draw_time_split(ax, label: str, records: list[dict], path, window: int) -> None:
    """One run's seconds per step, stacked by phase (each phase smoothed over the steps that have all four)."""
    columns = [series(records, f"t_{phase}", path) for phase in PHASES]
    steps = columns[0][0]
    if any(len(s) != len(records) for s, _ in columns):
        note(ax, "no complete step time split (" + ", ".join(f"t_{p}" for p in PHASES) + ") in this run")
    else:
        seconds = np.stack([moving_average(v, window) for _, v in columns])  # [4, n]
        ax.stackplot(steps, seconds, colors=PHASE_COLORS, alpha=0.8)
    step_axes(ax, f"step time: {label}")
    ax.set_ylabel("seconds")


def draw_legends(plt, ax, labels: list[str]) -> None:
    """The panel that names the runs (line colours) and the phases of the step time (area colours)."""
    ax.axis("off")
    runs = ax.legend(
        [plt.Line2D([], [], color=f"C{i}", lw=2) for i in range(len(labels))],
        labels,
        loc="upper center",
        fontsize=8,
        title="runs",
    )
    ax.add_artist(runs)
    ax.legend(
        [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.8) for c in PHASE_COLORS],
        PHASES,
        loc="lower center",
        fontsize=8,
        title="step time",
        ncols=2,
    )


def metric_panels(runs: list[tuple[str, list[dict], Path]]) -> list[tuple[str, str]]:
    """METRIC_PANELS, then one panel per other loss term a run logged (loss_<name>, e.g. loss_pg,
    loss_kl): a term registered in a fork is drawn with no edit here."""
    fixed = {key for key, _ in METRIC_PANELS}
    terms = dict.fromkeys(
        key
        for _, records, _ in runs
        for record in records
        for key, value in record.items()
        if key.startswith("loss_") and key not in fixed and value is not None
    )
    return [*METRIC_PANELS, *((key, f"loss term {key[5:]}") for key in terms)]


def draw_panels(plt, axes: list, runs: list[tuple[str, list[dict], Path]], window: int) -> None:
    """The metric panels, the legend panel, one time panel a run; the grid's spare slots hidden."""
    panels = metric_panels(runs)
    for ax, (key, title) in zip(axes, panels):
        draw_metric(ax, key, title, runs, window)
    draw_legends(plt, axes[len(panels)], [label for label, _, _ in runs])
    time_axes = axes[len(panels) + 1 :]
    for ax, (label, records, path) in zip(time_axes, runs):
        draw_time_split(ax, label, records, path, window)
    for ax in time_axes[len(runs) :]:
        ax.set_visible(False)


def plot_curves(run_dirs, out_dir=None, window: int | None = None) -> list[Path]:
    """Read every run, draw the figure and write <out_dir>/curves.png and .pdf (default: the first run's directory)."""
    if not run_dirs:
        raise CurvesError("no run directory given; usage: python -m evaluation.curves runs/<name> [runs/<other> ...]")
    run_dirs = [Path(d) for d in run_dirs]
    runs = [(label, read_metrics(d), d / "metrics.jsonl") for label, d in zip(run_labels(run_dirs), run_dirs)]
    window = default_window(max(len(r) for _, r, _ in runs)) if window is None else window
    check_window(window)  # before anything is drawn
    out_dir = Path(out_dir) if out_dir is not None else run_dirs[0]
    out_dir.mkdir(parents=True, exist_ok=True)

    plt = pyplot()
    n_slots = len(metric_panels(runs)) + 1 + len(runs)  # metrics, the legend, one time panel a run
    nrows = math.ceil(n_slots / NCOLS)
    fig, axes = plt.subplots(
        nrows, NCOLS, figsize=(3.2 * NCOLS, 2.8 * nrows + 0.4), squeeze=False, layout="constrained"
    )
    try:
        draw_panels(plt, list(axes.flat), runs, window)
        fig.suptitle(f"Training curves (moving average over {window} step{'s' * (window > 1)}, raw values faint)")
        written = [out_dir / "curves.png", out_dir / "curves.pdf"]
        for path in written:
            fig.savefig(path, dpi=150, bbox_inches="tight")
    finally:
        plt.close(fig)
    return written


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description="Training curves of one or more runs (see the module docstring).")
    parser.add_argument("runs", nargs="+", help="run directories, each holding the metrics.jsonl credo.py wrote")
    parser.add_argument("--out", default=None, help="folder for curves.png and curves.pdf (default: the first run's)")
    parser.add_argument(
        "--smooth",
        type=int,
        default=None,
        help="moving-average window in steps (1: no smoothing; default: 1/25 of the longest run, odd)",
    )
    parser.add_argument("--debug", action="store_true", help="a traceback instead of the one-line error")
    args = parser.parse_args(argv)
    try:
        written = plot_curves(args.runs, args.out, args.smooth)
    except CurvesError as error:
        if args.debug:
            raise
        parser.exit(2, f"plot: {error} (--debug shows the traceback)\n")
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
