"""The paper's evaluation figures: `fig:reliability` (equal-mass bins, Wilson intervals),
`fig:collapse` and `fig:riskcov`, as PNG and PDF, one set per (domain, scope).

Holds: drawing only. The numbers behind each figure come from metrics.py, the pools from
evaluation/report.py's records. matplotlib is imported when a figure is drawn (the Agg backend), so
nothing else pays for it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from evaluation.report import (
    DOMAIN_TITLES,
    SCOPE_TITLES,
    SCOPES,
    record_scope,
    row_label,
    row_sort_key,
    validate_record,
)
from metrics import aurc, ece, reliability_points, selective_curve, tie_tax, value_concentration
from rollout import DOMAINS

METHOD_COLORS = {"Base": "C7", "GRPO": "C0", "RLCR": "C2", "DCPO": "C1", "CREDO": "C3"}


def _row_colors(rows) -> dict:
    """One colour per row, the same in every figure: a method's `-d` row shares its colour;
    CREDO is red as in the paper; other methods take the unused colours in turn."""
    spare = iter(c for c in ("C4", "C5", "C6", "C8", "C9") if c not in METHOD_COLORS.values())
    colors, extra = {}, {}
    for row in rows:
        method = row[:-2] if row.endswith("-d") else row
        if method not in METHOD_COLORS and method not in extra:
            extra[method] = next(spare, "k")
        colors[row] = METHOD_COLORS.get(method) or extra[method]
    return colors


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_and_close(plt, fig, stem) -> list[Path]:
    """Write `fig` as <stem>.png and <stem>.pdf, close it, and return the two paths."""
    written = []
    for suffix in (".png", ".pdf"):
        path = Path(stem).with_suffix(suffix)
        fig.savefig(path, dpi=150, bbox_inches="tight")
        written.append(path)
    plt.close(fig)
    return written


def _panel_grid(plt, n_panels: int, panel_size: float = 2.8):
    ncols = min(n_panels, 4)
    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(panel_size * ncols, panel_size * nrows + 0.4), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


def figure_pools(records: list[dict], domain: str, scope: str, rows=None) -> dict:
    """{row: (conf, correct)} pooled over runs and sets of one (domain, scope), parse failures left out.

    `rows`: the rows to keep (default: each method's own channel, i.e. every
    row that is not a digit-expectation `-d` row, as in `fig:reliability`).
    Rows with no parsed sample are dropped.
    """
    pools: dict[str, tuple[list, list]] = {}
    for i, record in enumerate(records):
        validate_record(record, f"record {i}")
        if record["set_domain"] != domain or record_scope(record) != scope or record["c"] is None:
            continue
        row = row_label(record["method"], record["source"])
        if (rows is None and record["source"] == "digit") or (rows is not None and row not in rows):
            continue
        conf, correct = pools.setdefault(row, ([], []))
        conf.append(record["c"])
        correct.append(record["a"])
    return {
        row: (np.array(pools[row][0], dtype=np.float64), np.array(pools[row][1], dtype=np.float64))
        for row in sorted(pools, key=row_sort_key)
    }


def plot_reliability(pools: dict, stem, title: str, n_bins: int = 10) -> list[Path]:
    """`fig:reliability`: one panel per row; equal-mass bins, Wilson 95% bars, the diagonal."""
    plt = _pyplot()
    fig, axes = _panel_grid(plt, len(pools))
    colors = _row_colors(pools)
    for ax, (row, (conf, correct)) in zip(axes, pools.items(), strict=True):
        points = reliability_points(conf, correct, n_bins)
        x = [p["conf"] for p in points]
        y = [p["acc"] for p in points]
        yerr = [[p["acc"] - p["lo"] for p in points], [p["hi"] - p["acc"] for p in points]]
        ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1)
        ax.errorbar(x, y, yerr=yerr, fmt="o-", ms=4, lw=1.2, capsize=2, color=colors[row])
        ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), aspect="equal", title=row, xlabel="mean confidence")
        ax.text(
            0.04,
            0.96,
            f"n = {conf.size}\n{len(points)} bins, ECE {ece(conf, correct):.3f}",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
        )
    axes[0].set_ylabel("accuracy")
    fig.suptitle(title)
    return _save_and_close(plt, fig, stem)


def plot_collapse(pools: dict, stem, title: str) -> list[Path]:
    """`fig:collapse`: per row, the share of the pool at each reported value (0.01-wide bars),
    annotated with effective levels, top share and tie tax (computed on the exact values)."""
    plt = _pyplot()
    fig, axes = _panel_grid(plt, len(pools), panel_size=3.0)
    edges = np.linspace(-0.005, 1.005, 102)
    colors = _row_colors(pools)
    for ax, (row, (conf, correct)) in zip(axes, pools.items(), strict=True):
        counts, _ = np.histogram(conf, bins=edges)
        shares = counts / max(conf.size, 1)
        ax.bar(edges[:-1] + 0.005, shares, width=0.01, color=colors[row])
        levels, top = value_concentration(conf)
        tax = tie_tax(conf, correct)
        ax.text(
            0.04,
            0.96,
            f"eff. levels {levels:.1f}\ntop share {top:.2f}\ntie tax " + ("–" if tax is None else f"{tax:.3f}"),
            transform=ax.transAxes,
            va="top",
            fontsize=7,
        )
        # the three lines of text take the top 30% of the axes: the bars stay below them
        ax.set(xlim=(-0.02, 1.02), ylim=(0, max(float(shares.max()), 1e-9) / 0.62), title=row)
        ax.set_xlabel("reported confidence")
    axes[0].set_ylabel("share of pool")
    fig.suptitle(title)
    return _save_and_close(plt, fig, stem)


def plot_risk_coverage(pools: dict, stem, title: str) -> list[Path]:
    """`fig:riskcov`: risk 1 - acc against coverage for every row on one axes, the risk
    held constant below the first achievable coverage (as AURC integrates it)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 3.6), layout="constrained")
    colors = _row_colors(pools)
    for row, (conf, correct) in pools.items():
        coverage, accuracy = selective_curve(conf, correct)
        risk = 1.0 - accuracy
        ax.plot(
            np.insert(coverage, 0, 0.0),
            np.insert(risk, 0, risk[0]),
            lw=1.5,
            color=colors[row],
            label=f"{row} (AURC {100 * aurc(coverage, accuracy):.2f}%)",
        )
    ax.set(xlim=(0, 1), ylim=(0, None), xlabel="coverage", ylabel="risk (1 - accuracy)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save_and_close(plt, fig, stem)


def make_figures(
    records: list[dict], out_dir, n_bins: int = 10, riskcov_omit=("Base",)
) -> tuple[list[Path], dict[str, str]]:
    """Write reliability, collapse and risk-coverage figures (PNG and PDF) per (domain, scope).

    Pools are each method's own channel (no `-d` rows), pooled over runs and
    sets (`fig:reliability`, `fig:collapse`); the risk-coverage figure omits
    the rows in `riskcov_omit` (the paper omits Base). A (domain, scope)
    without records gets no figure. Files: reliability_<domain>_<scope>,
    collapse_<domain>_<scope>, riskcov_<domain>_<scope>.

    A figure that fails does not stop the others: returns (paths written,
    {figure stem: "ErrorType: message"} for each figure that failed).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not records:
        raise ValueError("no records to plot")
    written: list[Path] = []
    failed: dict[str, str] = {}

    def draw(plot, pools, stem: str, *args) -> None:
        try:
            written.extend(plot(pools, out_dir / stem, *args))
        except Exception as error:  # reported to the caller, never swallowed
            _pyplot().close("all")
            failed[stem] = f"{type(error).__name__}: {error}"

    for domain in DOMAINS:
        for scope in SCOPES:
            pools = figure_pools(records, domain, scope)
            if not pools:
                continue
            where = f"{DOMAIN_TITLES[domain]}, {SCOPE_TITLES[scope].lower()}"
            draw(plot_reliability, pools, f"reliability_{domain}_{scope}", f"Calibration curves: {where}", n_bins)
            draw(plot_collapse, pools, f"collapse_{domain}_{scope}", f"Reported values: {where}")
            kept = {row: pool for row, pool in pools.items() if row not in riskcov_omit}
            if kept:
                draw(plot_risk_coverage, kept, f"riskcov_{domain}_{scope}", f"Risk–coverage: {where}")
    return written, failed


def plot_row_intervals(rows: dict, stem, title: str) -> list[Path]:
    """One panel per metric (Acc, ECE, ...): each row's mean as a bar with its 95% interval, and
    each seed's value as a dot. `rows`: {row: {metric: (mean, half-width or None, [per-seed values])}}."""
    plt = _pyplot()
    metrics = list(dict.fromkeys(metric for values in rows.values() for metric in values))
    fig, axes = _panel_grid(plt, len(metrics), panel_size=3.4)
    labels = list(rows)
    colors = _row_colors([label.split(" ")[0] for label in labels])
    for ax, metric in zip(axes, metrics, strict=True):
        for x, label in enumerate(labels):
            if metric not in rows[label]:
                continue
            mean, half, values = rows[label][metric]
            color = colors[label.split(" ")[0]]
            ax.bar(x, mean, width=0.7, color=color, alpha=0.55)
            if half is not None:
                ax.errorbar(x, mean, yerr=half, color="k", capsize=3, lw=1)
            ax.plot([x] * len(values), values, "o", ms=3, color="k")
        ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_title(metric)
    fig.suptitle(title, fontsize=9)
    return _save_and_close(plt, fig, stem)
