"""The toy demonstration (toy.py): its world, and the integration test CI runs.

The slow test runs `python toy.py --quick` (CREDO only: 40 training steps, 100 held-out
problems x 2 samples) on the fixed seed of configs/toy.yaml and checks that the readout's
held-out AUROC rises by at least 0.15 over the untrained readout. With the calibration
loss switched off (`alpha=0`) the same run does not reach that (checked by hand once,
see docs/toy.md); `CREDO_TOY_ALPHA0=1` runs that check here as well.
"""

import json
import os
import random

import pytest

import toy


def test_splits_are_deterministic_disjoint_and_graded():
    a, b = toy.make_split(50, 0, "t", 5), toy.make_split(50, 0, "t", 5)
    assert a == b
    assert {r["level"] for r in a} == {1, 2, 3, 4, 5}
    for r in a:
        assert len(r["ops"]) == r["level"] + 1 and int(r["answer"]) == sum(r["ops"])
        assert r["problem"] == "What is " + " + ".join(map(str, r["ops"])) + "?"
    test = toy.make_split(50, 1, "u", 5)
    assert not {r["id"] for r in a} & {r["id"] for r in test}


def test_scripted_solver_is_right_on_easy_problems_and_often_wrong_on_hard_ones():
    rng = random.Random(0)
    acc = {}
    for level in range(1, 6):
        outcomes = [toy.scripted_completion(toy.make_problem(rng, level)[0], "readout", rng)[1] for _ in range(2000)]
        acc[level] = sum(outcomes) / len(outcomes)
        assert acc[level] == pytest.approx(toy.WORLD["p_correct"][str(level)], abs=0.04)
    assert acc[1] > 0.9 > acc[3] and acc[5] < 0.2


def test_scripted_completions_carry_the_rollout_formats():
    rng = random.Random(1)
    ops = [3, 5, 2]
    readout, _ = toy.scripted_completion(ops, "readout", rng)
    assert "\\boxed{" in readout and "<analysis>" in readout and readout.endswith("</analysis> <confidence>")
    verbal, right = toy.scripted_completion(ops, "verbalized", rng)
    assert verbal.endswith(f"<confidence>{toy.WORLD['verbal']['2']}</confidence>")
    assert ("\\boxed{10}" in verbal) == right


@pytest.mark.slow
def test_quick_toy_run_raises_the_readout_auroc(tmp_path, toy_world):
    report = toy.main(["--quick", "--out", str(tmp_path / "toy")])
    credo = report["CREDO"]
    assert credo["before"]["n"] > 100 and credo["after"]["n"] > 100
    gain = credo["after"]["auroc"] - credo["before"]["auroc"]
    assert gain >= 0.15, f"readout AUROC {credo['before']['auroc']:.3f} -> {credo['after']['auroc']:.3f}"
    saved = json.loads((tmp_path / "toy" / "report.json").read_text())
    assert set(saved["CREDO"]["after"]) >= {"acc", "ece", "auroc", "brier", "effective_levels", "top_share", "tie_tax"}
    assert (tmp_path / "toy" / "reliability_credo.png").exists()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CREDO_TOY_ALPHA0") != "1", reason="set CREDO_TOY_ALPHA0=1 to run the alpha=0 check")
def test_quick_toy_run_without_the_calibration_loss_does_not_raise_the_auroc(tmp_path, toy_world):
    report = toy.main(["--quick", "--out", str(tmp_path / "toy"), "alpha=0"])
    credo = report["CREDO"]
    assert credo["after"]["auroc"] - credo["before"]["auroc"] < 0.15
