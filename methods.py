"""The methods, by name: how each turns a group's outcomes and confidences into rewards.

    @register_method("brier", reads="model")
    def brier(g: GroupOutcomes, cfg: Config) -> Rewards:
        ...

A method is one rewards function with the signature above, registered under the name a
config's `method:` gives. `reads` says which confidence its rewards score, and so what the
run must produce (config.confidence_plan decides the rest from it):

  model    the model's own c, read from the logits at the slot (eq:readout, or eq:digitexp
           on the verbalized prompt); it can also be regressed (alpha > 0, eq:calloss)
  report   a confidence sampled as text: the parsed numeral of the verbalized prompt (eq:verb)
  nothing  no confidence: the rewards score the answer only

Everything else about a step is shared by every method and lives in `credit` below: the
target t (eq:target), the group standardisation of both rewards (eq:grpo), eq:sw's
discrepancy weights on the answer advantage, and the A^conf ablation. docs/forking.md walks
through adding one.

Does not hold: the equations themselves (losses.py), which confidence is read where
(config.ConfidencePlan), or the loop (credo.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

import losses
from schema import Config

Reads = Literal["model", "report", "nothing"]


@dataclass(frozen=True)
class GroupOutcomes:
    """What a method's rewards see, for whole groups (rollout i of question q is row q*G + i)."""

    correct: torch.Tensor  # [N] a_i in {0, 1}
    fmt: torch.Tensor  # [N] F_i in {0, 1}
    conf: torch.Tensor  # [N] the confidence the method reads, detached; NaN where there is none
    target: torch.Tensor  # [N] t_i of eq:target
    group_size: int  # G


class Rewards(NamedTuple):
    answer: torch.Tensor  # [N] r^ans: scores the answer segment's tokens
    # [N] r^conf: scores the analysis segment's tokens (the same as r^ans for a method that rewards
    # every token alike)
    confidence: torch.Tensor


@dataclass(frozen=True)
class Method:
    name: str
    rewards: Callable[[GroupOutcomes, dict], Rewards]
    reads: Reads
    help: str  # one line, for errors and listings


METHODS: dict[str, Method] = {}


def register_method(name: str, reads: Reads) -> Callable:
    """Register the decorated rewards function as `method: name`; its docstring's first
    line is the method's help."""
    if reads not in ("model", "report", "nothing"):
        raise ValueError(f"method {name!r}: reads={reads!r}; choose model, report or nothing")

    def register(rewards: Callable[[GroupOutcomes, dict], Rewards]) -> Callable:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        help_line = (rewards.__doc__ or name).strip().splitlines()[0]
        METHODS[name] = Method(name=name, rewards=rewards, reads=reads, help=help_line)
        return rewards

    return register


def method_of(name: str) -> Method:
    """The registered method `name`, or one line naming the known ones."""
    if name not in METHODS:
        raise ValueError(f"method={name!r} is not registered; choose one of {tuple(METHODS)} (methods.py)")
    return METHODS[name]


def missing_as(conf: torch.Tensor, value: float) -> torch.Tensor:
    """conf with `value` wherever it is missing (NaN)."""
    return torch.where(torch.isnan(conf), value, conf)


@register_method("credo", reads="model")
def credo(g: GroupOutcomes, cfg: Config) -> Rewards:
    """CREDO: r_ans = beta F + a (or another shape), r_conf = F (1 - (t - c)^2) (eq:rewards3)."""
    c = missing_as(g.conf, 0.0)  # F = 0 wherever c is missing
    r_ans, r_conf = losses.credo_rewards(g.correct, g.fmt, c, g.target, cfg.beta, cfg.answer_reward_shape)
    return Rewards(r_ans, r_conf)


@register_method("grpo", reads="nothing")
def grpo(g: GroupOutcomes, cfg: Config) -> Rewards:
    """GRPO: r = a on every token (eq:grpo)."""
    r = g.correct.float()
    return Rewards(r, r)


@register_method("rlcr", reads="report")
def rlcr(g: GroupOutcomes, cfg: Config) -> Rewards:
    """RLCR: r = a - (q - a)^2 on every token, q the sampled numeral (eq:rewards)."""
    r = losses.rlcr_reward(g.correct, g.conf)
    return Rewards(r, r)


@register_method("dcpo", reads="report")
def dcpo(g: GroupOutcomes, cfg: Config) -> Rewards:
    """DCPO: r_reason = a on the answer, r_conf = -|q - R_IG| on the analysis (eq:rewards)."""
    r_ans, r_conf = losses.dcpo_rewards(g.correct, g.conf, cfg.dcpo_lambda, g.group_size)
    return Rewards(r_ans, r_conf)


# ============================================================================================
# What every method shares: from its rewards to the advantages of a step.
# ============================================================================================


class Credit(NamedTuple):
    """Step 5 for whole groups: one entry per rollout, [N] each (credit)."""

    target: torch.Tensor  # t_i (eq:target)
    r_ans: torch.Tensor  # r^ans (methods.py)
    r_conf: torch.Tensor  # r^conf
    w: torch.Tensor  # eq:sw's discrepancy weight of the answer advantage
    adv_ans: torch.Tensor  # A^ans, group-standardised
    adv_conf: torch.Tensor  # A^conf, group-standardised (0 with conf_advantage=false)

    @classmethod
    def zeros(cls, n: int) -> Credit:
        return cls(*(torch.zeros(n) for _ in cls._fields))

    def select(self, rows: list[int]) -> Credit:
        return Credit(*(value[rows] for value in self))

    def place(self, rows: list[int], part: Credit) -> None:
        """Write `part`, the credit of `rows`, into these [N] tensors."""
        for mine, theirs in zip(self, part):
            mine[rows] = theirs


def credit(
    correct: torch.Tensor,
    fmt: torch.Tensor,
    conf: torch.Tensor,
    valid: torch.Tensor,
    cfg: Config,
    kappa: float,
    weight_conf: torch.Tensor | None = None,
    weight_valid: torch.Tensor | None = None,
) -> Credit:
    """Rewards, target, weights and group-standardised advantages for whole groups.

    conf: [N] the confidence the rewards read, detached: the model's c (CREDO's readout or
    digit expectation), or a report sampled as text (the baselines' parsed numeral q, the
    sampled slot token of conf_train=sampled); entries outside `valid` are ignored.
    weight_conf, weight_valid: the confidence that drives eq:sw's weights when it is not
    `conf` (the readout under conf_train=sampled, a baseline's digit expectation).

    The method's rewards come from its registered function (methods.py); the rest is every
    method's: the target (eq:target), eq:sw's discrepancy weights on the answer advantage
    (w = 1 when kappa = 0), and conf_advantage=false zeroing A^conf (the ablation).
    """
    group = cfg.group_size
    target = losses.hybrid_target(correct, cfg.gamma, group)
    outcomes_in = GroupOutcomes(
        correct=correct, fmt=fmt, target=target, group_size=group, conf=torch.where(valid, conf.float(), float("nan"))
    )  # missing: NaN, never 0
    r_ans, r_conf = method_of(cfg.method).rewards(outcomes_in, cfg)
    if weight_conf is None:
        weight_conf, weight_valid = conf, valid
    adv_conf = losses.group_standardize(r_conf, group)
    return Credit(
        target=target,
        r_ans=r_ans,
        r_conf=r_conf,
        w=losses.discrepancy_weights(correct, weight_conf, weight_valid, kappa, group, cfg.w_min, cfg.w_max),
        adv_ans=losses.group_standardize(r_ans, group),
        adv_conf=adv_conf if cfg.conf_advantage else torch.zeros_like(adv_conf),
    )


class ConfidenceReads(NamedTuple):
    """The confidences credit reads that are known before any forward, [N] each; None where
    it reads the model's c instead (valid where the slot was reached)."""

    rewards: torch.Tensor | None  # what the rewards read: a report sampled as text (plan.rewards_read)
    rewards_valid: torch.Tensor | None  # bool: a report exists
    weights: torch.Tensor | None  # what eq:sw's weights read (plan.weights_read): the report, or a
    weights_valid: torch.Tensor | None  #     no-grad digit expectation


def confidence_reads(
    reported: torch.Tensor | None, weight_conf: torch.Tensor | None, weights_read: str
) -> ConfidenceReads:
    """reported: [N] a confidence sampled as text, NaN where none (None: the rewards read the
    model's c); weight_conf: [N] a no-grad digit expectation, NaN where none; weights_read:
    ConfidencePlan.weights_read, which of them eq:sw's weights read (model: neither)."""
    weights = {"numeral": reported, "digit_pass": weight_conf}.get(weights_read)
    return ConfidenceReads(
        rewards=reported,
        rewards_valid=None if reported is None else ~torch.isnan(reported),
        weights=weights,
        weights_valid=None if weights is None else ~torch.isnan(weights),
    )
