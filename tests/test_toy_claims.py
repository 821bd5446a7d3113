"""toy_claims.py: Student's t, the t-interval over seeds, the "within noise" test, the AUROC's
interval over problems, the prediction range, and the toy's claims, on hand-computed rows; and the claims on the
shipped world's pre-registered final (docs/results/toy-final/, docs/journal/toy-protocol-v13.md), as
docs/toy.md states them."""

import doctest
import json
from pathlib import Path

import numpy as np
import pytest
from test_toy_tables import fake_result

from metrics import auroc
from worlds import toy, toy_build, toy_claims, toy_tables
from worlds.toy_tables import aggregate, markdown_tables


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
    assert not holds and text.endswith("(0.800 vs 0.820: -0.0200, one joint standard error 0.0129)")
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


def test_the_prediction_range_is_wider_than_the_interval_of_the_mean():
    values = [0.70, 0.74, 0.78, 0.72, 0.76]  # std 0.0316, t(4) = 2.776
    mean, low, high = toy_claims.prediction_range(values)
    assert mean == pytest.approx(0.74) and high - mean == pytest.approx(2.776 * 0.0316228 * (1.2**0.5), rel=1e-4)
    assert (high - mean) / toy_claims.interval(values)[1] == pytest.approx(6**0.5)  # sqrt(1 + 1/n) / sqrt(1/n)
    with pytest.raises(ValueError, match="at least two values"):
        toy_claims.prediction_range([0.7])


def test_a_range_for_ten_figures_uses_t_at_one_two_hundredth_of_each_tail():
    """Bonferroni: 0.05 / 10 two-sided, t(4) at 0.9975 = 5.598 (a printed table's value)."""
    values = [0.70, 0.74, 0.78, 0.72, 0.76]
    mean, low, high = toy_claims.prediction_range(values, figures=10)
    assert high - mean == pytest.approx(5.598 * 0.0316228 * 1.2**0.5, rel=1e-5) == mean - low
    with pytest.raises(ValueError, match="at least one figure"):
        toy_claims.prediction_range(values, figures=0)


# Two-sided quantiles of Student's t from printed tables: 95% and 99.5% (0.025 and 0.0025 a tail).
PRINTED_T = {
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228),
    0.995: (127.321, 14.089, 7.453, 5.598, 4.773, 4.317, 4.029, 3.833, 3.690, 3.581),
}


@pytest.mark.parametrize("level", sorted(PRINTED_T))
def test_the_quantiles_of_t_are_those_of_printed_tables(level):
    for df, printed in enumerate(PRINTED_T[level], start=1):
        assert toy_claims.t_table(level, df) == printed, df
        assert toy_claims.t_within(toy_claims.t_quantile(level, df), df) == pytest.approx(level, abs=1e-8)
    assert [toy_claims.T_975[df] for df in range(1, 11)] == list(PRINTED_T[0.95])
    assert toy_claims.t_within(0.0, 3) == 0.0 and toy_claims.t_within(1e9, 3) == pytest.approx(1.0)
    for bad in (0, 2.5, -1):
        with pytest.raises(ValueError, match="positive integer"):
            toy_claims.t_within(1.0, bad)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"in \(0, 1\)"):
            toy_claims.t_quantile(bad, 3)


def _verdicts(rows: dict) -> dict[str, bool]:
    return {claim.split(" (")[0].split(":")[0]: holds for claim, holds in toy_claims.claims(rows)}


def test_the_claims_on_rl_the_ceiling_and_whether_credo_learns_the_readout():
    rows = {
        "base": {"acc": (0.60, 0.01)},
        "base_readout": {"acc": (0.60, 0.01), "ece": (0.10, 0.01), "auroc": (0.82, 0.01)},
        "grpo": {"acc": (0.75, 0.02), "seeds": [1, 2, 3]},
        "credo": {
            "acc": (0.74, 0.02),
            "ece": (0.04, 0.01),
            "auroc": (0.83, 0.02),
            "auroc_ceiling": (0.82, 0.01),
            "seeds": [1, 2, 3],
        },
        "credo_alpha0": {"ece": (0.14, 0.02)},
    }
    verdicts = _verdicts(rows)
    assert verdicts["RL raises accuracy"] and verdicts["CREDO learns the readout's calibration"]
    assert verdicts["CREDO's readout ranks at least as well as its level-and-style ceiling"]
    assert not verdicts["CREDO learns the readout's ranking"]  # 0.81-0.85 overlaps 0.81-0.83
    assert verdicts["The calibration loss is what calibrates"]
    rows["credo"]["auroc"] = (0.86, 0.02)  # 0.84-0.88, above 0.81-0.83: learned
    rows["credo_alpha0"]["ece"] = (0.06, 0.015)  # 0.045-0.075 reaches 0.03-0.05: not shown
    rows["grpo"]["acc"] = (0.62, 0.02)  # 0.60-0.64 reaches the warm start's 0.59-0.61
    verdicts = _verdicts(rows)
    assert verdicts["CREDO learns the readout's ranking"] and not verdicts["The calibration loss is what calibrates"]
    assert [holds for claim, holds in toy_claims.claims(rows) if claim.startswith("RL raises")] == [False, True]
    rows["credo"]["auroc"] = (0.81, 0.02)
    assert not _verdicts(rows)["CREDO's readout ranks at least as well as its level-and-style ceiling"]


FINAL = Path(__file__).resolve().parent.parent / "docs" / "results" / "toy-final"
NO_FINAL = pytest.mark.skipif(
    not (FINAL / "tables.json").exists(),
    reason="the shipped world's final has not been copied into docs/results/toy-final/ yet "
    "(docs/journal/toy-protocol-v13.md; docs/results.md says how to regenerate it)",
)


def final_rows() -> dict:
    saved = json.loads((FINAL / "tables.json").read_text())
    return {
        row: {k: tuple(v) if isinstance(v, list) and k != "seeds" else v for k, v in values.items()}
        for row, values in saved["rows"].items()
    }


@NO_FINAL
def test_the_final_is_of_the_shipped_world_on_fresh_seeds(toy_world):
    plan = json.loads((FINAL / "plan.json").read_text())
    assert plan["world"] == toy.model_digest(toy_world) and plan["overrides"] == [] and "split" not in plan
    rows = final_rows()
    for row in ("base", "base_readout", "grpo", "rlcr", "credo"):
        assert rows[row]["seeds"] == [72, 73, 74, 75, 76], row  # fresh seeds (docs/journal/toy-protocol-v13.md)
    assert toy_build.load_world(toy_world)[0]["version"] == 13


DEFAULT_TABLES = FINAL.parent / "toy-tables-default"


@NO_FINAL
def test_the_documented_ranges_are_those_of_every_committed_run_of_the_toys_configuration(toy_world):
    """worlds/toy_expected.json's after ranges, which `bash run.sh toy` sets a run beside, are
    regenerated from the committed final and default tables run (the command its source names):
    eight training seeds of the shipped world with configs/toy.yaml, made for a default run's ten
    after figures at once."""
    documented = json.loads(toy.EXPECTED.read_text())["after"]
    assert documented["source"] == (
        "python -m worlds.toy_tables --document-from docs/results/toy-final,docs/results/toy-tables-default"
    )
    jobs = toy_tables.saved_jobs([FINAL, DEFAULT_TABLES], toy.model_digest(toy_world))
    assert documented["seeds"] == [44, 45, 46, 72, 73, 74, 75, 76] and documented["figures"] == toy.FIGURES == 10
    assert {m: documented[m] for m in ("CREDO", "RLCR", "GRPO")} == toy_tables.documented_ranges(jobs)


@NO_FINAL
def test_the_claims_on_the_shipped_worlds_final_are_those_its_tables_state():
    """Recomputed from the final's rows, each claim and its verdict as tables.md states it."""
    rows = final_rows()
    verdict = ("- holds", "- FAILS")
    stated = [line for line in (FINAL / "tables.md").read_text().splitlines() if line.startswith(verdict)]
    assert len(stated) >= 9
    assert stated == [line for line in markdown_tables(rows, "h").splitlines() if line.startswith(verdict)]
