"""Steps 1-3 of a training step: which questions it samples, their rollouts, and what the
rollouts earned.

* `training_problems`: the training rows that fit the prompt budget, and their prompt ids;
  `QuestionStream`: the deterministic order in which a run draws them (its cursor is
  checkpointed);
* `make_rollouts` (steps 1-2): G completions per question from the engine, each cut into its
  segments on token ids (rollout.py);
* `outcomes` (step 3): a_i from the verifier and its reason, F_i, whether the slot was
  reached, and any confidence sampled as text (the plan's report_read: the parsed numeral or
  the sampled slot token), as an `Outcomes` record for the credit of step 5.

Not here: the reads of c (confidence.py), reading the problems (problems.py), the forward,
the credit and the update (policy.py, credo.py, methods.py), the engines (engine.py), segment
parsing (rollout.py), grading itself (verifier.py).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, replace

import torch

import policy as pol
import rollout as ro
import verifier
from config import ConfidencePlan, numeral_rule
from schema import Config


def training_problems(
    rows: list[dict], cfg: Config, plan: ConfidencePlan, tokenizer, announce: bool = True
) -> tuple[list[dict], list[list[int]]]:
    """The training problems (`rows`, as problems.load_rows reads them) and their prompt ids; problems
    whose prompt exceeds max_prompt_tokens are skipped, and counted on stderr (where `announce`)."""
    prompts = [ro.build_prompt_ids(tokenizer, r["problem"], plan.prompt, cfg.domain, cfg.enable_thinking) for r in rows]
    keep = [i for i, p in enumerate(prompts) if len(p) <= cfg.max_prompt_tokens]
    if len(keep) < len(rows) and announce:
        print(
            f"[credo] {len(rows) - len(keep)} of {len(rows)} problems exceed max_prompt_tokens="
            f"{cfg.max_prompt_tokens} and are skipped",
            file=sys.stderr,
        )
    return [rows[i] for i in keep], [prompts[i] for i in keep]


@dataclass
class QuestionStream:
    """An endless, deterministic stream of question indices: epoch e is a permutation of
    range(n) seeded by (seed, e). Its whole state is `cursor`, so resuming is exact."""

    n: int
    seed: int
    cursor: int = 0

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        out = []
        for c in range(self.cursor, self.cursor + count):
            out.append(self._permutation(c // self.n)[c % self.n])
        self.cursor += count
        return out


@dataclass
class Outcomes:
    """What a step's rollouts earned before any forward: one entry per rollout (row q*G + i)."""

    correct: torch.Tensor  # [N] a_i in {0, 1}
    verdicts: list[verifier.Verdict]  # [N] the grader's verdict: a_i (passed) and why; a grading error gives a_i = 0
    fmt: torch.Tensor  # [N] F_i in {0, 1}
    valid: torch.Tensor  # [N] bool: the slot was reached, so the model's c exists (V)
    # [N] a confidence sampled as text (plan.report_read), NaN where none; None where the run samples none
    reported: torch.Tensor | None
    truncated: torch.Tensor  # [N] bool: the completion hit max_completion_tokens (truncated_completions)


def make_rollouts(
    engine,
    tokenizer,
    questions: list[dict],
    prompts: list[list[int]],
    cfg: Config,
    plan: ConfidencePlan,
    step: int,
    seed: int,
) -> list[ro.Rollout]:
    """Sample G completions per question and parse each into segments (rows q*G + i); `seed`
    is this rank's (World.rank_seed).

    With conf_train=sampled the slot token is generated, and F_i also needs it to be one of
    the reserved pair (anything else is a format failure, as a malformed numeral is)."""
    samples = engine.generate(prompts, cfg.group_size, seed=seed * 1_000_003 + step)
    reserved = pol.reserved_ids(tokenizer)
    rollouts = []
    for row, sample in enumerate(samples):
        q = row // cfg.group_size
        segments = ro.parse_segments(
            tokenizer, sample.token_ids, plan.segments, ro.ANSWER_MARKERS[cfg.domain], numeral_rule(cfg)
        )
        if plan.samples_slot_token:
            slot_token = (
                sample.token_ids[segments.slot]
                if segments.slot is not None and segments.slot < len(sample.token_ids)
                else None
            )
            segments = replace(segments, fmt=segments.fmt and slot_token in reserved)
        rollouts.append(
            ro.Rollout(
                question_id=questions[q]["id"],
                prompt_ids=prompts[q],
                completion_ids=sample.token_ids,
                text=ro.decode(tokenizer, sample.token_ids),
                finish_reason=sample.finish_reason,
                segments=segments,
                engine_logprobs=sample.logprobs,
                slot_repaired=sample.slot_repaired,
            )
        )
    return rollouts


def outcomes(
    rollouts: list[ro.Rollout], questions: list[dict], cfg: Config, plan: ConfidencePlan, tokenizer
) -> Outcomes:
    """a_i from the verifier (math-verify in killable workers; code in the sandbox, verify_workers
    at once, verify_timeout_s per test) on each answer segment (after any thinking block, cut
    by the rule that splits the tokens), with its reason: a rollout the grader fails on gets
    a_i = 0 and says why, the step goes on; F_i and the slot from the segments; the reports
    sampled as text."""
    group = cfg.group_size
    references = [questions[i // group]["answer" if cfg.domain == "math" else "tests"] for i in range(len(rollouts))]
    answers = [ro.answer_text(ro.after_thinking(r.text), plan.segments) for r in rollouts]  # what is graded
    verdicts = verifier.grade(
        answers, references, cfg.domain, workers=cfg.verify_workers, timeout_s=cfg.verify_timeout_s
    )
    return Outcomes(
        correct=torch.tensor([verdict.passed for verdict in verdicts], dtype=torch.float32),  # [N]
        verdicts=verdicts,  # [N]
        fmt=torch.tensor([float(r.segments.fmt) for r in rollouts]),  # [N]
        valid=torch.tensor([r.segments.slot is not None for r in rollouts]),  # [N]
        reported=None if plan.report_read is None else plan.report_read.from_text(rollouts, tokenizer).float(),
        truncated=torch.tensor([r.truncated for r in rollouts], dtype=torch.bool),  # [N]
    )
