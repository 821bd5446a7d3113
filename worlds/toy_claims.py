"""The toy's claims and the statistics they are read with, on the toy's tables (worlds/toy_tables.py).

Holds: the 95% t-interval over training seeds (`interval`), the paper's "within noise" test of
one row's accuracy against another's (`within_noise_of`), the bootstrap interval of the AUROC over
problems (`problem_interval`), the range where one more seed lands (`prediction_range`, with the
quantiles of Student's t it needs: `t_within`, `t_quantile`), and the
claims themselves (`claims`), as pure functions of the
aggregated rows `{row: {column: (mean, half-width), "seeds": [...]}}` that toy_tables.aggregate
makes (rows named as toy_tables.ROWS, the warm start `BASE`). Does not hold: the rows, jobs or
tables (worlds/toy_tables.py), nor the metrics of one pool (metrics.py).
"""

from __future__ import annotations

import math

import numpy as np

from metrics import auroc

BASE = "base"  # the warm start read through its verbalized numeral (tab:main's Base row)
BASE_READOUT = "base_readout"  # the warm start read through the readout: CREDO's before


def t_within(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with `df` (a positive integer) degrees of freedom, in closed form
    (Abramowitz and Stegun 26.7.3 and 26.7.4): with theta = atan(t / sqrt(df)), a finite series
    in cos(theta)^2.

    >>> round(t_within(2.776, 4), 4), round(t_within(1.0, 1), 4)  # t(4)'s 95% point; Cauchy: 1/2
    (0.95, 0.5)
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, not {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2, term, series = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 1:  # 2/pi * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), df - 3 the last power
        for k in range(2, df - 1, 2):
            term *= k / (k + 1) * cos2
            series += term
        tail = math.sin(theta) * math.cos(theta) * series if df > 1 else 0.0
        return 2 / math.pi * (theta + tail)
    for k in range(1, df - 2, 2):  # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), df - 2 the last power
        term *= k / (k + 1) * cos2
        series += term
    return math.sin(theta) * series


def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| < t) = `level` for Student's t with `df` degrees of freedom: the two-sided
    quantile (bisection on t_within to 1e-9).

    >>> round(t_quantile(0.95, 4), 3), round(t_quantile(0.995, 4), 3)  # the tables' 2.776 and 5.598
    (2.776, 5.598)
    """
    if not 0 < level < 1:
        raise ValueError(f"a two-sided quantile's level is in (0, 1), not {level}")
    low, high = 0.0, 1.0
    while t_within(high, df) < level:
        high *= 2
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (middle, high) if t_within(middle, df) < level else (low, middle)
    return (low + high) / 2


def t_table(level: float, df: int) -> float:
    """t_quantile to three decimals, as printed tables give it: the t of every interval and range
    here, so that a hand computation with a table's t agrees exactly.

    >>> t_table(0.95, 2), t_table(0.995, 4)
    (4.303, 5.598)
    """
    return round(t_quantile(level, df), 3)


# Two-sided 95% quantiles by degrees of freedom (n seeds - 1): the t of `interval` and
# `within_noise_of`; up to 11 seeds a row (toy_tables.parse_seeds).
T_975 = {df: t_table(0.95, df) for df in range(1, 11)}


def interval(values: list[float]) -> tuple[float, float | None]:
    """Mean and half-width of the 95% t-interval over seeds (None for one value).

    >>> mean, half = interval([0.5, 0.6, 0.7])      # std 0.1, t(2) = 4.303: 4.303 * 0.1 / sqrt(3)
    >>> round(mean, 6), round(half, 3), interval([0.5])
    (0.6, 0.248, (0.5, None))
    """
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return mean, T_975[n - 1] * std / n**0.5


def prediction_range(values: list[float], figures: int = 1) -> tuple[float, float, float]:
    """Mean and the prediction range of one more draw, from `values` (at least two):
    mean ± t * std * sqrt(1 + 1/n), t with n - 1 degrees of freedom at the two-sided level
    1 - 0.05 / `figures`. One figure: where one more training seed's result lands 95% of the time,
    if seeds differ as these did. `figures` ranges made so (Bonferroni): one more seed has every
    one of its `figures` figures inside its range at least 95% of the time, however they correlate.

    >>> [round(v, 4) for v in prediction_range([0.5, 0.6, 0.7])]  # 4.303 * 0.1 * sqrt(4/3) = 0.4969
    [0.6, 0.1031, 1.0969]
    >>> [round(v, 4) for v in prediction_range([0.5, 0.6, 0.7], figures=10)]  # 14.089 * 0.1 * sqrt(4/3)
    [0.6, -1.0269, 2.2269]
    """
    n = len(values)
    if n < 2:
        raise ValueError(f"a prediction range needs at least two values, not {n}")
    if figures < 1:
        raise ValueError(f"a prediction range is for at least one figure, not {figures}")
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = t_table(1 - 0.05 / figures, n - 1) * std * (1 + 1 / n) ** 0.5
    return mean, mean - half, mean + half


RESAMPLES = 1000  # bootstrap draws of the problems for problem_interval


def problem_interval(pools: list[list[dict]], resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """The 95% percentile interval of the seeds' mean AUROC when the problems are drawn again: each
    draw takes as many problems as were evaluated, with replacement, every sample of a problem with
    it, the same problems for every seed (`pools`: one job's samples per seed, over the same
    problems). The t-interval over seeds counts how training seeds differ; this counts which
    problems the split happened to hold (git show a544024:docs/journal/toy-protocol-extra.md). None
    where a draw has no (correct, wrong) pair to rank or `pools` is empty.

    >>> cases = [("x", 1, 0.9), ("x", 0, 0.2), ("y", 1, 0.8), ("y", 0, 0.1)]
    >>> pool = [{"problem_id": p, "a": a, "c": c} for p, a, c in cases]
    >>> problem_interval([pool], resamples=50)  # every draw ranks right above wrong: AUROC 1
    (1.0, 1.0)
    """
    if not pools:
        return None
    problems = sorted({r["problem_id"] for pool in pools for r in pool})
    index = {p: i for i, p in enumerate(problems)}
    by_seed = []
    for pool in pools:
        scored = [r for r in pool if r["c"] is not None]
        by_seed.append(
            (
                np.array([index[r["problem_id"]] for r in scored]),
                np.array([r["c"] for r in scored], dtype=float),
                np.array([r["a"] for r in scored], dtype=float),
            )
        )
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(resamples):
        times = np.bincount(rng.integers(0, len(problems), len(problems)), minlength=len(problems))
        values = []
        for which, c, a in by_seed:  # a problem drawn k times counts its samples k times
            weight = times[which]
            value = auroc(np.repeat(c, weight), np.repeat(a, weight))
            if value is None:
                return None
            values.append(value)
        means.append(sum(values) / len(values))
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


# The toy's claims, read off the tables (docs/journal/toy-protocol-v13.md pre-registers them): RL raises
# accuracy; CREDO's readout calibrated (ECE) and ranking (AUROC, and against the level-and-style
# ceiling); its accuracy kept (its interval reaches the warm start's mean or above, and it is within
# noise of GRPO's); RLCR's numerals on a handful of values; and whether CREDO learns the readout
# (calibration and ranking beyond the warm start's readout, calibration beyond the alpha=0 row's).
CLAIM_AUROC, CLAIM_ECE, CLAIM_LEVELS = 0.80, 0.08, 6.0


def above(mine: tuple, other: tuple) -> bool:
    """Whether the interval `mine` (mean, half-width) lies wholly above `other`: its low end above the
    other's high end (a missing half-width counts as 0).

    >>> above((0.80, 0.02), (0.70, 0.05)), above((0.80, 0.02), (0.76, 0.03)), above((0.8, None), (0.7, None))
    (True, False, True)
    """
    return mine[0] - (mine[1] or 0.0) > other[0] + (other[1] or 0.0)


def within_noise_of(mine: dict, other: dict) -> tuple[float, float] | None:
    """(mean accuracy difference mine - other, their joint standard error), or None where either
    row has a single seed. "Within noise" is the paper's tab:main convention: no further below than
    one joint standard error, sqrt(se_mine^2 + se_other^2), over training seeds (each se is
    interval()'s half-width over t).

    >>> diff, joint = within_noise_of({"acc": (0.80, 4.303 * 0.03 / 3**0.5), "seeds": [1, 2, 3]},
    ...                               {"acc": (0.82, 4.303 * 0.04 / 3**0.5), "seeds": [1, 2, 3]})
    >>> round(diff, 6), round(joint, 6)     # sqrt(0.03^2 + 0.04^2) / sqrt(3) = 0.05 / sqrt(3)
    (-0.02, 0.028868)
    """
    if mine["acc"][1] is None or other["acc"][1] is None:
        return None
    se_mine, se_other = (row["acc"][1] / T_975[len(row["seeds"]) - 1] for row in (mine, other))
    return mine["acc"][0] - other["acc"][0], (se_mine**2 + se_other**2) ** 0.5


def claims(rows: dict) -> list[tuple[str, bool]]:
    """(claim with its measured value, whether it holds) for each claim the rows can decide.

    >>> rows = {"base": {"acc": (0.48, 0.01)}, "credo": {"acc": (0.47, 0.02), "auroc": (0.85, 0.01),
    ...         "ece": (0.09, 0.02), "auroc_ceiling": (0.84, 0.01)}, "rlcr": {"effective_levels": (4.1, 0.3)}}
    >>> [holds for _, holds in claims(rows)]
    [False, True, True, False, True, True]
    """
    found = []
    if BASE in rows:
        base = rows[BASE]["acc"]
        for row, name in (("grpo", "GRPO"), ("credo", "CREDO")):
            if row in rows:
                acc = rows[row]["acc"]
                found.append(
                    (
                        f"RL raises accuracy: {name}'s interval above the warm start's ({acc[0]:.3f} ± "
                        f"{acc[1] or 0:.3f} vs {base[0]:.3f} ± {base[1] or 0:.3f})",
                        above(acc, base),
                    )
                )
    if "credo" in rows:
        credo = rows["credo"]
        auroc, ece = credo["auroc"], credo["ece"]
        spread = credo.get("auroc_problems")
        over = f"; over problems {spread[0]:.3f}-{spread[1]:.3f}" if spread else ""
        found.append((f"CREDO's readout AUROC >= {CLAIM_AUROC} (mean {auroc[0]:.3f}{over})", auroc[0] >= CLAIM_AUROC))
        if credo.get("auroc_ceiling"):
            ceiling = credo["auroc_ceiling"][0]
            found.append(
                (
                    f"CREDO's readout ranks at least as well as its level-and-style ceiling (AUROC {auroc[0]:.3f} "
                    f"vs ceiling {ceiling:.3f})",
                    auroc[0] >= ceiling,
                )
            )
        found.append((f"CREDO's readout ECE <= {CLAIM_ECE} (mean {ece[0]:.3f})", ece[0] <= CLAIM_ECE))
        if BASE in rows:
            (acc, half), base = credo["acc"], rows[BASE]["acc"][0]
            found.append(
                (
                    f"CREDO's accuracy no lower than the warm start's within noise ({acc:.3f} ± {half or 0:.3f} "
                    f"vs {base:.3f})",
                    acc + (half or 0.0) >= base,
                )
            )
        gap = within_noise_of(credo, rows["grpo"]) if "grpo" in rows else None
        if gap is not None:
            diff, joint = gap
            found.append(
                (
                    f"CREDO's accuracy within noise of GRPO's ({credo['acc'][0]:.3f} vs "
                    f"{rows['grpo']['acc'][0]:.3f}: {diff:+.4f}, one joint standard error {joint:.4f})",
                    diff >= -joint,
                )
            )
        if BASE_READOUT in rows:
            before = rows[BASE_READOUT]
            found.append(
                (
                    f"CREDO learns the readout's calibration: its ECE below the warm start's readout's "
                    f"({ece[0]:.3f} ± {ece[1] or 0:.3f} vs {before['ece'][0]:.3f} ± {before['ece'][1] or 0:.3f})",
                    above(before["ece"], ece),
                )
            )
            found.append(
                (
                    f"CREDO learns the readout's ranking: its AUROC above the warm start's readout's "
                    f"({auroc[0]:.3f} ± {auroc[1] or 0:.3f} vs {before['auroc'][0]:.3f} ± "
                    f"{before['auroc'][1] or 0:.3f})",
                    above(auroc, before["auroc"]),
                )
            )
        if "credo_alpha0" in rows:
            without = rows["credo_alpha0"]["ece"]
            found.append(
                (
                    f"The calibration loss is what calibrates: CREDO's ECE below the alpha=0 row's "
                    f"({ece[0]:.3f} ± {ece[1] or 0:.3f} vs {without[0]:.3f} ± {without[1] or 0:.3f})",
                    above(without, ece),
                )
            )
    if "rlcr" in rows:
        levels = rows["rlcr"]["effective_levels"][0]
        found.append(
            (
                f"RLCR's numerals on a handful of values (effective levels {levels:.1f} <= {CLAIM_LEVELS})",
                levels <= CLAIM_LEVELS,
            )
        )
    return found
