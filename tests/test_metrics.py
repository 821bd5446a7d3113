"""metrics.py: the calibration metrics of app:data and fig:collapse against hand-computed
values (every expected number is worked out by hand in the comment next to it).

scikit-learn is a test-only dependency, imported inside the test that uses it.
"""

import doctest
import json
from fractions import Fraction

import numpy as np
import pytest

import metrics


def test_docstring_examples_hold():
    result = doctest.testmod(metrics, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 20 and result.failed == 0


# ECE: ten equal-width bins, the ece_bin_index convention ------------------------------------


def test_ece_values_on_bin_edges():
    # bins: 0.0 -> 0, 0.3 -> 3, 0.7 -> 7, 1.0 -> 9, 0.35 -> 3, 0.69 -> 6
    # per-bin sum(a - c): bin 3: (1 - .3) + (0 - .35) = .35; bin 6: -.69; bin 7: .3; bins 0, 9: 0
    # ECE = (.35 + .69 + .3) / 6 = 1.34 / 6
    conf = [0.0, 0.3, 0.7, 1.0, 0.35, 0.69]
    correct = [0, 1, 1, 1, 0, 0]
    assert metrics.ece(conf, correct) == pytest.approx(1.34 / 6, abs=1e-12)
    # had 0.3 fallen to bin 2 (10 * 0.3 = 2.9999999999999996), ECE would be (.7 + .35 + .69 + .3) / 6
    assert metrics.ece(conf, correct) != pytest.approx(2.04 / 6, abs=1e-6)


def test_ece_one_is_in_the_last_bin_and_zero_in_the_first():
    # 1.0 and 0.95 share bin 9: |(0 - 1) + (1 - .95)| / 2 = .475 (an eleventh bin would give 1.05 / 2)
    assert metrics.ece([1.0, 0.95], [0, 1]) == pytest.approx(0.475, abs=1e-12)
    # 0.0 and 0.05 share bin 0: |(1 - 0) + (0 - .05)| / 2 = .475
    assert metrics.ece([0.0, 0.05], [1, 0]) == pytest.approx(0.475, abs=1e-12)


def test_ece_bin_index_on_bin_edges():
    # 0 -> 0, .3 -> 3 (not 2: 10 * .3 = 2.9999999999999996), .35 -> 3, .69 -> 6, .7 -> 7, .999 -> 9, 1.0 -> 9
    assert metrics.ece_bin_index(np.array([0.0, 0.3, 0.35, 0.69, 0.7, 0.999, 1.0])).tolist() == [0, 3, 3, 6, 7, 9, 9]
    assert metrics.ece_bin_index(np.array([0.25, 0.5, 1.0]), n_bins=4).tolist() == [1, 2, 3]


def naive_ece(conf, correct) -> float:
    """ECE as app:data writes it: sum_b |B_b|/n |mean_B(a) - mean_B(c)|, each c binned by exact
    decimal arithmetic (b = floor(10 c), 1.0 in the last bin): an independent implementation."""
    bins = [min(int(Fraction(str(c)) * 10), 9) for c in conf]
    total = 0.0
    for b in set(bins):
        members = [i for i, k in enumerate(bins) if k == b]
        gap = np.mean([correct[i] for i in members]) - np.mean([conf[i] for i in members])
        total += len(members) / len(conf) * abs(gap)
    return total


def test_ece_agrees_with_the_definition_on_random_pools():
    rng = np.random.default_rng(0)
    for _ in range(5):
        conf = np.round(rng.random(200), 1)  # many values exactly on k/10
        correct = (rng.random(200) < conf).astype(float)
        assert metrics.ece(conf, correct) == pytest.approx(naive_ece(conf.tolist(), correct.tolist()), abs=1e-9)


# AUROC, Brier ----------------------------------------------------------------------------


def test_auroc_ties_count_one_half():
    # pairs (pos, neg): (.9,.5) 1, (.9,.1) 1, (.5,.5) 1/2, (.5,.1) 1 -> 3.5 / 4
    assert metrics.auroc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875)
    assert metrics.auroc([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0]) == pytest.approx(0.5)
    assert metrics.auroc([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 1.0
    assert metrics.auroc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0


def test_one_class_pool_gives_none_not_nan():
    for correct in ([1, 1, 1], [0, 0, 0]):
        m = metrics.calibration_metrics([0.2, 0.5, 0.9], correct)
        assert m["auroc"] is None and m["tie_tax"] is None
        assert m["ece"] is not None and m["brier"] is not None and m["aurc"] is not None
        json.dumps(m, allow_nan=False)


def test_brier_by_hand():
    # ((1 - 1)^2 + (.7 - 1)^2 + (.3 - 0)^2 + (0 - 0)^2) / 4 = .18 / 4
    assert metrics.brier([1.0, 0.7, 0.3, 0.0], [1, 1, 0, 0]) == pytest.approx(0.045)


def roc_area(conf, correct) -> float:
    """The area under the ROC curve by the trapezoid rule, one point per distinct threshold: the
    other standard way to compute AUROC (scikit-learn's), independent of the pair counting of
    metrics.auroc."""
    conf, correct = np.asarray(conf, float), np.asarray(correct, int)
    thresholds = np.unique(conf)[::-1]
    tpr = [0.0] + [float(np.mean(conf[correct == 1] >= t)) for t in thresholds]
    fpr = [0.0] + [float(np.mean(conf[correct == 0] >= t)) for t in thresholds]
    return float(np.sum(np.diff(fpr) * (np.array(tpr[1:]) + np.array(tpr[:-1])) / 2))


def test_roc_area_by_hand():
    # thresholds .9, .5, .1: (fpr, tpr) = (0, 1/2), (1/2, 1), (1, 1): area 1/2 * 3/4 + 1/2 * 1 = .875
    assert roc_area([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875, abs=1e-15)


def test_auroc_and_brier_agree_with_their_definitions_on_random_pools():
    """AUROC against the ROC curve's area (roc_area) and against every (correct, wrong) pair counted
    one by one; Brier against its mean of squares: random pools, half of them with heavy ties."""
    rng = np.random.default_rng(1)
    for trial in range(10):
        n = int(rng.integers(20, 300))
        conf = rng.random(n)
        if trial % 2:
            conf = np.round(conf, 1)  # heavy ties
        correct = (rng.random(n) < conf).astype(int)
        if correct.min() == correct.max():
            continue
        right, wrong = conf[correct == 1], conf[correct == 0]
        by_pairs = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong) / (len(right) * len(wrong))
        assert metrics.auroc(conf, correct) == pytest.approx(by_pairs, abs=1e-12)
        assert metrics.auroc(conf, correct) == pytest.approx(roc_area(conf, correct), abs=1e-12)
        assert metrics.brier(conf, correct) == pytest.approx(float(np.mean((conf - correct) ** 2)), abs=1e-12)


# Selective prediction (app:data) ---------------------------------------------------------


def test_selective_curve_aurc_and_acc_at_tau_with_ties():
    # distinct values .9 > .6 > .2; cov = 2/6, 5/6, 1; acc = 1/2, 3/5, 3/6; risk = .5, .4, .5
    conf = [0.9, 0.9, 0.6, 0.6, 0.6, 0.2]
    correct = [1, 0, 1, 1, 0, 0]
    cov, acc = metrics.selective_curve(conf, correct)
    np.testing.assert_allclose(cov, [1 / 3, 5 / 6, 1.0])
    np.testing.assert_allclose(acc, [0.5, 0.6, 0.5])
    m = metrics.calibration_metrics(conf, correct)
    assert m["thr"] == 3
    # AURC = (1/3)(.5) + (1/2)(.5 + .4)/2 + (1/6)(.4 + .5)/2 = 1/6 + .225 + .075
    assert m["aurc"] == pytest.approx(1 / 6 + 0.225 + 0.075)
    # acc@50: (.5 - 1/3) / (5/6 - 1/3) = 1/3 of the way from .5 to .6
    assert m["acc@50"] == pytest.approx(0.5 + 0.1 / 3)
    # acc@80: 14/15 of the way from .5 to .6
    assert m["acc@80"] == pytest.approx(0.5 + 0.1 * 14 / 15)
    # acc@90: (.9 - 5/6) / (1/6) = .4 of the way from .6 to .5
    assert m["acc@90"] == pytest.approx(0.56)


def test_selective_constant_below_the_first_coverage():
    # one tie group of six at .8 (5 right), then four at .3 (1 right): cov = .6, 1; acc = 5/6, .6
    conf = [0.8] * 6 + [0.3] * 4
    correct = [1, 1, 1, 1, 1, 0, 1, 0, 0, 0]
    m = metrics.calibration_metrics(conf, correct)
    assert m["thr"] == 2
    # risk 1/6 held on [0, .6], then trapezoid to .4 at coverage 1: .6/6 + .4 (1/6 + .4) / 2
    assert m["aurc"] == pytest.approx(0.1 + 0.4 * (1 / 6 + 0.4) / 2)
    assert m["acc@50"] == pytest.approx(5 / 6)  # below cov_1 = .6: constant acc_1
    assert m["acc@80"] == pytest.approx(5 / 6 + 0.5 * (0.6 - 5 / 6))
    assert m["acc@90"] == pytest.approx(5 / 6 + 0.75 * (0.6 - 5 / 6))


def test_single_value_pool_has_one_threshold():
    m = metrics.calibration_metrics([0.7, 0.7, 0.7, 0.7], [1, 1, 0, 1])
    assert m["thr"] == 1 and m["effective_levels"] == 1.0 and m["top_share"] == 1.0
    assert m["aurc"] == pytest.approx(0.25)  # constant risk .25 over [0, 1]
    assert m["acc@50"] == m["acc@90"] == pytest.approx(0.75)
    assert m["tie_tax"] == pytest.approx(0.5) and m["auroc"] == pytest.approx(0.5)


# Collapse metrics (fig:collapse) ---------------------------------------------------------


def test_effective_levels_top_share_and_tie_tax_by_hand():
    conf = [0.9, 0.9, 0.9, 0.5, 0.5, 0.1]
    correct = [1, 1, 0, 1, 0, 0]
    m = metrics.calibration_metrics(conf, correct)
    # shares 1/2, 1/3, 1/6: sum p^2 = 14/36 -> 36/14 levels
    assert m["effective_levels"] == pytest.approx(36 / 14)
    assert m["top_share"] == pytest.approx(0.5)
    # pos {.9, .9, .5} x neg {.9, .5, .1}: ties (.9,.9) x2, (.5,.5) x1 = 3 of 9 -> 1/2 * 3/9
    assert m["tie_tax"] == pytest.approx(1 / 6)
    # strictly greater pairs: 2 + 2 + 1 = 5 -> AUROC (5 + 1.5) / 9; breaking ties rightly adds the tax
    assert m["auroc"] == pytest.approx(6.5 / 9)
    assert m["auroc"] + m["tie_tax"] == pytest.approx(8 / 9)


def test_calibration_metrics_keys_and_types():
    m = metrics.calibration_metrics(np.array([0.1, 0.4, 0.8]), np.array([False, True, True]))
    assert list(m) == [
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
    ]
    assert isinstance(m["n"], int) and isinstance(m["thr"], int)
    assert all(type(v) is float for k, v in m.items() if k not in ("n", "thr"))
    json.dumps(m, allow_nan=False)


@pytest.mark.parametrize(
    "conf, correct, message",
    [
        ([], [], "empty pool"),
        ([0.5, float("nan")], [1, 0], "NaN"),
        ([0.5, 1.2], [1, 0], r"\[0, 1\]"),
        ([-0.1], [1], r"\[0, 1\]"),
        ([0.5, 0.6], [1], "length"),
        ([0.5, 0.6], [1, 2], "0/1"),
    ],
)
def test_bad_pools_raise(conf, correct, message):
    with pytest.raises(ValueError, match=message):
        metrics.calibration_metrics(conf, correct)


# Equal-mass bins and Wilson intervals (fig:reliability) ----------------------------------


def test_equal_mass_bins_equal_sizes_without_ties():
    bins = metrics.equal_mass_bins(np.linspace(0, 1, 100)[::-1], 10)
    assert [b.size for b in bins] == [10] * 10
    assert sorted(np.concatenate(bins).tolist()) == list(range(100))


def test_equal_mass_bins_never_split_ties():
    rng = np.random.default_rng(2)
    for n_bins in (2, 3, 5, 10):
        for _ in range(20):
            conf = rng.choice(
                np.round(np.linspace(0, 1, 11), 1), size=int(rng.integers(1, 200)), p=rng.dirichlet(np.full(11, 0.3))
            )
            bins = metrics.equal_mass_bins(conf, n_bins)
            assert 1 <= len(bins) <= n_bins
            assert sorted(np.concatenate(bins).tolist()) == list(range(conf.size))
            for low, high in zip(bins[:-1], bins[1:], strict=True):
                assert conf[low].max() < conf[high].min()  # ascending and no value in two bins


def test_equal_mass_bins_big_tie_group_gets_its_own_bin_and_cap_holds():
    # groups of 4 (0.1), 5 (0.5), 1 (0.9); target 5 for two bins: the 0.5 group would overshoot
    # by 4 while closing early misses by 1, so the first bin is the 0.1 group; at most 2 bins
    conf = [0.1] * 4 + [0.5] * 5 + [0.9]
    bins = metrics.equal_mass_bins(conf, 2)
    assert [b.tolist() for b in bins] == [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]


def test_wilson_interval_by_hand():
    # k=8, n=10, z=1.96: centre (.8 + .19208) / 1.38416, half 1.96 sqrt(.016 + .009604) / 1.38416
    lo, hi = metrics.wilson_interval(8, 10)
    assert lo == pytest.approx(0.490162, abs=1e-5) and hi == pytest.approx(0.943318, abs=1e-5)
    lo, hi = metrics.wilson_interval(0, 10)  # (0, 2 * .19208 / 1.38416)
    assert lo == 0.0 and hi == pytest.approx(0.277539, abs=1e-5)
    with pytest.raises(ValueError, match="n >= 1"):
        metrics.wilson_interval(0, 0)


def test_wilson_interval_always_contains_the_proportion():
    """Every k <= n <= 1000: 0 <= lo <= k/n <= hi <= 1. Unclamped, center + half rounds
    ~1e-16 below 1 at k = n (146 such pairs below n = 400), a negative error bar."""
    for n in range(1, 1001):
        for k in range(n + 1):
            lo, hi = metrics.wilson_interval(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0, (k, n, lo, hi)
    assert metrics.wilson_interval(7, 7)[1] == 1.0 and metrics.wilson_interval(0, 7)[0] == 0.0
