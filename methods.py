"""The research knobs: registries, each chosen by a config key, each with one signature.

    rewards            method:            (g: GroupOutcomes, cfg: Config) -> Rewards       register_method
    confidence target  target:            (correct [N], cfg: Config) -> t [N]               register_target
    calibration loss   calibration_loss:  (c [N], t [N], valid [N]) -> scalar               register_calibration_loss
    advantages         advantage:         (r [N], cfg: Config) -> A [N]                     register_advantage
    loss aggregation   loss_agg:          (completion mask [N, T], cfg: Config) -> norm [N]  register_loss_agg
    loss terms         loss_terms:        (x: TermInputs, cfg: Config) -> scalar            register_loss_term

The confidence channel (how c is obtained) is the registry of confidence.py, chosen by the
`confidence` key.

A method's rewards say which confidence they score (`reads`), and confidence.plan
derives from it what a run must produce:

  model    the model's own c, read from the logits at the slot (eq:readout, or eq:digitexp
           on the verbalized prompt); it can also be regressed (alpha > 0, eq:calloss)
  report   a confidence sampled as text: the parsed numeral of the verbalized prompt (eq:verb)
  nothing  no confidence: the rewards score the answer only

Everything else about credit is shared by every method and lives in `credit` below: the
target t, the advantages of both rewards (the `advantage` registry: eq:grpo's group
standardisation as adv_std, adv_eps and adv_min_std read it, RLOO, Dr. GRPO's), eq:sw's
discrepancy weights on the answer advantage, the A^conf ablation, and truncated_completions=mask.
The objective is the sum of the terms loss_terms lists (`pg`, `cal`, `kl`), each declaring its
coefficient key and what it needs (c with its gradient, a frozen reference's log-probs); the
loop provides those and logs each as loss_<name>. docs/forking.md adds one entry to a registry
per worked example, with a test that follows it literally.

Does not hold: the equations themselves (losses.py), which confidence is read where
(confidence.ConfidencePlan), the forward (policy.py), or the loop (credo.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeVar

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
    target: torch.Tensor  # [N] t_i, the confidence target (eq:calloss; the `target` registry)
    group_size: int  # G


class Rewards(NamedTuple):
    answer: torch.Tensor  # [N] r^ans: scores the answer segment's tokens
    # [N] r^conf: scores the analysis segment's tokens (the same as r^ans for a method that rewards
    # every token alike)
    confidence: torch.Tensor


@dataclass(frozen=True)
class Method:
    name: str
    rewards: Callable[[GroupOutcomes, Config], Rewards]
    reads: Reads
    help: str  # one line, for errors and listings


METHODS: dict[str, Method] = {}


def register_method(name: str, reads: Reads) -> Callable:
    """Register the decorated rewards function as `method: name`; its docstring's first
    line is the method's help."""
    if reads not in ("model", "report", "nothing"):
        raise ValueError(f"method {name!r}: reads={reads!r}; choose model, report or nothing")

    def register(rewards: Callable[[GroupOutcomes, Config], Rewards]) -> Callable:
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


def report_read(conf: torch.Tensor, cfg: Config) -> torch.Tensor:
    """A baseline's report q as its rewards read it: NaN where there is none, or -1 there with
    missing_confidence=minus_one (DCPO's code)."""
    return missing_as(conf, -1.0) if cfg.missing_confidence == "minus_one" else conf


@register_method("rlcr", reads="report")
def rlcr(g: GroupOutcomes, cfg: Config) -> Rewards:
    """RLCR: r = a - (q - a)^2 on every token, q the sampled numeral (eq:rewards)."""
    q = report_read(g.conf, cfg)
    if cfg.missing_confidence == "gate":  # RLCR's code: the whole reward gated on the format F
        r = losses.rlcr_gated_reward(g.correct, q, g.fmt)
    else:
        r = losses.rlcr_reward(g.correct, q)
    return Rewards(r, r)


@register_method("dcpo", reads="report")
def dcpo(g: GroupOutcomes, cfg: Config) -> Rewards:
    """DCPO: r_reason = a on the answer, r_conf = -|q - R_IG| on the analysis (eq:rewards; dcpo_conf_reward)."""
    q = report_read(g.conf, cfg)
    r_ans, r_conf = losses.dcpo_rewards(g.correct, q, cfg.dcpo_lambda, g.group_size, cfg.dcpo_conf_reward)
    return Rewards(r_ans, r_conf)


# ============================================================================================
# The confidence target and the calibration loss.
# ============================================================================================

Entry = TypeVar("Entry", bound=Callable)
TARGETS: dict[str, Callable[[torch.Tensor, Config], torch.Tensor]] = {}
CALIBRATION_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {}


def registrar(registry: dict, kind: str, name: str) -> Callable[[Entry], Entry]:
    """A decorator that registers a function as `name` in `registry`; a second `name` is refused
    (every registry of the project is built with it: these, and confidence.READS)."""

    def register(function: Entry) -> Entry:
        if name in registry:
            raise ValueError(f"{kind} {name!r} is registered twice")
        registry[name] = function
        return function

    return register


def register_target(name: str) -> Callable:
    """Register the decorated `(correct [N], cfg) -> t [N]` as `target: name`. `correct` holds
    whole groups (rollout i of question q is row q*G + i, G = cfg.group_size)."""
    return registrar(TARGETS, "target", name)


def register_calibration_loss(name: str) -> Callable:
    """Register the decorated `(c [N], t [N], valid [N] bool) -> scalar` as `calibration_loss:
    name`: c carries the gradient, the loss is a mean over `valid` (rows outside it may hold any
    value, even NaN), and with no valid row it is a zero still attached to the graph."""
    return registrar(CALIBRATION_LOSSES, "calibration loss", name)


# ============================================================================================
# Advantages and the policy loss's aggregation.
# ============================================================================================

ADVANTAGES: dict[str, Callable[[torch.Tensor, Config], torch.Tensor]] = {}
LOSS_AGGREGATIONS: dict[str, Callable[[torch.Tensor, Config], torch.Tensor]] = {}


def register_advantage(name: str) -> Callable:
    """Register the decorated `(rewards [N], cfg) -> advantages [N]` as `advantage: name`, applied
    to r^ans and r^conf alike; `rewards` holds whole groups (rollout i of question q is row q*G + i)."""
    return registrar(ADVANTAGES, "advantage estimator", name)


def register_loss_agg(name: str) -> Callable:
    """Register the decorated `(completion mask [N, T], cfg) -> norm [N]` as `loss_agg: name`: the
    divisor of each sequence's token sum in eq:grpo's J (losses.clipped_policy_loss), before the
    mean over the batch's sequences."""
    return registrar(LOSS_AGGREGATIONS, "loss aggregation", name)


@register_advantage("grpo")
def grpo_advantage(rewards: torch.Tensor, cfg: Config) -> torch.Tensor:
    """(r - mean_group) / (std_group + adv_eps) (eq:grpo), the std as adv_std reads it."""
    return losses.group_standardize(rewards, cfg.group_size, cfg.adv_std, cfg.adv_eps, cfg.adv_min_std)


@register_advantage("rloo")
def rloo_advantage(rewards: torch.Tensor, cfg: Config) -> torch.Tensor:
    """r_i - mean of the group's other rollouts (RLOO; verl's `rloo`)."""
    return losses.leave_one_out(rewards, cfg.group_size)


@register_advantage("dr_grpo")
def dr_grpo_advantage(rewards: torch.Tensor, cfg: Config) -> torch.Tensor:
    """r - mean_group, never divided by the std (Dr. GRPO; grpo with adv_std=none)."""
    return losses.group_standardize(rewards, cfg.group_size, "none", 0.0, cfg.adv_min_std)


@register_loss_agg("token_mean")
def token_mean(mask: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Each sequence's token mean, then the mean over sequences, as eq:grpo writes J."""
    return losses.sequence_token_mean(mask)


@register_loss_agg("token_sum_norm")
def token_sum_norm(mask: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Each sequence's token sum over max_completion_tokens, one constant (Dr. GRPO; verl's
    seq-mean-token-sum-norm): no 1/|o_i| length bias."""
    return losses.sequence_token_sum_norm(mask, cfg.max_completion_tokens)


# ============================================================================================
# The objective: a list of registered loss terms.
# ============================================================================================


class TermInputs(NamedTuple):
    """What a loss term reads on one micro-batch of n rollouts, on the device."""

    logp: torch.Tensor  # [n, T] the trainer's log-probs of the completion tokens, with their gradient
    conf: torch.Tensor | None  # [n] the model's c with its gradient (terms that need "confidence")
    ref_logp: torch.Tensor | None  # [n, T] the frozen reference's log-probs (terms that need "reference")
    credit: Credit  # the rows' credit, [n] each
    completion: torch.Tensor  # [n, T] bool: the completion tokens o_i
    ans_mask: torch.Tensor  # [n, T] bool: the answer segment
    conf_mask: torch.Tensor  # [n, T] bool: the analysis segment
    valid: torch.Tensor  # [n] bool: V, the rollouts with a slot


@dataclass(frozen=True)
class LossTerm:
    """One term of the objective: coefficient x loss(inputs, cfg), a batch mean over `over`."""

    name: str  # logged as loss_<name>
    loss: Callable[[TermInputs, Config], torch.Tensor]  # the micro-batch's mean over its `over` rows
    coef: str | float | None  # a config key, or a number (None: 1); 0 leaves the term out of the run
    warms_up: bool  # the coefficient follows warmup_steps / warmup_shape
    over: Literal["rows", "valid"]  # the batch mean runs over all rollouts, or over V
    needs: frozenset[str]  # what the loop provides: "confidence" (c with its gradient), "reference"
    help: str


LOSS_TERMS: dict[str, LossTerm] = {}
NEEDS = ("confidence", "reference")


def register_loss_term(
    name: str, coef: str | float | None = None, warms_up: bool = False, over: str = "rows", needs: tuple = ()
) -> Callable:
    """Register the decorated `(x: TermInputs, cfg) -> scalar` as the loss term `name` (listed by
    the loss_terms key): its mean over the micro-batch's `over` rows (rows or valid); the loop
    weights it by their share of the batch and by the config key `coef`."""
    if over not in ("rows", "valid") or set(needs) - set(NEEDS):
        raise ValueError(f"loss term {name!r}: over must be rows or valid and needs a subset of {NEEDS}")

    def register(loss: Callable) -> Callable:
        help_line = (loss.__doc__ or name).strip().splitlines()[0]
        term = LossTerm(name, loss, coef, warms_up, over, frozenset(needs), help_line)
        registrar(LOSS_TERMS, "loss term", name)(term)
        return loss

    return register


def term_names(cfg: Config) -> list[str]:
    """The names loss_terms lists (`pg,cal,kl` or a YAML list), in order."""
    names = cfg.loss_terms if isinstance(cfg.loss_terms, list) else str(cfg.loss_terms).split(",")
    return [str(name).strip() for name in names if str(name).strip()]


def base_coefficient(term: LossTerm, cfg: Config) -> float:
    """A term's coefficient before any warm-up: its config key's value, its number, or 1."""
    if isinstance(term.coef, str):
        return float(getattr(cfg, term.coef))
    return 1.0 if term.coef is None else float(term.coef)


def loss_terms(cfg: Config) -> list[LossTerm]:
    """The run's terms: those loss_terms lists, less any whose coefficient is 0 (never computed,
    so a KL term at kl_coef 0 builds no reference model)."""
    terms = [entry_of(LOSS_TERMS, "loss_terms", name) for name in term_names(cfg)]
    return [term for term in terms if base_coefficient(term, cfg) != 0]


def needs_reference(cfg: Config) -> bool:
    """Whether a term of the run reads a frozen reference model's log-probs."""
    return any("reference" in term.needs for term in loss_terms(cfg))


@register_loss_term("pg")
def policy_term(x: TermInputs, cfg: Config) -> torch.Tensor:
    """-J of eq:grpo with eq:total's per-token advantages, aggregated as loss_agg says."""
    adv_tok = losses.token_advantages(x.credit.adv_ans, x.credit.adv_conf, x.credit.w, x.ans_mask, x.conf_mask)
    token_norm = entry_of(LOSS_AGGREGATIONS, "loss_agg", cfg.loss_agg)(x.completion, cfg)  # [n]
    return losses.clipped_policy_loss(x.logp, x.logp.detach(), adv_tok, x.completion, cfg.clip_eps, token_norm)


@register_loss_term("cal", coef="alpha", warms_up=True, over="valid", needs=("confidence",))
def calibration_term(x: TermInputs, cfg: Config) -> torch.Tensor:
    """alpha x the calibration loss of c toward t over V (the calibration_loss registry; eq:calloss)."""
    return entry_of(CALIBRATION_LOSSES, "calibration_loss", cfg.calibration_loss)(x.conf, x.credit.target, x.valid)


@register_loss_term("kl", coef="kl_coef", needs=("reference",))
def kl_term(x: TermInputs, cfg: Config) -> torch.Tensor:
    """kl_coef x the k3 estimate of KL(pi || pi_ref) to the frozen starting model (losses.kl_k3)."""
    token_norm = entry_of(LOSS_AGGREGATIONS, "loss_agg", cfg.loss_agg)(x.completion, cfg)  # [n]
    return losses.kl_k3(x.logp, x.ref_logp, x.completion, token_norm)


def entry_of(registry: dict, key: str, name: str):
    """The registered entry `name` of `registry`, or one line naming the known ones."""
    if name not in registry:
        raise ValueError(f"{key}={name!r} is not registered; choose one of {tuple(registry)} (methods.py)")
    return registry[name]


@register_target("hybrid")
def hybrid(correct: torch.Tensor, cfg: Config) -> torch.Tensor:
    """t_i = gamma a_i + (1 - gamma) mean_group(a) (eq:calloss)."""
    return losses.hybrid_target(correct, cfg.gamma, cfg.group_size)


@register_target("correctness")
def correctness(correct: torch.Tensor, cfg: Config) -> torch.Tensor:
    """t_i = a_i: the auxiliary head's label (tab:decompose), and gamma = 1."""
    return correct.float()


@register_calibration_loss("squared")
def squared(conf: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """L_cal = mean over V of (c - t)^2 (eq:calloss)."""
    return losses.calibration_loss(conf, target, valid)


@register_calibration_loss("head_bce")
def head_bce(conf: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The auxiliary head's binary cross-entropy toward a (tab:decompose; with target: correctness)."""
    return losses.auxiliary_head_loss(conf, target, valid)


# ============================================================================================
# What every method shares: from the step's outcomes and confidences to its advantages.
# ============================================================================================


class Credit(NamedTuple):
    """Step 5 for the whole batch: one entry per rollout, [N] each (credit)."""

    target: torch.Tensor  # t_i (the `target` registry; eq:calloss)
    r_ans: torch.Tensor  # r^ans (the method's rewards)
    r_conf: torch.Tensor  # r^conf
    w: torch.Tensor  # eq:sw's discrepancy weight of the answer advantage
    adv_ans: torch.Tensor  # A^ans (the advantage registry; group-standardised by default)
    adv_conf: torch.Tensor  # A^conf, as A^ans (0 with conf_advantage=false)

    def select(self, rows: list[int]) -> Credit:
        return Credit(*(value[rows] for value in self))


class Confidences(NamedTuple):
    """The detached confidences credit reads, [N] each, NaN where a rollout has none."""

    rewards: torch.Tensor  # what the method's rewards read
    weights: torch.Tensor  # what eq:sw's discrepancy weights read


def credit(
    correct: torch.Tensor,
    fmt: torch.Tensor,
    conf: Confidences,
    cfg: Config,
    kappa: float,
    truncated: torch.Tensor | None = None,
) -> Credit:
    """Target, rewards, discrepancy weights and group-standardised advantages, for whole groups.

    correct, fmt: [N] a_i and F_i (rollout i of question q is row q*G + i). The target, the
    rewards and the advantages come from their registries; the rest is every method's: eq:sw's
    weights on the answer advantage (w = 1 where there is no confidence, and when kappa = 0),
    conf_advantage=false zeroing A^conf, and truncated_completions=mask zeroing both advantages
    of the rollouts `truncated` [N] marks (after the group statistics, which count them).
    """
    group = cfg.group_size
    target = entry_of(TARGETS, "target", cfg.target)(correct, cfg)
    outcomes_in = GroupOutcomes(correct=correct, fmt=fmt, conf=conf.rewards.float(), target=target, group_size=group)
    r_ans, r_conf = method_of(cfg.method).rewards(outcomes_in, cfg)
    weights_valid = ~torch.isnan(conf.weights)

    advantage = entry_of(ADVANTAGES, "advantage", cfg.advantage)
    adv_ans, adv_conf = advantage(r_ans, cfg), advantage(r_conf, cfg)
    if not cfg.conf_advantage:
        adv_conf = torch.zeros_like(adv_conf)
    if cfg.truncated_completions == "mask":
        if truncated is None:
            raise ValueError("truncated_completions=mask needs which rollouts were truncated: pass truncated=")
        adv_ans, adv_conf = (torch.where(truncated.bool(), 0.0, adv) for adv in (adv_ans, adv_conf))
    return Credit(
        target=target,
        r_ans=r_ans,
        r_conf=r_conf,
        w=losses.discrepancy_weights(correct, conf.weights, weights_valid, kappa, group, cfg.w_min, cfg.w_max),
        adv_ans=adv_ans,
        adv_conf=adv_conf,
    )
