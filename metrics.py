"""The paper's calibration metrics of one pool of (confidence, correctness) pairs (`app:data`,
`fig:collapse`), one pure function each, as losses.py holds its equations.

Holds: ECE, Brier, AUROC, the selective-prediction curve with AURC and acc@tau, and the
collapse statistics (effective levels, top share, tie tax), as pure numpy functions that
return plain Python floats. The training loop logs a batch's ECE and Brier with them and
`evaluation/report.py` aggregates them over evaluation records. Does not hold: records, seeds,
tables or figures (evaluation/report.py, evaluation/figures.py), nor anything that trains (losses.py).
Imports nothing of the project.

Conventions (each pinned by a test in tests/test_metrics.py)
------------------------------------------------------------
* A *pool* is a pair of 1-D arrays: `conf` (c_i in [0, 1]) and `correct`
  (a_i in {0, 1}). A metric that is undefined on the pool is `None`, never NaN.
* ECE: ten equal-width bins, bin = min(floor(round(10 c, 6)), 9) (`ece_bin_index`):
  0 is in the first bin, 1.0 in the last, and an exact k/10 in the bin it starts
  (0.3 -> bin 3).
* AUROC: the Mann-Whitney probability that a correct sample outranks a wrong
  one, a tie counting one half; `None` when the pool holds one class.
* Selective prediction (`app:data`): only tie-group boundaries are achievable
  thresholds. For the distinct values v_1 > ... > v_K, cov_k = |{c >= v_k}| / n
  and acc_k is the accuracy of that set; Thr. = K. AURC integrates the risk
  1 - acc over coverage [0, 1] with the trapezoid rule between achievable
  points, constant (the risk at cov_1) below cov_1; acc@tau interpolates
  (cov_k, acc_k) linearly in coverage, constant (acc_1) below cov_1.
* Collapse (`fig:collapse`): effective levels = 1 / sum_v p_v^2 over the
  distinct reported values; top share = share of the most frequent value;
  tie tax = 1/2 P(c+ = c-) over (correct, wrong) pairs, the AUROC that exact
  ties cost relative to breaking every tie the right way.

Worked example (six samples, three tie groups)::

    >>> m = calibration_metrics([0.9, 0.9, 0.6, 0.6, 0.6, 0.2], [1, 0, 1, 1, 0, 0])
    >>> m["acc"], m["thr"], round(m["aurc"], 4), round(m["acc@50"], 4)
    (0.5, 3, 0.4667, 0.5333)
"""

from __future__ import annotations

import math

import numpy as np

N_ECE_BINS = 10
SELECTIVE_COVERAGES = {"acc@50": 0.5, "acc@80": 0.8, "acc@90": 0.9}
METRIC_KEYS = (
    "n",
    "acc",
    "ece",
    "auroc",
    "brier",
    "aurc",
    "acc@50",
    "acc@80",
    "acc@90",
    "thr",
    "effective_levels",
    "top_share",
    "tie_tax",
)


def _pool(conf, correct) -> tuple[np.ndarray, np.ndarray]:
    """Validate a pool and return it as float64 arrays (c in [0, 1], a in {0, 1})."""
    c = np.asarray(conf, dtype=np.float64)
    a = np.asarray(correct)
    if c.ndim != 1 or a.ndim != 1:
        raise ValueError(f"conf and correct must be 1-D, got shapes {c.shape} and {a.shape}")
    if c.shape != a.shape:
        raise ValueError(f"conf and correct differ in length: {c.size} vs {a.size}")
    if c.size == 0:
        raise ValueError("empty pool: no (confidence, correctness) pairs to score")
    if np.isnan(c).any():
        raise ValueError(f"conf holds NaN at positions {np.flatnonzero(np.isnan(c))[:10].tolist()}")
    outside = (c < 0.0) | (c > 1.0)
    if outside.any():
        raise ValueError(f"conf must lie in [0, 1]; found {c[outside][:5].tolist()}")
    a = a.astype(np.float64)
    if not np.isin(a, (0.0, 1.0)).all():
        raise ValueError(f"correct must be 0/1 (or bool); found {np.unique(a)[:5].tolist()}")
    return c, a


def ece_bin_index(conf: np.ndarray, n_bins: int = N_ECE_BINS) -> np.ndarray:
    """Equal-width bin of each confidence: min(floor(round(n_bins * c, 6)), n_bins - 1).

    Rounding first keeps an exact k/10 in the bin it starts (0.3 -> bin 3, where a
    float 10 * 0.3 = 2.9999999999999996 would fall to bin 2); 0 is in the first
    bin and 1.0 in the last.

    >>> ece_bin_index(np.array([0.0, 0.3, 0.35, 0.999, 1.0])).tolist()
    [0, 3, 3, 9, 9]
    """
    scaled = np.round(np.asarray(conf, dtype=np.float64) * n_bins * 1e6) / 1e6
    return np.clip(np.floor(scaled).astype(np.int64), 0, n_bins - 1)


def ece(conf, correct, n_bins: int = N_ECE_BINS) -> float:
    """ECE = sum_b |B_b|/n |mean_B(a) - mean_B(c)| over equal-width bins (`app:data`).

    Bins come from `ece_bin_index` (0.3 starts bin 3; 0 and 1.0 sit in
    the first and last bin). Since |B|/n |mean_B(a) - mean_B(c)| = |sum_B (a - c)| / n,
    the sum runs over the per-bin totals.

    >>> ece([0.9, 0.9, 0.2, 0.25], [1, 0, 0, 0])
    0.3125
    >>> ece([0.3, 0.39], [1, 0])      # both in bin 3: |1 - 0.69| / 2
    0.155
    """
    c, a = _pool(conf, correct)
    bins = ece_bin_index(c, n_bins)
    gap = np.zeros(n_bins)
    np.add.at(gap, bins, a - c)
    return round(float(np.abs(gap).sum() / c.size), 12)


def brier(conf, correct) -> float:
    """Brier = mean (c_i - a_i)^2 (`app:data`).

    >>> brier([0.9, 0.2], [1, 1])
    0.325
    """
    c, a = _pool(conf, correct)
    return round(float(np.mean((c - a) ** 2)), 12)


def _pair_counts(c: np.ndarray, a: np.ndarray) -> tuple[int, int, int]:
    """Over all (correct, wrong) pairs: how many rank the correct one higher, how many tie, how many pairs."""
    pos = c[a == 1.0]
    neg = np.sort(c[a == 0.0])
    below = np.searchsorted(neg, pos, side="left")  # wrong samples strictly below each correct one
    at_or_below = np.searchsorted(neg, pos, side="right")
    return int(below.sum()), int((at_or_below - below).sum()), pos.size * neg.size


def auroc(conf, correct) -> float | None:
    """AUROC of scoring a with c: P(c+ > c-) + 1/2 P(c+ = c-) (Mann-Whitney; `app:data`).

    None when the pool holds only correct or only wrong samples (no pair to rank).

    >>> auroc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0])     # pairs: 1, 1, 1/2 (tie), 1 -> 3.5 / 4
    0.875
    >>> auroc([0.3, 0.8], [1, 1]) is None
    True
    """
    c, a = _pool(conf, correct)
    greater, tied, pairs = _pair_counts(c, a)
    if pairs == 0:
        return None
    return (greater + 0.5 * tied) / pairs


def tie_tax(conf, correct) -> float | None:
    """1/2 P(c+ = c-) over (correct, wrong) pairs: the AUROC lost to exactly equal reports (`fig:collapse`).

    Breaking every tie the right way would add this much to the AUROC. None
    with one class.

    >>> tie_tax([0.8, 0.8, 0.8, 0.2], [1, 1, 0, 0])    # 2 of 4 pairs tie -> 1/2 * 2/4
    0.25
    """
    c, a = _pool(conf, correct)
    _, tied, pairs = _pair_counts(c, a)
    if pairs == 0:
        return None
    return 0.5 * tied / pairs


def value_concentration(conf) -> tuple[float, float]:
    """(effective levels, top share) of the reported values (`fig:collapse`).

    With p_v the share of the pool reporting exactly v: effective levels =
    1 / sum_v p_v^2 (the number of equally used values with the same
    concentration), top share = max_v p_v.

    >>> value_concentration([0.9, 0.9, 0.9, 0.5])       # p = (3/4, 1/4): 1 / (9/16 + 1/16)
    (1.6, 0.75)
    """
    c, _ = _pool(conf, np.zeros(len(conf)))
    _, counts = np.unique(c, return_counts=True)
    shares = counts / c.size
    return round(float(1.0 / np.sum(shares**2)), 12), float(shares.max())


def selective_curve(conf, correct) -> tuple[np.ndarray, np.ndarray]:
    """Achievable (coverage, accuracy) points of selective prediction (`app:data`).

    For the distinct values v_1 > ... > v_K: coverage[k] = |{c >= v_k}| / n and
    accuracy[k] = mean a over that set. A threshold cannot split equal
    confidences, so these K points are all there is; coverage rises strictly
    and ends at 1.

    >>> cov, acc = selective_curve([0.9, 0.9, 0.6, 0.6, 0.6, 0.2], [1, 0, 1, 1, 0, 0])
    >>> cov.round(4).tolist(), acc.round(4).tolist()
    ([0.3333, 0.8333, 1.0], [0.5, 0.6, 0.5])
    """
    c, a = _pool(conf, correct)
    order = np.argsort(-c, kind="stable")
    c_sorted, a_sorted = c[order], a[order]
    group_ends = np.flatnonzero(np.append(c_sorted[1:] != c_sorted[:-1], True))  # last index of each tie group
    answered = group_ends + 1
    return answered / c.size, np.cumsum(a_sorted)[group_ends] / answered


def aurc(coverage: np.ndarray, accuracy: np.ndarray) -> float:
    """Area under the risk-coverage curve on [0, 1] (`app:data`, `tab:riskcov`).

    Risk = 1 - accuracy; constant at the first point's risk on [0, cov_1], then
    the trapezoid rule between consecutive achievable points.

    >>> aurc(np.array([0.5, 1.0]), np.array([0.8, 0.6]))   # 0.5 * 0.2 + 0.5 * (0.2 + 0.4) / 2
    0.25
    """
    risk = 1.0 - np.asarray(accuracy, dtype=np.float64)
    coverage = np.asarray(coverage, dtype=np.float64)
    area = coverage[0] * risk[0] + np.sum(np.diff(coverage) * (risk[1:] + risk[:-1]) / 2.0)
    return round(float(area), 12)


def accuracy_at_coverage(coverage: np.ndarray, accuracy: np.ndarray, tau: float) -> float:
    """acc@tau: accuracy interpolated linearly in coverage, constant (acc_1) below cov_1 (`app:data`).

    >>> accuracy_at_coverage(np.array([0.5, 1.0]), np.array([0.8, 0.6]), 0.75)
    0.7
    >>> accuracy_at_coverage(np.array([0.5, 1.0]), np.array([0.8, 0.6]), 0.3)
    0.8
    """
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"coverage tau must lie in (0, 1], got {tau}")
    return round(float(np.interp(tau, coverage, accuracy)), 12)


def calibration_metrics(conf, correct) -> dict:
    """Every metric of `app:data` and `fig:collapse` on one pool, as plain Python values.

    Keys: n, acc, ece, auroc, brier, aurc, acc@50, acc@80, acc@90, thr
    (number of achievable thresholds, K), effective_levels, top_share, tie_tax.
    auroc and tie_tax are None for a one-class pool. Raises ValueError on an
    empty pool, a NaN, or a confidence outside [0, 1].

    >>> m = calibration_metrics([1.0, 0.7, 0.3, 0.0], [1, 1, 0, 0])
    >>> m["ece"], m["auroc"], m["brier"], m["thr"], m["effective_levels"]
    (0.15, 1.0, 0.045, 4, 4.0)
    """
    c, a = _pool(conf, correct)
    coverage, accuracy = selective_curve(c, a)
    levels, top = value_concentration(c)
    metrics = {
        "n": int(c.size),
        "acc": float(a.mean()),
        "ece": ece(c, a),
        "auroc": auroc(c, a),
        "brier": brier(c, a),
        "aurc": aurc(coverage, accuracy),
    }
    for key, tau in SELECTIVE_COVERAGES.items():
        metrics[key] = accuracy_at_coverage(coverage, accuracy, tau)
    metrics.update(thr=int(coverage.size), effective_levels=levels, top_share=top, tie_tax=tie_tax(c, a))
    return metrics


# --- Reliability diagrams (fig:reliability): equal-mass bins and Wilson intervals ---------


def equal_mass_bins(conf, n_bins: int = 10) -> list[np.ndarray]:
    """Split a pool into at most n_bins bins of about equal size that never split a tie group.

    The samples are sorted by confidence and cut near the targets k n / n_bins;
    each tie group (equal confidences) goes whole into one bin, on whichever
    side of a target leaves the bin closer to it. A large tie group therefore
    makes its bin bigger and the number of bins smaller (three distinct values
    give at most three bins). Returns the original indices of each bin, bins
    in increasing confidence.

    >>> [b.tolist() for b in equal_mass_bins([0.1, 0.2, 0.3, 0.4], 2)]
    [[0, 1], [2, 3]]
    >>> [b.tolist() for b in equal_mass_bins([0.5, 0.5, 0.5, 0.9], 2)]   # the tie stays together
    [[0, 1, 2], [3]]
    """
    c, _ = _pool(conf, np.zeros(len(conf)))
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    order = np.argsort(c, kind="stable")
    starts = np.flatnonzero(np.insert(c[order][1:] != c[order][:-1], 0, True))
    tie_groups = np.split(order, starts[1:])
    n = c.size
    bins: list[np.ndarray] = []
    current: list[np.ndarray] = []
    filled = 0  # samples in closed bins and the current one
    k = 1  # the next target is k * n / n_bins

    def target() -> float:
        return k * n / n_bins if k < n_bins and len(bins) < n_bins - 1 else math.inf

    def close() -> None:
        nonlocal current, k
        bins.append(np.concatenate(current))
        current = []
        while target() <= filled:
            k += 1

    for group in tie_groups:
        goal = target()
        if current and filled + group.size > goal and goal - filled < filled + group.size - goal:
            close()  # closing before the group lands nearer the target
        current.append(group)
        filled += group.size
        if filled >= target():
            close()
    if current:
        bins.append(np.concatenate(current))
    return bins


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k / n (95% with z = 1.96).

    (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), p = k/n.

    >>> [round(x, 4) for x in wilson_interval(8, 10)]
    [0.4902, 0.9433]
    """
    if n <= 0:
        raise ValueError(f"a Wilson interval needs n >= 1 trials, got n={n}")
    if not 0 <= k <= n:
        raise ValueError(f"successes k must lie in [0, n], got k={k}, n={n}")
    p = k / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = n (k = 0) the exact bound is 1 (0), but center + half rounds to ~1e-16 below it:
    # clamp so that the interval always contains k/n (error bars are never negative).
    return max(0.0, min(p, center - half)), min(1.0, max(p, center + half))


def reliability_points(conf, correct, n_bins: int = 10) -> list[dict]:
    """Points of a reliability diagram over `equal_mass_bins`: per bin the mean
    confidence, the accuracy, its Wilson 95% interval and the bin size.

    >>> top = reliability_points([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1], n_bins=2)[1]
    >>> top["conf"], top["acc"], round(top["lo"], 4), top["hi"], top["n"]
    (0.8, 1.0, 0.3424, 1.0, 2)
    """
    c, a = _pool(conf, correct)
    points = []
    for idx in equal_mass_bins(c, n_bins):
        hits = int(a[idx].sum())
        lo, hi = wilson_interval(hits, idx.size)
        points.append({"conf": float(c[idx].mean()), "acc": hits / idx.size, "lo": lo, "hi": hi, "n": int(idx.size)})
    return points
