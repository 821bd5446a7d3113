"""toy_claims.py: the t-interval over seeds, the "within noise" test, the AUROC's interval over
problems, and issue 24's claims, on hand-computed rows."""

import doctest

import numpy as np
import pytest
from test_toy_tables import fake_result

from evaluation.metrics import auroc
from worlds import toy_claims
from worlds.toy_tables import aggregate


def test_doctests():
    assert doctest.testmod(toy_claims).failed == 0


def test_interval_is_the_t_interval_of_the_seeds():
    mean, half = toy_claims.interval([0.2, 0.4, 0.9])  # mean 0.5, sample std 0.360555, t(2) = 4.303
    assert mean == pytest.approx(0.5, abs=1e-12)
    assert half == pytest.approx(4.303 * 0.3605551275 / 3**0.5, rel=1e-9)
    assert toy_claims.interval([0.7]) == (0.7, None)


def test_credo_is_within_noise_of_grpo_when_no_further_below_than_one_joint_standard_error():
    """The paper's tab:main convention. Accuracies over seeds 44-46: GRPO 0.80 / 0.82 / 0.84 (std
    0.02), CREDO d + 0.79 / 0.80 / 0.81 (std 0.01); each se = std / sqrt(3), joint se =
    sqrt(0.02^2 + 0.01^2) / sqrt(3) = 0.012910. CREDO's mean is 0.80 + d, GRPO's 0.82."""
    joint = (0.02**2 + 0.01**2) ** 0.5 / 3**0.5

    def verdict(shift: float) -> tuple[str, bool]:
        results = [fake_result("grpo", 44 + i, acc) for i, acc in enumerate((0.80, 0.82, 0.84))]
        results += [fake_result("credo", 44 + i, acc + shift) for i, acc in enumerate((0.79, 0.80, 0.81))]
        rows = aggregate(results)
        diff, se = toy_claims.within_noise_of(rows["credo"], rows["grpo"])
        assert diff == pytest.approx(shift - 0.02, abs=1e-12) and se == pytest.approx(joint, rel=1e-9)
        (claim,) = [found for found in toy_claims.claims(rows) if "GRPO" in found[0]]
        return claim

    text, holds = verdict(0.0)  # 0.020 below, more than 0.0129: not within noise
    assert not holds and text.endswith("(0.800 vs 0.820: -0.020, one joint standard error 0.013)")
    assert verdict(0.0072)[1] and not verdict(0.0070)[1]  # the edge: -0.0128 holds, -0.0130 does not
    assert verdict(0.05)[1]  # above GRPO's
    one_seed = aggregate([fake_result("grpo", 44, 0.8), fake_result("credo", 44, 0.7)])
    assert toy_claims.within_noise_of(one_seed["credo"], one_seed["grpo"]) is None
    assert not any("GRPO" in claim for claim, _ in toy_claims.claims(one_seed))  # one seed cannot decide it


def _pool(problems: int, rng) -> list[dict]:
    """Samples of `problems` problems x 4, the problem's difficulty drawn, c informative but noisy."""
    pool = []
    for i in range(problems):
        p = rng.uniform(0.1, 0.9)
        for _ in range(4):
            a = int(rng.random() < p)
            pool.append({"problem_id": f"q{i}", "a": a, "c": float(np.clip(p + 0.2 * a + rng.normal(0, 0.2), 0, 1))})
    return pool


def test_the_problem_interval_counts_which_problems_were_drawn():
    rng = np.random.default_rng(1)
    few, many = [_pool(50, rng) for _ in range(2)], [_pool(800, rng) for _ in range(2)]
    mean = lambda pools: sum(auroc([r["c"] for r in p], [r["a"] for r in p]) for p in pools) / len(pools)  # noqa: E731
    low, high = toy_claims.problem_interval(few)
    assert low < mean(few) < high and toy_claims.problem_interval(few) == (low, high)  # seeded: the same draws
    wide, narrow = high - low, np.subtract(*toy_claims.problem_interval(many)[::-1])
    assert 2.5 < wide / narrow < 6.5  # 16x the problems: about 4x narrower (sqrt 16)
    assert toy_claims.problem_interval([[{"problem_id": "q", "a": 1, "c": 0.5}]]) is None  # nothing to rank
    assert toy_claims.problem_interval([]) is None
