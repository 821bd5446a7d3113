"""losses.py against hand-computed values (every number below is worked out by hand)."""

import doctest
import math

import pytest
import torch

import losses
from losses import (
    calibration_loss,
    clipped_policy_loss,
    credo_rewards,
    dcpo_rewards,
    discrepancy_weights,
    group_standardize,
    hybrid_target,
    leave_one_out,
    readout,
    readout_logits,
    rlcr_gated_reward,
    rlcr_reward,
    sequence_token_mean,
    sequence_token_sum_norm,
    token_advantages,
)

T = torch.tensor
NAN = float("nan")


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_docstring_examples_hold():
    result = doctest.testmod(losses, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0


# eq:readout ----------------------------------------------------------------------------


def test_readout_is_sigmoid_of_logit_difference():
    c = readout(T([0.0, math.log(3.0), 5.0]), T([0.0, 0.0, 5.0 + math.log(4.0)]))
    close(c, [0.5, 0.75, 0.2])


# eq:grpo advantages ---------------------------------------------------------------------


def test_group_standardize_uses_population_std_per_group():
    # group 1: [1, 0] mean .5, std .5 -> [1, -1]; group 2: [3, 1] -> [1, -1]
    close(group_standardize(T([1.0, 0.0, 3.0, 1.0]), 2, std="population"), [1.0, -1.0, 1.0, -1.0])
    # [2, 0, 0, 0]: mean .5, std sqrt((2.25 + 3 * .25) / 4) = sqrt(.75)
    s = math.sqrt(0.75)
    close(group_standardize(T([2.0, 0.0, 0.0, 0.0]), 4, std="population"), [1.5 / s, -0.5 / s, -0.5 / s, -0.5 / s])


def test_group_standardize_reads_std_as_each_code_does():
    r = T([3.0, 0.0, 0.0, 1.0])  # mean 1, deviations 2, -1, -1, 0: sum of squares 6
    population, sample = math.sqrt(6 / 4), math.sqrt(6 / 3)  # divide by G (this project's) or G - 1 (TRL, verl)
    close(group_standardize(r, 4, std="population"), [2 / population, -1 / population, -1 / population, 0.0])
    close(group_standardize(r, 4, std="sample"), [2 / sample, -1 / sample, -1 / sample, 0.0])
    close(group_standardize(r, 4, std="none"), [2.0, -1.0, -1.0, 0.0])  # r - mean (RLCR's configs, Dr. GRPO)
    close(group_standardize(T([1.0, 0.0]), 2, std="none"), [0.5, -0.5])
    # the ratio of the two readings is sqrt(G / (G - 1)): 1.069 at G = 8
    r8 = T([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    ratio = group_standardize(r8, 8, std="population") / group_standardize(r8, 8, std="sample")
    close(ratio, [math.sqrt(8 / 7)] * 8, atol=1e-5)
    with pytest.raises(ValueError, match="unknown std 'unbiased'; expected population, sample or none"):
        group_standardize(r, 4, std="unbiased")


def test_an_epsilon_and_a_std_floor_temper_a_near_constant_group():
    near = T([0.0, 3e-5, 0.0, 3e-5])  # std 1.5e-5 (population), sqrt(3e-10 / 3) = 1.7321e-5 (sample)
    close(
        group_standardize(near, 4, std="population"), [-1.0, 1.0, -1.0, 1.0], atol=1e-5
    )  # eq:grpo: unit-size, from noise
    close(group_standardize(near, 4, std="sample", eps=1e-4), [-1.5e-5 / 1.17321e-4, 1.5e-5 / 1.17321e-4] * 2)  # TRL
    close(group_standardize(near, 4, std="sample", eps=1e-6), [-1.5e-5 / 1.8321e-5, 1.5e-5 / 1.8321e-5] * 2, atol=1e-4)
    close(group_standardize(near, 4, std="population", min_std=1e-4), [0.0] * 4)  # a floor above its std: no signal
    # a floor at 0 with an epsilon: a constant group still gets 0 (its numerator is 0)
    close(group_standardize(T([0.5, 0.5]), 2, std="sample", eps=1e-4, min_std=0.0), [0.0, 0.0])


def test_zero_variance_group_gets_zero_advantage():
    adv = group_standardize(T([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 1.5]), 3, std="sample")
    close(adv[:6], [0.0] * 6)
    assert torch.isfinite(adv).all()
    assert adv[8] > 0 > adv[6]


def test_group_size_must_divide_batch():
    with pytest.raises(ValueError, match="groups of 3"):
        group_standardize(T([1.0, 0.0, 1.0, 0.0]), 3, std="sample")


# eq:calloss -------------------------------------------------------------------------------


def test_hybrid_target_mixes_outcome_and_group_mean():
    # group 1 mean 0.25, group 2 mean 1.0
    t = hybrid_target(T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), gamma=0.5, group_size=4)
    close(t, [0.625, 0.125, 0.125, 0.125, 1.0, 1.0, 1.0, 1.0])
    close(hybrid_target(T([1.0, 0.0]), gamma=1.0, group_size=2), [1.0, 0.0])
    close(hybrid_target(T([1.0, 0.0]), gamma=0.0, group_size=2), [0.5, 0.5])


def test_calibration_loss_averages_over_valid_only():
    loss = calibration_loss(T([0.9, 0.2, NAN, 0.6]), T([1.0, 0.0, 1.0, 0.5]), T([True, True, False, True]))
    close(loss, (0.01 + 0.04 + 0.01) / 3)


def test_calibration_gradient_is_exact_pathwise_derivative():
    z = T([1.0, -0.5, 2.0, 0.3], requires_grad=True)  # z_H - z_L
    target = T([1.0, 0.0, 0.25, 0.7])
    valid = T([True, True, False, True])
    c = readout(z, torch.zeros(4))
    calibration_loss(c, target, valid).backward()
    cd = c.detach()
    expected = 2 * (cd - target) * cd * (1 - cd) / 3 * valid.float()
    close(z.grad, expected)


def test_calibration_loss_with_no_valid_readout_is_zero_and_differentiable():
    z = T([0.0, 0.4], requires_grad=True)  # the loop sets z = 0 where no slot exists
    loss = calibration_loss(readout(z, torch.zeros(2)), T([1.0, 0.0]), T([False, False]))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(z.grad, torch.zeros(2))


# eq:sw ----------------------------------------------------------------------------------------


def test_discrepancy_weights_center_on_valid_group_mean_and_clip():
    a = T([1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    c = T([0.9, 0.9, 0.5, NAN, 0.2, 0.4])
    valid = T([True, True, True, False, True, True])
    # group 1 (G=3): s = [.1, .9, .5], mean .5 -> 1 + 2 * [-.4, .4, 0] = [.2->.5, 1.8, 1]
    # group 2: s = [nan (invalid), .8, .6], valid mean .7 -> [1, 1.2, 0.8]
    w = discrepancy_weights(a, c, valid, kappa=2.0, group_size=3)
    close(w, [0.5, 1.8, 1.0, 1.0, 1.2, 0.8])
    w_tight = discrepancy_weights(a, c, valid, kappa=2.0, group_size=3, w_min=0.9, w_max=1.1)
    close(w_tight, [0.9, 1.1, 1.0, 1.0, 1.1, 0.9])


def test_discrepancy_weights_are_one_without_readout_or_kappa():
    a, c = T([1.0, 0.0]), T([0.3, 0.1])
    close(discrepancy_weights(a, c, T([False, False]), kappa=0.25, group_size=2), [1.0, 1.0])
    close(discrepancy_weights(a, c, T([True, True]), kappa=0.0, group_size=2), [1.0, 1.0])


def test_discrepancy_weights_carry_no_gradient():
    c = T([0.3, 0.8], requires_grad=True)
    w = discrepancy_weights(T([1.0, 0.0]), c, T([True, True]), kappa=0.25, group_size=2)
    assert not w.requires_grad


# eq:rewards3 and app:rewardshape ----------------------------------------------------------------


def test_credo_reward_shapes():
    a, f = T([1.0, 0.0, 1.0]), T([1.0, 1.0, 0.0])
    c, t = T([0.8, 0.4, NAN]), T([0.75, 0.25, 0.75])
    r_ans, r_conf = credo_rewards(a, f, c, t, beta=0.5)
    close(r_ans, [1.5, 0.5, 1.0])
    close(r_conf, [1 - 0.05**2, 1 - 0.15**2, 0.0])
    close(credo_rewards(a, f, c, t, beta=0.5, shape="gated")[0], [1.5, 0.5, 0.0])
    close(credo_rewards(a, f, c, t, beta=0.5, shape="none")[0], [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="multiplicative"):
        credo_rewards(a, f, c, t, beta=0.5, shape="multiplicative")


# eq:rewards (baselines) --------------------------------------------------------------------------


def test_rlcr_reward_and_missing_report():
    close(rlcr_reward(T([1.0, 0.0, 0.0, 1.0]), T([0.6, 0.6, NAN, 1.0])), [1 - 0.16, -0.36, -1.0, 1.0])


def test_rlcr_gated_reward_is_rlcr_s_code_in_the_paper_s_units():
    a, q, f = T([1.0, 0.0, 1.0, 0.0]), T([0.6, 0.6, 0.6, NAN]), T([1.0, 1.0, 0.0, 0.0])
    close(rlcr_gated_reward(a, q, f), [1 - 0.16, -0.36, -2.0, -2.0])
    # RLCR's code: 0.5 F + 0.5 F a + 0.5 F (1 - (q - a)^2), which is 1 + r / 2
    code = 0.5 * f + 0.5 * f * a + 0.5 * f * (1 - (torch.nan_to_num(q) - a) ** 2)
    close(code, 1 + rlcr_gated_reward(a, q, f) / 2)


def test_dcpo_rewards_mix_group_accuracy():
    # group mean 0.25; lam = 0.4 -> R_IG = 0.1 + 0.6 a = [0.7, 0.1, 0.1, 0.1]
    r_reason, r_conf = dcpo_rewards(T([1.0, 0.0, 0.0, 0.0]), T([0.9, 0.0, 0.1, NAN]), lam=0.4, group_size=4)
    close(r_reason, [1.0, 0.0, 0.0, 0.0])
    close(r_conf, [-0.2, -0.1, 0.0, -1.0])
    r_reason, r_conf = dcpo_rewards(T([1.0, 0.0, 0.0, 0.0]), T([0.9, 0.0, 0.1, NAN]), 0.4, 4, form="squared")
    close(r_reason, [1.0, 0.0, 0.0, 0.0])
    close(r_conf, [-0.5 * 0.04, -0.5 * 0.01, 0.0, -0.5])  # DCPO's code: -0.5 (R_IG - q)^2; no report: -0.5
    with pytest.raises(ValueError, match="unknown DCPO confidence reward 'huber'; expected absolute or squared"):
        dcpo_rewards(T([1.0, 0.0]), T([0.5, 0.5]), 0.5, 2, form="huber")


def test_dcpo_s_absolute_reward_is_optimal_at_a_median_its_code_s_at_the_mean():
    # a group of four, three right, lam = 0.5: R_IG = 0.375 + 0.5 a is 0.875 three times and 0.375 once
    # (mean 0.75). The report q that every member would best give, on a grid of 0.001:
    a, grid = T([1.0, 1.0, 1.0, 0.0]), [i / 1000 for i in range(1001)]

    def best(form):
        mean_reward = [float(dcpo_rewards(a, T([q] * 4), 0.5, 4, form=form)[1].mean()) for q in grid]
        return grid[max(range(len(grid)), key=mean_reward.__getitem__)]

    assert best("absolute") == 0.875  # the paper's -|q - R_IG|: a median of R_IG, not a proper scoring rule
    assert best("squared") == 0.75  # DCPO's code's -0.5 (R_IG - q)^2: its mean, the group's accuracy


# eq:total ----------------------------------------------------------------------------------------


def test_answer_and_analysis_tokens_get_their_own_advantage():
    # rollout 0: 3 answer tokens, 2 analysis tokens, then the slot, then padding
    ans_mask = T([[1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]])
    conf_mask = T([[0, 0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0]])
    adv = token_advantages(T([0.5, -1.0]), T([2.0, 3.0]), T([1.5, 0.5]), ans_mask, conf_mask)
    expected = T([[0.75, 0.75, 0.75, 2.0, 2.0, 0.0, 0.0], [-0.5, -0.5, 3.0, 3.0, 3.0, 3.0, 0.0]])
    close(adv, expected)
    # Regression guard: swapping the segments must change the result.
    swapped = token_advantages(T([0.5, -1.0]), T([2.0, 3.0]), T([1.5, 0.5]), conf_mask, ans_mask)
    assert not torch.allclose(swapped, expected)


# eq:grpo -----------------------------------------------------------------------------------------


def test_clipped_policy_loss_clips_and_averages_per_sequence():
    # seq 0 (2 tokens): rho = [1.5, 0.5]; A = [+1, -1]
    #   token 0: min(1.5 * 1, 1.2 * 1) = 1.2 ; token 1: min(0.5 * -1, 0.8 * -1) = -0.8 -> mean 0.2
    # seq 1 (1 token + 1 pad): rho = 0.9, A = 2 -> min(1.8, 1.8) = 1.8
    old = torch.zeros(2, 2)
    logp = torch.log(T([[1.5, 0.5], [0.9, 7.0]]))
    adv = T([[1.0, -1.0], [2.0, 100.0]])
    mask = T([[1, 1], [1, 0]])
    close(clipped_policy_loss(logp, old, adv, mask, eps=0.2), -(0.2 + 1.8) / 2)


def test_dr_grpo_s_aggregation_divides_every_sequence_by_one_constant():
    # the sequences above: token sums 0.4 and 1.8, each over 4 (a budget of 4 tokens), not over |o_i|
    old = torch.zeros(2, 2)
    logp = torch.log(T([[1.5, 0.5], [0.9, 7.0]]))
    adv = T([[1.0, -1.0], [2.0, 100.0]])
    mask = T([[1, 1], [1, 0]])
    norm = sequence_token_sum_norm(mask, 4.0)
    close(clipped_policy_loss(logp, old, adv, mask, 0.2, norm), -(0.4 / 4 + 1.8 / 4) / 2)
    assert clipped_policy_loss(logp, old, adv, mask, 0.2, sequence_token_mean(mask)) == clipped_policy_loss(
        logp, old, adv, mask, eps=0.2
    )  # the default is the paper's token mean, exactly


def test_leave_one_out_by_hand():
    # group [3, 1, 2]: baselines (1 + 2) / 2, (3 + 2) / 2, (3 + 1) / 2 -> advantages 1.5, -1.5, 0
    close(leave_one_out(T([3.0, 1.0, 2.0, 5.0, 5.0, 5.0]), 3), [1.5, -1.5, 0.0, 0.0, 0.0, 0.0])


def test_clipped_policy_loss_gradient_on_policy_is_advantage_weighted_logprob():
    logp = T([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv = T([[1.0, -2.0, 0.0]])
    clipped_policy_loss(logp, logp.detach(), adv, T([[1, 1, 1]]), eps=0.2).backward()
    close(logp.grad, [[-1.0 / 3, 2.0 / 3, 0.0]])


def test_readout_logits_by_hand():
    # W_H - W_L = [3, 1] - [1, 1] = [2, 0]: z = h . [2, 0] = [2, -4, 0]; fp32 from fp64 inputs
    head = T([[0.0, 0.0], [3.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    z = readout_logits(T([[1.0, 5.0], [-2.0, 0.5], [0.0, 7.0]], dtype=torch.float64), head, high_id=1, low_id=2)
    assert z.dtype == torch.float32 and z.tolist() == [2.0, -4.0, 0.0]
    close(readout(z, torch.zeros(3)), [1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(4.0)), 0.5])  # eq:readout
