"""methods.py: the registry, each method's rewards by hand, and credit shared by all (more of
credit, with real batches, in tests/test_credo.py)."""

import dataclasses

import pytest
import torch

import losses
import methods
from schema import Config

NAN = float("nan")


def group(conf):
    """One group of G = 2: right and wrong, both well formatted; t for gamma = 0.5."""
    return methods.GroupOutcomes(
        correct=torch.tensor([1.0, 0.0]),
        fmt=torch.tensor([1.0, 1.0]),
        conf=torch.tensor(conf),
        target=torch.tensor([0.75, 0.25]),
        group_size=2,
    )


def test_the_paper_s_methods_are_registered_with_what_they_read():
    reads = {name: m.reads for name, m in methods.METHODS.items()}
    assert {name: reads[name] for name in ("credo", "grpo", "rlcr", "dcpo")} == {
        "credo": "model",
        "grpo": "nothing",
        "rlcr": "report",
        "dcpo": "report",
    }
    assert all(m.help and "\n" not in m.help for m in methods.METHODS.values())


def test_each_method_s_rewards_by_hand():
    cfg = Config(beta=0.5, answer_reward_shape="additive", dcpo_lambda=0.5)
    credo = methods.METHODS["credo"].rewards(group([0.8, 0.4]), cfg)  # r_ans = beta F + a, F (1 - (t - c)^2)
    assert credo.answer.tolist() == [1.5, 0.5]
    assert credo.confidence.tolist() == pytest.approx([1 - 0.05**2, 1 - 0.15**2])
    grpo = methods.METHODS["grpo"].rewards(group([NAN, NAN]), cfg)  # a on every token
    assert grpo.answer.tolist() == grpo.confidence.tolist() == [1.0, 0.0]
    rlcr = methods.METHODS["rlcr"].rewards(group([0.8, NAN]), cfg)  # a - (q - a)^2; no report: the worst
    assert rlcr.answer.tolist() == rlcr.confidence.tolist() == pytest.approx([0.96, -1.0])
    dcpo = methods.METHODS["dcpo"].rewards(group([0.8, 0.4]), cfg)
    want = losses.dcpo_rewards(torch.tensor([1.0, 0.0]), torch.tensor([0.8, 0.4]), 0.5, 2)
    assert dcpo.answer.tolist() == want[0].tolist() and dcpo.confidence.tolist() == want[1].tolist()


def test_a_missing_model_c_gives_credo_no_confidence_reward():
    cfg = Config(beta=0.5, answer_reward_shape="additive")
    g = methods.GroupOutcomes(
        correct=torch.tensor([1.0, 0.0]),
        fmt=torch.tensor([1.0, 0.0]),
        conf=torch.tensor([0.8, NAN]),
        target=torch.tensor([0.75, 0.25]),
        group_size=2,
    )
    assert methods.METHODS["credo"].rewards(g, cfg).confidence.tolist() == pytest.approx([0.9975, 0.0])


def read(conf, valid):
    """The detached confidences credit reads when the rewards and eq:sw's weights read the same c."""
    c = torch.where(valid, conf, float("nan"))
    return methods.Confidences(rewards=c, weights=c)


def test_credit_standardises_the_rewards_of_the_named_method():
    cfg = Config(group_size=2, gamma=0.5, method="rlcr", w_min=0.5, w_max=2.0, conf_advantage=True)
    got = methods.credit(
        torch.tensor([1.0, 0.0]),
        torch.ones(2),
        read(torch.tensor([0.8, 0.3]), torch.tensor([True, False])),
        cfg,
        kappa=0.0,
    )
    assert got.target.tolist() == [0.75, 0.25]
    assert got.r_ans.tolist() == pytest.approx([0.96, -1.0])  # row 1's report is not valid: missing
    # the sample std of [0.96, -1] is 0.98 sqrt(2) (adv_std=sample, the default): advantages -+1/sqrt(2)
    assert got.adv_ans.tolist() == pytest.approx([0.5**0.5, -(0.5**0.5)], abs=1e-6) and got.w.tolist() == [1.0, 1.0]


def test_registering_is_checked():
    with pytest.raises(ValueError, match="method 'credo' is registered twice"):
        methods.register_method("credo", reads="model")(lambda g, cfg: None)
    with pytest.raises(ValueError, match="reads='logits'; choose model, report or nothing"):
        methods.register_method("other", reads="logits")
    with pytest.raises(ValueError, match=r"method='nope' is not registered; choose one of \('credo'"):
        methods.method_of("nope")
    assert "other" not in methods.METHODS


def test_the_targets_and_calibration_losses_by_hand():
    cfg = Config(group_size=2, gamma=0.5)
    a = torch.tensor([1.0, 0.0, 1.0, 1.0])
    assert methods.TARGETS["hybrid"](a, cfg).tolist() == [0.75, 0.25, 1.0, 1.0]  # 0.5 a + 0.5 mean_group(a)
    assert methods.TARGETS["correctness"](a, cfg).tolist() == [1.0, 0.0, 1.0, 1.0]
    c, t, valid = torch.tensor([0.9, 0.2, NAN]), torch.tensor([1.0, 0.0, 0.0]), torch.tensor([True, True, False])
    assert float(methods.CALIBRATION_LOSSES["squared"](c, t, valid)) == pytest.approx((0.1**2 + 0.2**2) / 2)
    bce = float(methods.CALIBRATION_LOSSES["head_bce"](c, t, valid))
    assert bce == pytest.approx(-(torch.log(torch.tensor(0.9)) + torch.log(torch.tensor(0.8))).item() / 2, rel=1e-6)


def test_credit_reads_the_configured_target():
    cfg = Config(group_size=2, gamma=0.5, method="credo", target="correctness")
    got = methods.credit(
        torch.tensor([1.0, 0.0]),
        torch.ones(2),
        read(torch.tensor([0.8, 0.3]), torch.ones(2, dtype=torch.bool)),
        cfg,
        kappa=0.0,
    )
    assert got.target.tolist() == [1.0, 0.0]
    assert got.r_conf.tolist() == pytest.approx([1 - 0.2**2, 1 - 0.3**2])  # F (1 - (t - c)^2) with t = a


def test_registering_targets_and_calibration_losses_is_checked():
    with pytest.raises(ValueError, match="target 'hybrid' is registered twice"):
        methods.register_target("hybrid")(lambda correct, cfg: correct)
    with pytest.raises(ValueError, match="calibration loss 'squared' is registered twice"):
        methods.register_calibration_loss("squared")(lambda c, t, valid: c.sum())
    with pytest.raises(ValueError, match=r"target='nope' is not registered; choose one of \('hybrid', 'correctness'"):
        methods.entry_of(methods.TARGETS, "target", "nope")


# --- The choices the paper leaves open (docs/choices.md), each by hand -----------------------


def baseline_group(q, fmt=(1.0, 1.0, 1.0, 0.0)):
    """One group of G = 4 of a verbalized baseline: right, wrong, right, wrong."""
    return methods.GroupOutcomes(
        correct=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        fmt=torch.tensor(fmt),
        conf=torch.tensor(q),
        target=torch.tensor([0.75, 0.25, 0.75, 0.25]),
        group_size=4,
    )


def test_rlcr_s_missing_report_three_ways():
    g = baseline_group([0.8, 0.3, NAN, NAN], fmt=[1.0, 1.0, 0.0, 0.0])
    rewards = {
        how: methods.METHODS["rlcr"].rewards(g, Config(method="rlcr", missing_confidence=how)).answer.tolist()
        for how in ("worst", "gate", "minus_one")
    }
    # a - (q - a)^2 = 0.96, -0.09; no report: a keeps, Brier 1 (this project) ...
    assert rewards["worst"] == pytest.approx([0.96, -0.09, 0.0, -1.0])
    # ... RLCR's code: F = 0 gates the whole reward, 0 in its units, -2 in eq:rewards's ...
    assert rewards["gate"] == pytest.approx([0.96, -0.09, -2.0, -2.0])
    # ... DCPO's code's reading: q = -1, a - (-1 - a)^2 = 1 - 4 and 0 - 1
    assert rewards["minus_one"] == pytest.approx([0.96, -0.09, -3.0, -1.0])


def test_rlcr_s_gate_keys_on_the_format_not_only_on_the_report():
    g = baseline_group([0.8, 0.3, 0.6, 0.6], fmt=[1.0, 1.0, 0.0, 1.0])  # row 2: a report, but no \boxed answer
    got = methods.METHODS["rlcr"].rewards(g, Config(method="rlcr", missing_confidence="gate")).answer
    assert got.tolist() == pytest.approx([0.96, -0.09, -2.0, -0.36])


def test_dcpo_s_confidence_reward_and_missing_report():
    g = baseline_group([0.8, 0.3, NAN, 0.5])  # mean a 0.5, lam 0.5: R_IG = 0.25 + 0.5 a = [.75, .25, .75, .25]
    cases = {
        ("absolute", "worst"): [-0.05, -0.05, -1.0, -0.25],
        ("squared", "worst"): [-0.5 * 0.0025, -0.5 * 0.0025, -0.5, -0.5 * 0.0625],
        ("absolute", "minus_one"): [-0.05, -0.05, -1.75, -0.25],  # -|-1 - 0.75|
        ("squared", "minus_one"): [-0.5 * 0.0025, -0.5 * 0.0025, -0.5 * 1.75**2, -0.5 * 0.0625],  # DCPO's code
    }
    for (form, how), want in cases.items():
        cfg = Config(method="dcpo", dcpo_lambda=0.5, dcpo_conf_reward=form, missing_confidence=how)
        got = methods.METHODS["dcpo"].rewards(g, cfg)
        assert got.answer.tolist() == [1.0, 0.0, 1.0, 0.0], (form, how)
        assert got.confidence.tolist() == pytest.approx(want), (form, how)


def test_credit_standardises_as_adv_std_adv_eps_and_adv_min_std_say():
    correct, conf = torch.tensor([1.0, 0.0, 0.0, 1.0]), read(torch.full((4,), NAN), torch.zeros(4, dtype=torch.bool))
    base = Config(group_size=4, method="grpo", channel="verbalized", alpha=0.0, kappa=0)

    def adv(**change):
        return methods.credit(correct, torch.ones(4), conf, dataclasses.replace(base, **change), kappa=0.0).adv_ans

    sample = (1 / 3) ** 0.5  # the stds of [1, 0, 0, 1]: sqrt(1 / 3) (sample), 1 / 2 (population)
    assert adv().tolist() == pytest.approx([0.5 / sample, -0.5 / sample, -0.5 / sample, 0.5 / sample])
    assert adv(adv_std="population").tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0])  # 0.5 / (1 / 2)
    assert adv(adv_std="none").tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    x = 0.5 / (sample + 0.5)  # adv_eps is added to the std
    assert adv(adv_eps=0.5).tolist() == pytest.approx([x, -x, -x, x])
    assert adv(adv_min_std=0.6).tolist() == [0.0] * 4  # a floor above the group's std


def test_credit_reads_the_configured_advantage_estimator():
    """RLOO's baseline is the mean of the other three rollouts; Dr. GRPO's advantage is r - mean."""
    correct, conf = torch.tensor([1.0, 0.0, 0.0, 0.0]), read(torch.full((4,), NAN), torch.zeros(4, dtype=torch.bool))
    base = Config(group_size=4, method="grpo", channel="verbalized", alpha=0.0, kappa=0)

    def adv(**change):
        return methods.credit(correct, torch.ones(4), conf, dataclasses.replace(base, **change), kappa=0.0).adv_ans

    assert adv(advantage="rloo").tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])  # 1 - 0; 0 - 1/3
    assert adv(advantage="dr_grpo").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert adv(advantage="dr_grpo").tolist() == adv(adv_std="none").tolist()


def test_an_advantage_estimator_and_a_loss_aggregation_are_one_registered_function_each(monkeypatch):
    monkeypatch.setattr(methods, "ADVANTAGES", dict(methods.ADVANTAGES))
    monkeypatch.setattr(methods, "LOSS_AGGREGATIONS", dict(methods.LOSS_AGGREGATIONS))

    @methods.register_advantage("sign")
    def sign(rewards, cfg):
        return torch.sign(rewards - 0.5)

    @methods.register_loss_agg("halves")
    def halves(mask, cfg):
        return torch.full((mask.shape[0],), 2.0)

    correct, conf = torch.tensor([1.0, 0.0]), read(torch.full((2,), NAN), torch.zeros(2, dtype=torch.bool))
    cfg = Config(group_size=2, method="grpo", channel="verbalized", alpha=0.0, kappa=0, advantage="sign")
    assert methods.credit(correct, torch.ones(2), conf, cfg, kappa=0.0).adv_ans.tolist() == [1.0, -1.0]
    assert methods.entry_of(methods.LOSS_AGGREGATIONS, "loss_agg", "halves") is halves
    with pytest.raises(ValueError, match="advantage estimator 'rloo' is registered twice"):
        methods.register_advantage("rloo")(sign)
    with pytest.raises(ValueError, match=r"loss_agg='mean' is not registered; choose one of \('token_mean'"):
        methods.entry_of(methods.LOSS_AGGREGATIONS, "loss_agg", "mean")


def test_truncated_completions_mask_zeroes_both_advantages_after_the_group_statistics():
    cfg = Config(group_size=4, gamma=0.5, method="credo", adv_std="population", truncated_completions="mask")
    correct, truncated = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([False, True, False, False])
    conf = read(torch.tensor([0.9, 0.5, 0.1, 0.9]), torch.tensor([True, True, True, True]))
    got = methods.credit(correct, torch.ones(4), conf, cfg, kappa=0.0, truncated=truncated)
    trained = methods.credit(correct, torch.ones(4), conf, dataclasses.replace(cfg, truncated_completions="train"), 0.0)
    # r_ans = 0.5 + a: the truncated row still counts in the group's mean and std (+-1 for the others) ...
    assert got.adv_ans.tolist() == [1.0, 0.0, -1.0, 1.0] and trained.adv_ans.tolist() == [1.0, -1.0, -1.0, 1.0]
    # ... and its A^conf is zeroed too; the others' are the same as without the mask
    assert got.adv_conf[1] == 0.0 and got.adv_conf[[0, 2, 3]].tolist() == trained.adv_conf[[0, 2, 3]].tolist()
    assert got.r_ans.tolist() == trained.r_ans.tolist() and got.target.tolist() == trained.target.tolist()
    with pytest.raises(ValueError, match="truncated_completions=mask needs which rollouts were truncated"):
        methods.credit(correct, torch.ones(4), conf, cfg, kappa=0.0)
