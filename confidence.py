"""The confidence channel: every way a run can get its confidence c, one registered read each,
chosen by the `confidence` key (`auto`: the read its prompt asks for).

    @register_model_read("p_high", prompts=READOUT_PROMPTS, probes=[[ro.CONF_HIGH]])
    def p_high(logp: torch.Tensor) -> torch.Tensor:  # c = p(<CONF_HIGH>) under the full softmax
        return logp[:, 0].exp()  # logp: [N, 1] log p(<CONF_HIGH>) at each slot

A read declares its prompts (app:model: the `channel` values it is read on), whether rollouts
stop at the slot (a model read is read there; a text read lets the confidence be sampled as
text), how c is read, and the `label` its c carries in evaluation's records. Every consumer
gets c through it: training (the no-grad pass, the update's forward, and what a step records
as c: this read's, or a baseline's report), eval.py (every read of the checkpoint's prompt),
evaluation/client.py (`ask`) and the toy (through eval.py).

* A **model read** names the tokens it reads after the slot (`probes`: each a token sequence
  whose last token's log-prob it needs, the tokens before it teacher-forced) and computes
  c [N] from their log-probs [N, K]. A server gives those as prompt log-probs (`ask`), the
  training engine right after generation (engine.probe_logprobs, credit_confidence=engine); the
  forward computes them from the slot's hidden state under the full softmax (`Read.of_slot`).
  A read whose normaliser cancels may also give `from_slot`, the same c from a few rows of the
  output head: the readout (z_H - z_L in fp32, losses.readout_logits, exactly) and eq:digitexp.
* A **text read** computes q [N] from the rollouts, NaN where a rollout reports none: the
  parsed numeral (eq:verb). Training reads it in fp32 (credo.outcomes).

Holds: `Slot` (what a model read sees at the slot), `Read`, the registry READS with its two
decorators, the built-in reads (readout, numeral, digit_exp) and the sampled slot token of
conf_train=sampled (a text read the `confidence` key does not choose).
`ConfidencePlan` (`plan(cfg)`) is what a run decides from its read, once: which read the forward
gives, what the rewards, eq:sw's weights and the record read, and where rollouts stop.
Does not hold: the forward that gives the slot (policy.py), the prompts and segments
(rollout.py), the equations (losses.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

import losses
import methods
import rollout as ro
from kernels.logprobs import Head
from methods import registrar
from schema import Config

READOUT_PROMPTS = ("readout", "readout_noanalysis")
DIGITS = tuple(str(d) for d in range(10))


def token_id(tokenizer, text: str) -> int:
    """The id of `text`, which must be one token of `tokenizer`."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"a confidence read needs {text!r} to be one token; this tokenizer gives {ids}")
    return ids[0]


class Slot(NamedTuple):
    """The model at the slot of N rollouts, as a model read sees it."""

    hidden: tuple[torch.Tensor, ...]  # P x [N, H] final hidden states: at the slot, then after each forced token
    head: Head  # the output head (logits = hidden @ head.T; under LoRA its trained rows beside it)
    token_id: Callable[[str], int]  # the id of one token (policy.Policy.token_id)

    def ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.token_id(token) for token in tokens]

    def logits(self, position: int, tokens: Sequence[str]) -> torch.Tensor:
        """[N, K] the logits of `tokens` at `position` (0: the slot), fp32, without a softmax."""
        return self.hidden[position].float() @ self.head.rows_of(self.ids(tokens)).T

    def log_softmax(self, position: int) -> torch.Tensor:
        """[N, V] the log-probs of every token at `position` under the full softmax, fp32."""
        return torch.log_softmax(self.head.logits(self.hidden[position]), dim=-1)


@dataclass(frozen=True)
class Read:
    """One registered way of getting c (register_model_read, register_text_read)."""

    name: str  # the `confidence` value
    prompts: tuple[str, ...]  # the app:model prompts (channel values) it is read on
    label: str  # its records' `source` in eval.py's samples.jsonl (and the tables' rows)
    auto: bool  # what `confidence: auto` reads on its prompts
    help: str  # one line
    probes: tuple[tuple[str, ...], ...] = ()  # a model read's token sequences after the slot
    from_logprobs: Callable[[torch.Tensor], torch.Tensor] | None = None  # logp [N, K] -> c [N]
    from_slot: Callable[[Slot], torch.Tensor] | None = None  # the same c without the softmax
    from_text: Callable[[list, object], torch.Tensor] | None = None  # (rollouts, tokenizer) -> q [N]

    @property
    def model(self) -> bool:
        """c is read from the model at the slot (rollouts stop there), not parsed from text."""
        return self.from_logprobs is not None

    @property
    def forced(self) -> tuple[str, ...]:
        """The tokens teacher-forced after the slot: the longest probe's, less its last."""
        return max((probe[:-1] for probe in self.probes), key=len, default=())

    def of_slot(self, slot: Slot) -> torch.Tensor:
        """[N] c from the slot, with the slot's gradient: from_slot, or from_logprobs of the
        probes' log-probs under the full softmax."""
        if self.from_slot is not None:
            return self.from_slot(slot)
        log_softmax = {len(p) - 1: slot.log_softmax(len(p) - 1) for p in self.probes}  # position -> [N, V]
        logp = [log_softmax[len(p) - 1][:, slot.ids(p[-1:])] for p in self.probes]  # K x [N, 1]
        return self.from_logprobs(torch.cat(logp, dim=1))  # [N, K] -> [N]


READS: dict[str, Read] = {}


def _check_prompts(name: str, prompts: Sequence[str], auto: bool) -> tuple[str, ...]:
    unknown = [p for p in prompts if p not in ro.CHANNELS]
    if not prompts or unknown:
        raise ValueError(f"confidence read {name!r}: prompts {list(prompts)} must be some of {ro.CHANNELS}")
    taken = [p for p in prompts if auto and auto_read(p) is not None]
    if taken:
        raise ValueError(f"confidence read {name!r}: {auto_read(taken[0]).name!r} is already auto on {taken[0]}")
    return tuple(prompts)


def register_model_read(
    name: str,
    prompts: Sequence[str],
    probes: Sequence[Sequence[str]],
    from_slot: Callable[[Slot], torch.Tensor] | None = None,
    label: str | None = None,
    auto: bool = False,
) -> Callable:
    """Register the decorated `(logp [N, K]) -> c [N]` as `confidence: name`: c from the
    log-probs at the slot of the K `probes`, each a token sequence after the slot whose last
    token's log-prob is read (the tokens before it teacher-forced, a prefix of the longest
    probe's), under the full softmax. `from_slot`: the same c from the Slot, where no softmax is
    needed. `label`: its records' source in eval.py (default: the name); `auto`: the read
    `confidence: auto` gives its prompts. Rollouts of a run reading it stop at the slot."""
    probes = tuple(tuple(probe) for probe in probes)
    forced = max((probe[:-1] for probe in probes), key=len, default=())
    for probe in probes:
        if not probe or probe[:-1] != forced[: len(probe) - 1]:
            raise ValueError(
                f"confidence read {name!r}: probe {list(probe)} must be one token or more after the slot, the "
                f"ones before its last a prefix of {list(forced)} (one sequence is teacher-forced)"
            )

    def register(read: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
        entry = Read(
            name,
            _check_prompts(name, prompts, auto),
            label or name,
            auto,
            (read.__doc__ or name).strip().splitlines()[0],
            probes=probes,
            from_logprobs=read,
            from_slot=from_slot,
        )
        registrar(READS, "confidence read", name)(entry)
        return read

    return register


def register_text_read(name: str, prompts: Sequence[str], label: str | None = None, auto: bool = False) -> Callable:
    """Register the decorated `(rollouts, tokenizer) -> q [N]` (NaN where a rollout reports none)
    as `confidence: name`, a confidence sampled as text: rollouts go on past the slot."""

    def register(read: Callable) -> Callable:
        help_line = (read.__doc__ or name).strip().splitlines()[0]
        entry = Read(name, _check_prompts(name, prompts, auto), label or name, auto, help_line, from_text=read)
        registrar(READS, "confidence read", name)(entry)
        return read

    return register


def read_of(name: str) -> Read:
    """The registered read `name`, or one line naming the registered ones."""
    if name not in READS:
        raise ValueError(
            f"confidence={name!r} is not registered; choose one of {tuple(READS)} or auto (or register one in "
            f"confidence.py, docs/forking.md)"
        )
    return READS[name]


def reads_of(prompt: str) -> list[Read]:
    """Every registered read of `prompt`, in registration order."""
    return [read for read in READS.values() if prompt in read.prompts]


def auto_read(prompt: str) -> Read | None:
    """What `confidence: auto` reads on `prompt`."""
    return next((read for read in reads_of(prompt) if read.auto), None)


# --- The built-in reads ------------------------------------------------------------------------


def readout_of_slot(slot: Slot) -> torch.Tensor:
    """eq:readout from two rows of the head: z_H - z_L in fp32 (losses.readout_logits), no softmax."""
    rows = slot.head.rows_of(slot.ids([ro.CONF_HIGH, ro.CONF_LOW]))  # [2, H] fp32: W_H, W_L
    return losses.readout(losses.readout_logits(slot.hidden[0], rows, 0, 1), torch.tensor(0.0))  # [N]


@register_model_read(
    "readout", READOUT_PROMPTS, probes=[[ro.CONF_HIGH], [ro.CONF_LOW]], from_slot=readout_of_slot, auto=True
)
def readout(logp: torch.Tensor) -> torch.Tensor:
    """c = sigmoid(z_H - z_L) at the slot (eq:readout): log p(H) - log p(L), the normaliser cancels."""
    return losses.readout(logp[:, 0], logp[:, 1])


@register_text_read("numeral", ("verbalized",), label="verbalized", auto=True)
def numeral(rollouts: list[ro.Rollout], tokenizer) -> torch.Tensor:
    """The parsed numeral after <confidence> (eq:verb), as parse_segments read it with the run's
    NumeralRule (ConfidencePlan.numeral); float64, so that evaluation records the number parsed."""
    return torch.tensor([r.segments.report for r in rollouts], dtype=torch.float64)


def digit_expectation_of_slot(slot: Slot) -> torch.Tensor:
    """eq:digitexp from the logits of "0"/"1" at the slot and of each digit after the forced "0."."""
    return losses.digit_expectation(slot.logits(0, DIGITS[:2]), slot.logits(2, DIGITS))


@register_model_read(
    "digit_exp",
    ("verbalized",),
    probes=[["0"], ["1"], *(["0", ".", digit] for digit in DIGITS)],
    from_slot=digit_expectation_of_slot,
    label="digit",
)
def digit_exp(logp: torch.Tensor) -> torch.Tensor:
    """c = p1 + p0 E[d] / 10 (eq:digitexp): "0"/"1" at the slot, each digit after a teacher-forced
    "0."; each set is renormalised, so log-probs serve as logits."""
    return losses.digit_expectation(logp[:, :2], logp[:, 2:])


def slot_token(rollouts: list[ro.Rollout], tokenizer) -> torch.Tensor:
    """The sampled slot token: 1 for <CONF_HIGH>, 0 for <CONF_LOW>, NaN for anything else."""
    value = {tokenizer.convert_tokens_to_ids(ro.CONF_HIGH): 1.0, tokenizer.convert_tokens_to_ids(ro.CONF_LOW): 0.0}
    return torch.tensor(
        [
            value.get(r.completion_ids[r.segments.slot], float("nan"))
            if r.segments.slot is not None and r.segments.slot < len(r.completion_ids)
            else float("nan")
            for r in rollouts
        ]
    )


# conf_train=sampled: the slot token itself is sampled and scored by the reward (tab:decompose);
# the rewards read it as text, while eq:sw's weights and the record read the run's model read.
SAMPLED_SLOT_TOKEN = Read("slot_token", ("readout",), "slot_token", False, "the sampled token", from_text=slot_token)


# --- What a run does with its read: the plan ---------------------------------------------------


@dataclass(frozen=True)
class ConfidencePlan:
    """How a run gets, rewards and records its confidence, decided once from its config (`plan`)."""

    read: Read  # the read the `confidence` key names (auto: its prompt's)
    prompt: Literal["readout", "readout_noanalysis", "verbalized"]  # app:model's answer format (channel)
    segments: Literal["readout", "readout_noanalysis", "verbalized"]  # parse_segments' rules: the prompt's,
    #   or `readout` where a verbalized rollout ends at the slot (eq:digitexp)
    numeral: ro.NumeralRule  # how a verbalized report is parsed (conf_tag, conf_number, conf_out_of_range)
    model_read: Read | None  # the read whose c the forward gives: `read` where c is the model's; None: a baseline
    report_read: Read | None  # a confidence sampled as text: a baseline's report, or conf_train=sampled's token
    rewards_read: Literal["model", "report"]  # what the method's rewards read
    weights_read: Literal["model", "report", "pass"]  # what eq:sw reads; pass: a baseline's model read from a
    #   no-grad pass over its rollouts cut at the slot (tab:sw_baseline)
    record: Literal["model", "report"]  # the confidence a step logs as c
    detach_readout: bool  # conf_train=head: alpha's loss trains the head's rows only (tab:decompose)
    stops_at_slot: bool  # rollouts end at the slot (a stop string; with thinking on, a cut after generation)
    cuts_at_slot: bool  # ... by a cut after generation (thinking on: a trace may mention the tag)
    samples_slot_token: bool  # conf_train=sampled: the slot token is sampled; F_i needs it in the reserved pair

    @property
    def model_reads(self) -> list[str]:
        """The model reads credit needs: "model" (model_read on the training batch), "pass" (eq:sw's)."""
        return [name for name in ("model", "pass") if name in (self.rewards_read, self.weights_read)]

    @property
    def forced(self) -> tuple[str, ...]:
        """The tokens the training batch teacher-forces after each slot: model_read's ("0." for eq:digitexp)."""
        return self.model_read.forced if self.model_read is not None else ()


def read_of_config(cfg: Config) -> Read:
    """The read the `confidence` key names; for auto, the one its channel's prompt asks for (the
    readout on the readout prompts, the numeral on the verbalized)."""
    if cfg.confidence != "auto":
        return read_of(cfg.confidence)
    read = auto_read(cfg.channel)
    if read is None:
        raise ValueError(f"confidence=auto: no registered read is auto on channel={cfg.channel}; name one")
    return read


def plan(cfg: Config) -> ConfidencePlan:
    """The ConfidencePlan of a validated config.

    >>> from config import load_config
    >>> p = plan(load_config("credo_digitexp"))
    >>> p.model_read.name, p.forced, p.segments, plan(load_config("rlcr_swd")).weights_read
    ('digit_exp', ('0', '.'), 'readout', 'pass')
    """
    read, sampled, auto = read_of_config(cfg), cfg.conf_train == "sampled", auto_read(cfg.channel)
    # The run's c is the model's where its read is a model read that the method's rewards read,
    # that conf_train=head trains as an auxiliary head, or that its prompt asks for (a readout
    # prompt, whatever the method); otherwise it is the report the prompt asks for (a baseline's,
    # or a checkpoint read through the verbalized prompt).
    reads = methods.method_of(cfg.method).reads
    model_c = read.model and (reads == "model" or cfg.conf_train == "head" or auto.model)
    # Rollouts end at the slot where the model's c is read there; not where the slot token itself
    # is sampled. With thinking on they are cut there after generation instead of stopped by the
    # string `<confidence>` (a reasoning trace may mention the tag).
    stops = model_c and not sampled
    if model_c:
        report = SAMPLED_SLOT_TOKEN if sampled else None
        rewards, weights, record = ("report" if sampled else "model"), "model", "model"
    else:  # a baseline: the report its prompt asks for; eq:sw's weights from a model read's own pass
        report = auto if read.model else read
        rewards, weights, record = "report", ("pass" if read.model else "report"), "report"
    return ConfidencePlan(
        read=read,
        prompt=cfg.channel,
        segments="readout" if cfg.channel == "verbalized" and stops else cfg.channel,
        numeral=ro.NumeralRule(tag=cfg.conf_tag, number=cfg.conf_number, out_of_range=cfg.conf_out_of_range),
        model_read=read if model_c else None,
        report_read=report,
        rewards_read=rewards,
        weights_read=weights,
        record=record,
        detach_readout=cfg.conf_train == "head",
        stops_at_slot=stops,
        cuts_at_slot=stops and bool(cfg.enable_thinking),
        samples_slot_token=sampled,
    )
