"""The equations of CREDO as pure tensor functions (the paper: Beyond Verbalized Confidence: Calibrating Reasoners with
Differentiable Readouts).

Every function here is one equation of the paper, named after it and citing its
label. They take tensors, return tensors, and keep no state: the training loop
(`credo.py`) decides *what* to feed them, this file decides *how* each quantity
is computed. Nothing here imports the rest of the project.

Conventions
-----------
* A batch holds `N = B * G` rollouts: `B` questions, `G` rollouts each, stored
  contiguously (rollout `i` of question `q` is row `q * G + i`). Every
  `group_size` argument refers to this layout.
* `correct` (a_i), `fmt` (F_i) and `valid` (i in V, "the readout exists") are
  1-D tensors of length N; bool or {0, 1} floats are both accepted.
* Token tensors are `[N, T]`, aligned with the *targets* of the forward pass:
  column k holds the log-prob of the token at sequence position k + 1.

Worked example (G = 2, one question, one right and one wrong rollout)::

    >>> import torch
    >>> a = torch.tensor([1., 0.])
    >>> c = readout(torch.tensor([2., 0.]), torch.tensor([0., 0.]))   # [0.881, 0.5]
    >>> t = hybrid_target(a, gamma=0.5, group_size=2)                  # [0.75, 0.25]
    >>> calibration_loss(c, t, torch.tensor([True, True]))             # mean (c - t)^2
    tensor(0.0398)
"""

from __future__ import annotations

import torch

# A group whose rewards have a standard deviation at or below this value counts
# as zero-variance: it carries no ranking information, so its advantage is 0.
ZERO_STD = 1e-6


def _grouped(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """View a length-N vector as `[N / group_size, group_size]` (groups are contiguous)."""
    if x.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of per-rollout values, got shape {tuple(x.shape)}")
    if group_size < 1 or x.numel() % group_size != 0:
        raise ValueError(f"{x.numel()} rollouts cannot be split into groups of {group_size}")
    return x.reshape(-1, group_size)


def readout(z_high: torch.Tensor, z_low: torch.Tensor) -> torch.Tensor:
    """Confidence read from the two reserved tokens at the slot (`eq:readout`).

    c = pi(H) / (pi(H) + pi(L)) = sigmoid(z_H - z_L): the next-token distribution
    restricted to {<CONF_HIGH>, <CONF_LOW>} and renormalised. Any other token's
    logit cancels, so no softmax over the vocabulary is needed.

    >>> readout(torch.tensor([0., 3.]), torch.tensor([0., 1.]))
    tensor([0.5000, 0.8808])
    """
    return torch.sigmoid(z_high - z_low)


def group_standardize(
    rewards: torch.Tensor, group_size: int, std: str, eps: float = 0.0, min_std: float = ZERO_STD
) -> torch.Tensor:
    """Group-relative advantage (r - mean_group) / (std_group + eps) (`eq:grpo`).

    The paper writes std(r), "the standard deviation of the group's rewards", and no epsilon.
    `std` (no default: the run's adv_std) reads it as the population std ("population": divide
    by G, so a two-rollout group with one success gets exactly +1/-1), the sample std
    ("sample": divide by G - 1, torch.std's default, as TRL and verl compute it: advantages
    sqrt((G-1)/G) times the population's), or not at all ("none": r - mean, Dr. GRPO's and
    RLCR's configs'). `eps` is added to the std (TRL 1e-4, verl 1e-6). A group whose std is
    <= `min_std` (the population std for "none") gets advantage 0: its rewards are equal to
    float rounding.

    >>> r = torch.tensor([1., 0., 0., 2., 2., 2.])
    >>> group_standardize(r, 3, std="population")
    tensor([ 1.4142, -0.7071, -0.7071,  0.0000,  0.0000,  0.0000])
    >>> group_standardize(r, 3, std="sample")
    tensor([ 1.1547, -0.5774, -0.5774,  0.0000,  0.0000,  0.0000])
    >>> group_standardize(r, 3, std="none")
    tensor([ 0.6667, -0.3333, -0.3333,  0.0000,  0.0000,  0.0000])
    >>> near = torch.tensor([0., 3e-5])          # std 1.5e-5: unit-size by eq:grpo, 0.13 with TRL's epsilon
    >>> group_standardize(near, 2, "population"), group_standardize(near, 2, "population", eps=1e-4)
    (tensor([-1.,  1.]), tensor([-0.1304,  0.1304]))
    """
    if std not in ("population", "sample", "none"):
        raise ValueError(f"unknown std {std!r}; expected population, sample or none")
    r = _grouped(rewards.float(), group_size)  # [B, G]
    mean = r.mean(dim=1, keepdim=True)  # [B, 1]
    spread = r.std(dim=1, unbiased=std == "sample", keepdim=True)  # [B, 1]
    informative = spread > min_std
    scale = torch.ones_like(spread) if std == "none" else torch.where(informative, spread + eps, 1.0)
    adv = torch.where(informative, (r - mean) / scale, 0.0)
    return adv.reshape(-1)


def leave_one_out(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO's advantage r_i - mean_{j != i} r_j: each rollout's baseline is the mean of the
    other G - 1 rollouts of its group (REINFORCE Leave-One-Out; verl's `rloo`, which writes it as
    (G r_i - sum_j r_j) / (G - 1)). Needs G >= 2. Not an equation of the paper: a registered
    alternative to `eq:grpo`'s standardisation.

    >>> leave_one_out(torch.tensor([1., 0., 0., 2., 2., 2.]), 3)
    tensor([ 1.0000, -0.5000, -0.5000,  0.0000,  0.0000,  0.0000])
    """
    r = _grouped(rewards.float(), group_size)  # [B, G]
    others = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)  # [B, G]
    return (r - others).reshape(-1)


def hybrid_target(correct: torch.Tensor, gamma: float, group_size: int) -> torch.Tensor:
    """Regression target t_i = gamma * a_i + (1 - gamma) * mean_group(a) (`eq:calloss`).

    The group mean runs over all G rollouts of the question, whether or not their
    readout exists.

    >>> hybrid_target(torch.tensor([1., 0., 0., 0.]), gamma=0.5, group_size=4)
    tensor([0.6250, 0.1250, 0.1250, 0.1250])
    """
    a = _grouped(correct.float(), group_size)  # [B, G]
    t = gamma * a + (1.0 - gamma) * a.mean(dim=1, keepdim=True)
    return t.reshape(-1)


def calibration_loss(conf: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """L_cal = (1/|V|) sum_{i in V} (c_i - t_i)^2 (`eq:calloss`).

    `conf` carries the gradient into z_H - z_L; d L_cal / d(z_H - z_L)_i =
    2 (c_i - t_i) c_i (1 - c_i) / |V|. Rollouts outside V (no readout) contribute
    nothing, whatever value `conf` holds there (even NaN). With V empty the loss
    is a zero that is still attached to the graph, so `backward()` works.

    >>> calibration_loss(torch.tensor([0.9, 0.2, 0.7]), torch.tensor([1., 0., 0.]),
    ...                  torch.tensor([True, True, False]))
    tensor(0.0250)
    """
    valid = valid.bool()
    sq_err = torch.where(valid, conf - target, torch.zeros_like(conf)) ** 2  # [N]
    n_valid = valid.sum()
    if n_valid == 0:
        return (conf * 0.0).nan_to_num(0.0).sum()
    return sq_err.sum() / n_valid


def auxiliary_head_loss(conf: torch.Tensor, correct: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the readout c against a, mean over V.

    The loss of the "GRPO + auxiliary head" arm of `app:decompose` (tab:decompose):
    there c is read from the *detached* final hidden state, so only the head (the two
    output rows of H and L) learns to predict per-rollout correctness, and the policy is
    trained by GRPO alone. From probabilities, each log clamped at -100 as torch's
    binary_cross_entropy does (fp32 rounds c to 1 only beyond z_H - z_L of about 17).
    Rollouts outside V contribute nothing; V empty gives a zero attached to the graph.

    >>> c = torch.sigmoid(torch.tensor([0.0, 2.0, -1.0]))
    >>> auxiliary_head_loss(c, torch.tensor([1., 0., 1.]), torch.tensor([True, True, False]))
    tensor(1.4100)
    """
    valid = valid.bool()
    safe = torch.where(valid, conf, torch.full_like(conf, 0.5))  # NaN outside V never reaches the loss
    per_rollout = torch.nn.functional.binary_cross_entropy(safe, correct.to(conf.dtype), reduction="none")  # [N]
    per_rollout = torch.where(valid, per_rollout, torch.zeros_like(per_rollout))
    n_valid = valid.sum()
    if n_valid == 0:
        return (conf * 0.0).nan_to_num(0.0).sum()
    return per_rollout.sum() / n_valid


def digit_expectation(int_logits: torch.Tensor, dec_logits: torch.Tensor) -> torch.Tensor:
    """c = p_1 + p_0 E[d] / 10 from the logits of a verbalized confidence slot (`eq:digitexp`).

    int_logits: [N, 2] logits of "0" and "1" at the integer position (right after
    <confidence>); dec_logits: [N, 10] logits of "0".."9" at the decimal position (after
    a teacher-forced "0."). Each candidate set is renormalised on its own; the result is
    differentiable in both and covers [0, 1] continuously.

    >>> digit_expectation(torch.tensor([[0.0, 0.0]]), torch.log(torch.eye(10)[[8]] + 1e-30))
    tensor([0.9000])
    """
    p_int = torch.softmax(int_logits.float(), dim=-1)  # [N, 2]
    q_dec = torch.softmax(dec_logits.float(), dim=-1)  # [N, 10]
    expected_digit = q_dec @ torch.arange(10, dtype=q_dec.dtype, device=q_dec.device)  # [N]
    return p_int[:, 1] + p_int[:, 0] * expected_digit / 10


def discrepancy_weights(
    correct: torch.Tensor,
    conf: torch.Tensor,
    valid: torch.Tensor,
    kappa: float,
    group_size: int,
    w_min: float = 0.5,
    w_max: float = 2.0,
) -> torch.Tensor:
    """Per-rollout answer weights w_i = clip(1 + kappa (s_i - mean_group s), w_-, w_+) (`eq:sw`).

    s_i = |a_i - c_i| is the discrepancy between outcome and readout. The group
    mean runs over the *valid* members of the group (a missing readout has no
    discrepancy); rollouts without a readout, and every rollout of a group with
    none, get w = 1. The readout is detached: the weights scale advantages and
    must not carry a gradient.

    >>> discrepancy_weights(torch.tensor([1., 0.]), torch.tensor([0.9, 0.9]),
    ...                     torch.tensor([True, True]), kappa=0.5, group_size=2)
    tensor([0.8000, 1.2000])
    """
    valid_g = _grouped(valid.bool(), group_size)  # [B, G]
    s = (correct.float() - conf.detach().float()).abs()  # [N]
    s_g = torch.where(valid_g, _grouped(s, group_size), 0.0)  # [B, G], NaN-free
    n_valid = valid_g.sum(dim=1, keepdim=True)  # [B, 1]
    s_mean = s_g.sum(dim=1, keepdim=True) / n_valid.clamp(min=1)  # [B, 1]
    w = (1.0 + kappa * (s_g - s_mean)).clamp(w_min, w_max)
    return torch.where(valid_g, w, 1.0).reshape(-1)


def credo_rewards(
    correct: torch.Tensor,
    fmt: torch.Tensor,
    conf: torch.Tensor,
    target: torch.Tensor,
    beta: float,
    shape: str = "additive",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment rewards of CREDO (`eq:rewards3`, answer-reward shapes of `app:rewardshape`).

    r_ans  = beta F + a          ("additive", the paper's choice)
           = F (beta + a)        ("gated")
           = a                   ("none": no format term)
    r_conf = F (1 - (t - c)^2)   (0 where the format is broken; `conf` may be
                                  anything there, NaN included)

    >>> credo_rewards(torch.tensor([1., 0.]), torch.tensor([1., 0.]),
    ...               torch.tensor([0.8, float("nan")]), torch.tensor([0.75, 0.25]), beta=0.5)
    (tensor([1.5000, 0.0000]), tensor([0.9975, 0.0000]))
    """
    a, f = correct.float(), fmt.float()
    if shape == "additive":
        r_ans = beta * f + a
    elif shape == "gated":
        r_ans = f * (beta + a)
    elif shape == "none":
        r_ans = a
    else:
        raise ValueError(f"unknown answer-reward shape {shape!r}; expected additive, gated or none")
    err = torch.where(f > 0, target.float() - conf.detach().float(), 0.0)
    r_conf = f * (1.0 - err**2)
    return r_ans, r_conf


def rlcr_reward(correct: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """RLCR's single reward r = a - (q - a)^2 (`eq:rewards`, first line).

    `q` is the parsed verbalized confidence; NaN marks a report that could not
    be parsed, which is scored as the worst Brier term, (q - a)^2 = 1 (a format
    failure is never read as q = 0, which would *reward* a missing report on a
    wrong answer).

    >>> rlcr_reward(torch.tensor([1., 0., 1.]), torch.tensor([0.9, 0.3, float("nan")]))
    tensor([ 0.9900, -0.0900,  0.0000])
    """
    a = correct.float()
    brier = torch.where(torch.isnan(q), 1.0, (q.float() - a) ** 2)
    return a - brier


def rlcr_gated_reward(correct: torch.Tensor, q: torch.Tensor, fmt: torch.Tensor) -> torch.Tensor:
    """RLCR's reward as RLCR's released code gates it on the format, in `eq:rewards`'s units.

    Its code sums 0.5 F + 0.5 F a + 0.5 F (1 - (q - a)^2): that is 1 + r/2 with r = a - (q - a)^2
    where F = 1, and 0 where F = 0, which is r = -2 (below every report's reward, -1 at worst):
    a format failure loses the correctness term too.

    >>> a, q, f = torch.tensor([1., 1., 0.]), torch.tensor([0.9, 0.9, float("nan")]), torch.tensor([1., 0., 0.])
    >>> rlcr_gated_reward(a, q, f)
    tensor([ 0.9900, -2.0000, -2.0000])
    """
    return torch.where(fmt.bool(), rlcr_reward(correct, q), -2.0)


def dcpo_rewards(
    correct: torch.Tensor, q: torch.Tensor, lam: float, group_size: int, form: str = "absolute"
) -> tuple[torch.Tensor, torch.Tensor]:
    """DCPO's segment rewards (`eq:rewards`, second line).

    r_reason = a;  R_IG = lam * mean_group(a) + (1 - lam) * a;
    r_conf = -|q - R_IG|           ("absolute", as the paper writes it: optimal at a median of R_IG)
           = -0.5 (R_IG - q)^2     ("squared", DCPO's released code: optimal at R_IG's mean).
    An unparseable report (NaN) gets the worst a report in [0, 1] can: -1, or -0.5 squared.

    >>> a, q = torch.tensor([1., 0.]), torch.tensor([0.5, float("nan")])
    >>> dcpo_rewards(a, q, lam=0.5, group_size=2), dcpo_rewards(a, q, lam=0.5, group_size=2, form="squared")
    ((tensor([1., 0.]), tensor([-0.2500, -1.0000])), (tensor([1., 0.]), tensor([-0.0312, -0.5000])))
    """
    a = correct.float()
    r_ig = lam * _grouped(a, group_size).mean(dim=1, keepdim=True).expand(-1, group_size).reshape(-1) + (1 - lam) * a
    if form == "absolute":
        r_conf = torch.where(torch.isnan(q), -1.0, -(q.float() - r_ig).abs())
    elif form == "squared":
        r_conf = torch.where(torch.isnan(q), -0.5, -0.5 * (r_ig - q.float()) ** 2)
    else:
        raise ValueError(f"unknown DCPO confidence reward {form!r}; expected absolute or squared")
    return a, r_conf


def token_advantages(
    adv_ans: torch.Tensor, adv_conf: torch.Tensor, w: torch.Tensor, ans_mask: torch.Tensor, conf_mask: torch.Tensor
) -> torch.Tensor:
    """Per-token advantage A_{i,k} = 1[k in ans_i] w_i A^ans_i + 1[k in conf_i] A^conf_i (`eq:total`).

    adv_ans, adv_conf, w: [N]; ans_mask, conf_mask: [N, T]. Tokens in neither
    segment (the confidence slot, padding, the prompt) get 0.

    >>> token_advantages(torch.tensor([1.]), torch.tensor([-2.]), torch.tensor([1.5]),
    ...                  torch.tensor([[1, 1, 0, 0]]), torch.tensor([[0, 0, 1, 0]]))
    tensor([[ 1.5000,  1.5000, -2.0000,  0.0000]])
    """
    ans = ans_mask.float() * (w * adv_ans).float()[:, None]
    conf = conf_mask.float() * adv_conf.float()[:, None]
    return ans + conf  # [N, T]


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv_tok: torch.Tensor,
    mask: torch.Tensor,
    eps: float,
    token_norm: torch.Tensor | None = None,
) -> torch.Tensor:
    """Negative clipped surrogate -J of `eq:grpo`, with per-token advantages.

    J = mean_i [ (1/|o_i|) sum_{k in o_i} min(rho A, clip(rho, 1-eps, 1+eps) A) ],
    rho = exp(logp - old_logp). The token sum is taken per sequence over `mask` (the
    completion tokens o_i) and divided by `token_norm` [N], then averaged over sequences.
    By default `token_norm` is |o_i|, the token mean the paper writes (`sequence_token_mean`);
    Dr. GRPO divides by a constant instead (`sequence_token_sum_norm`). A sequence with no
    completion token contributes 0.

    logp, old_logp, adv_tok, mask: [N, T]. Returns a scalar to *minimise*.

    >>> lp = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> clipped_policy_loss(lp, lp, torch.tensor([[1., 3.]]), torch.tensor([[1, 1]]), eps=0.2)
    tensor(-2.)
    >>> clipped_policy_loss(lp, lp, torch.tensor([[1., 3.]]), torch.tensor([[1, 1]]), 0.2, torch.tensor([8.]))
    tensor(-0.5000)
    """
    mask = mask.float()
    ratio = torch.exp(logp - old_logp)  # [N, T]
    surrogate = torch.minimum(ratio * adv_tok, ratio.clamp(1 - eps, 1 + eps) * adv_tok)
    norm = sequence_token_mean(mask) if token_norm is None else token_norm.to(mask)  # [N]
    per_seq = (surrogate * mask).sum(dim=1) / norm  # [N]
    return -per_seq.mean()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, token_norm: torch.Tensor) -> torch.Tensor:
    """The KL penalty to a frozen reference policy: the k3 estimator of KL(pi || pi_ref) per sampled
    token, exp(r) - r - 1 with r = log pi_ref - log pi (non-negative, unbiased; TRL's per-token KL
    and verl's `low_var_kl`), aggregated as eq:grpo's J is: each sequence's token sum over `mask`
    divided by `token_norm` [N], then the mean over sequences. The paper trains without it
    (tab:hyper's KL coefficient is 0); DCPO's code uses it with a coefficient of 1e-3.

    logp (with the gradient), ref_logp, mask: [N, T]. Returns a scalar to minimise.

    >>> lp, ref = torch.log(torch.tensor([[0.5, 0.25]])), torch.log(torch.tensor([[0.25, 0.25]]))
    >>> kl_k3(lp, ref, torch.tensor([[1, 1]]), torch.tensor([2.]))  # (0.5 - log 0.5 - 1 + 0) / 2
    tensor(0.0966)
    """
    mask = mask.float()
    log_ratio = ref_logp - logp  # [N, T]
    per_token = torch.exp(log_ratio) - log_ratio - 1.0  # [N, T]
    return ((per_token * mask).sum(dim=1) / token_norm.to(mask)).mean()


def sequence_token_mean(mask: torch.Tensor) -> torch.Tensor:
    """The divisor of a sequence's token sum in `eq:grpo`: |o_i|, its completion tokens (at least 1).

    >>> sequence_token_mean(torch.tensor([[1, 1, 0], [0, 0, 0]]))
    tensor([2., 1.])
    """
    return mask.float().sum(dim=1).clamp(min=1)


def sequence_token_sum_norm(mask: torch.Tensor, constant: float) -> torch.Tensor:
    """Dr. GRPO's divisor: one constant for every sequence (its code: the generation budget), so a
    long completion's tokens weigh as much as a short one's, removing eq:grpo's 1/|o_i| length bias.

    >>> sequence_token_sum_norm(torch.tensor([[1, 1, 0], [0, 0, 0]]), 3.0)
    tensor([3., 3.])
    """
    return torch.full((mask.shape[0],), float(constant), device=mask.device)


def readout_logits(h_slot: torch.Tensor, lm_head: torch.Tensor, high_id: int, low_id: int) -> torch.Tensor:
    """z_H - z_L at the slot (`eq:readout`), fp32, from the final hidden state there.

    h_slot: [N, H] the hidden state whose next-token distribution is the slot (the last token of
    `<confidence>`); lm_head: [V, H], or just its rows. z_H - z_L = h_slot . (W_H - W_L), each row
    upcast first: the full distribution's logits, without a softmax; c = sigmoid(z_H - z_L).

    >>> readout_logits(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0], [3.0, 1.0], [1.0, 1.0]]), 1, 2)
    tensor([2.])
    """
    return h_slot.float() @ (lm_head[high_id].float() - lm_head[low_id].float())  # [N]
