"""CREDO training loop: RLVR (GRPO) with a confidence read out of two reserved tokens.

    python credo.py tiny max_steps=2            # or: bash run.sh tiny max_steps=2
    python credo.py configs/math.yaml seed=44
    python credo.py --help-config               # every key: default, source in the paper, help

One step, as in section 3 of the paper (equations by their labels), is `train`'s loop body:

  1. rollouts   B questions x G samples from the engine (vLLM), stopped at the slot
  2. segments   answer / analysis / slot of each completion, found on token ids
  3. outcomes   a_i by the verifier, F_i, the slot, any confidence sampled as text
  4. confidence the detached c of every rollout, z_H - z_L at the slot (`eq:readout`) or
                eq:digitexp: read by the engine at each slot before it sleeps, one decode step
                a rollout (`engine_confidences`), or by a no-grad pass of the trainer
                (credit_confidence; `detached_confidences`)
  5. credit     once, for the whole batch: the target t, the method's rewards (`eq:rewards3`),
                group-standardised A^ans and A^conf, discrepancy weights w (`eq:sw`)
                (methods.credit)
  6. update     per micro-batch, the same for every method: ONE forward (log-probs and c with
                its gradient), the loss terms (`eq:grpo`'s clipped objective + alpha * L_cal of
                `eq:calloss` + kl_coef * KL to the starting model, methods.LOSS_TERMS),
                backward; then AdamW (`update`)
  7. sync       weights pushed into the engine in memory; prefix cache reset

The baselines (GRPO, RLCR, DCPO on the verbalized channel) and the ablations are the same loop
with other config values: what research changes is a registry (methods.py: rewards, target,
calibration loss, advantages, loss aggregation, loss terms; confidence.py: how c is read), and
confidence.plan derives once how a run gets its confidence (docs/forking.md). A step's
context (`Step`: its batch, micro-batches, outcomes, denominators, loss terms and credit) is
built once by `make_step`; what persists across steps is the `Learner`. Everything around the
step (the world, resume, memory fit, compile, preemption) is `setup`.

Simplifications, on purpose (read them before forking):
  * One optimizer step per rollout batch, so the update is on-policy: the "old" log-probs of
    `eq:grpo` are the detached current ones (rho = 1), and the clip only matters if you add
    inner epochs.
  * No KL term by default (tab:hyper's KL coefficient is 0): kl_coef > 0 reads the starting
    model's log-probs, under LoRA from the same weights with the adapters off
    (adapters/lora.adapters_off), else from a second, frozen copy in the compute dtype
    (`load_reference`).
  * Credit needs every group member's c before any gradient, so step 4 reads it apart from the
    update: by default from the engine, which holds each rollout in its prefix cache and has the
    same weights (one decode step a rollout); credit_confidence=trainer reads it with a no-grad
    pass of the trainer instead (a forward of the layers, no vocabulary projection). One credit
    path for every method and micro-batch either way; a step records both c where both exist
    (docs/performance.md measures their agreement and cost).
  * One process per GPU, data parallel only (infra/parallel.py: torchrun, FSDP2, a colocated
    TP = 1 engine per rank, DCP checkpoints; `NPROC=8 bash run.sh math`). With no launcher it
    is one process with no process group.

Not here: the equations (losses.py), the registries and the shared credit (methods.py), THE
forward and the passes that read c (policy.py), the reads themselves (confidence.py), prompts
and segments (rollout.py), generation (engine.py), grading (verifier.py), micro-batches and
packed rows (kernels/packing.py), and run infrastructure (infra/).
"""

from __future__ import annotations

from infra import startup  # noqa: F401  first: library logging and Ctrl-C, before torch and vLLM load

# isort: split
import contextlib
import math
import random
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm import tqdm

import confidence
import config
import methods
import policy as pol
import problems
import rollout as ro
import verifier
from adapters import lora
from confidence import ConfidencePlan
from engine import make_engine, probe_logprobs
from infra import memfit, parallel, runlog
from infra.checkpoint import (
    Preempted,
    PreemptionGuard,
    checkpoint_step,
    clear_run,
    restore_state,
    resume_point,
    save_checkpoint,
)
from infra.runlog import StepStats
from kernels import packing
from methods import Confidences, Credit
from policy import Batch, Policy
from schema import Config

# ============================================================================================
# Steps 1-3: the rollouts, and what they earned.
# ============================================================================================


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
    """Steps 1-2: G completions per question from the engine, each parsed into its segments on
    token ids (rows q*G + i); `seed` is this rank's (World.rank_seed)."""
    samples = engine.generate(prompts, cfg.group_size, seed=seed * 1_000_003 + step)
    ids, marker = [q["id"] for q in questions], ro.ANSWER_MARKERS[cfg.domain]
    rollouts = ro.from_samples(tokenizer, samples, ids, prompts, plan.segments, marker, plan.numeral)
    if plan.samples_slot_token:  # F_i also needs the sampled slot token to be one of the reserved pair
        token = plan.report_read.from_text(rollouts, tokenizer).tolist()  # [N] 1, 0, NaN: any other token
        fmt = [r.segments.fmt and not math.isnan(t) for r, t in zip(rollouts, token)]
        rollouts = [replace(r, segments=replace(r.segments, fmt=f)) for r, f in zip(rollouts, fmt)]
    return rollouts


def outcomes(
    rollouts: list[ro.Rollout], questions: list[dict], cfg: Config, plan: ConfidencePlan, tokenizer
) -> Outcomes:
    """Step 3: a_i and its reason from the verifier on each answer segment after any thinking block
    (a rollout the grader fails on gets a_i = 0 and says why; the step goes on), F_i and the slot
    from the segments, and any confidence sampled as text (plan.report_read)."""
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


# ============================================================================================
# Steps 4-5: the detached confidences, then credit for the whole batch.
# ============================================================================================


def warmup(value: float, step: int, warmup_steps: int, shape: str) -> float:
    """alpha or kappa at `step` (from 0) of its warm-up over W = warmup_steps steps (W = 0: none).

    tab:hyper gives "Warmup for alpha and kappa: 30 steps" without a shape (warmup_shape):
    "linear" is value * min(1, (step + 1) / W), 1/W of the value at step 0 and all of it from
    step W - 1; "linear_from_zero" is value * min(1, step / W), 0 at step 0 and all of it from
    step W (transformers' and verl's learning-rate warm-up).

    >>> [warmup(1.0, s, 4, "linear") for s in range(5)], [warmup(1.0, s, 4, "linear_from_zero") for s in range(5)]
    ([0.25, 0.5, 0.75, 1.0, 1.0], [0.0, 0.25, 0.5, 0.75, 1.0])
    """
    if shape not in ("linear", "linear_from_zero"):
        raise ValueError(f"unknown warm-up shape {shape!r}; expected linear or linear_from_zero")
    if warmup_steps <= 0:
        return value
    return value * min(1.0, (step + (shape == "linear")) / warmup_steps)


def engine_confidences(engine, rollouts: list[ro.Rollout], plan: ConfidencePlan, policy: Policy) -> dict:
    """Step 4 by the engine (credit_confidence=engine), after generation and before it sleeps: each
    model read credit needs ({name: c [N]}, NaN where no slot) from the engine's log-probs of the
    read's probes at each slot. It holds the trainer's weights and each rollout in its prefix cache."""
    c = {}
    for name in plan.model_reads:
        read = plan.model_read if name == "model" else plan.read
        cut = rollouts if name == "model" else ro.at_slot(policy.tokenizer, rollouts)  # "pass": tab:sw_baseline
        probes = [[policy.token_id(token) for token in probe] for probe in read.probes]
        c[name] = read.from_logprobs(probe_logprobs(engine, ro.slot_contexts(cut), probes)).float()  # [N]
    return c


def detached_confidences(learner: Learner, step: Step) -> tuple[Confidences, dict[str, torch.Tensor]]:
    """What credit reads ([N] each, NaN where none), as plan.rewards_read and weights_read say, and
    the model reads it took ({name: c [N]}): the engine's where the step holds them (the loop's,
    credit_confidence=engine), else the trainer's no-grad passes."""
    policy, cfg, plan = learner.policy, learner.cfg, learner.plan
    if step.engine_reads is not None:
        taken = {name: step.engine_reads[name] for name in plan.model_reads}
    else:  # credit_confidence=trainer: no-grad passes of the training batch, or of the rollouts cut at the slot
        budget, packed = cfg.micro_batch_tokens, cfg.pack_sequences
        passes = {
            "model": lambda: pol.confidences(policy, step.batch, step.micro, packed, plan.model_read),
            "pass": lambda: pol.slot_confidences(policy, step.rollouts, plan.read, budget, packed),  # tab:sw_baseline
        }
        taken = {name: passes[name]() for name in plan.model_reads}
    reads = {**taken, "report": step.outcomes.reported}
    return Confidences(rewards=reads[plan.rewards_read], weights=reads[plan.weights_read]), taken


# ============================================================================================
# Step 6: the update, the same for every method and micro-batch.
# ============================================================================================


def make_optimizer(model, cfg: Config, device_type: str) -> torch.optim.AdamW:
    """AdamW with tab:hyper's settings, in torch's fused kernel where config.fuses_adam says
    (adam_fused=auto: on CUDA). Its state is the same either way, so a checkpoint of one
    resumes in the other."""
    fused = {"fused": True} if config.fuses_adam(cfg, device_type) else {}
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],  # under LoRA: the adapters and reserved rows
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        **fused,
    )


@dataclass
class Learner:
    """What the update reads and changes from step to step."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    cfg: Config
    plan: ConfidencePlan | None = None  # None: confidence.plan(cfg)
    reference: Policy | None = None  # the frozen starting model where a loss term needs it (LoRA: adapters off)

    def __post_init__(self):
        self.plan = self.plan or confidence.plan(self.cfg)


@dataclass
class Step:
    """One step's context, named once (make_step): its batch and micro-batches, its outcomes, the
    denominators of its batch means, the loss terms with their coefficients, and its credit."""

    index: int  # from 0: the warm-ups read it
    batch: Batch
    micro: list[list[int]]  # row indices of each micro-batch (packing.micro_batches)
    outcomes: Outcomes
    rollouts: list | None  # what a baseline's no-grad pass for eq:sw's weights reads (tab:sw_baseline)
    counts: dict[str, float]  # {"rows": N, "valid": |V|}: the batch means' denominators
    terms: list[tuple[methods.LossTerm, float]]  # the run's loss terms and their coefficients now
    kappa: float  # eq:sw's, after its warm-up
    engine_reads: dict | None  # {name: c [N]}: the engine's model reads (engine_confidences); None: the trainer reads
    credit: Credit | None = None  # step 5 (train_step)


def coefficient(term: methods.LossTerm, cfg: Config, step: int) -> float:
    """A loss term's coefficient at `step`: its config value, warmed up where it says so (alpha)."""
    value = methods.base_coefficient(term, cfg)
    return warmup(value, step, cfg.warmup_steps, cfg.warmup_shape) if term.warms_up else value


def make_step(
    cfg: Config,
    index: int,
    batch: Batch,
    outcomes: Outcomes,
    rollouts: list | None = None,
    counts: dict[str, float] | None = None,
    engine_reads: dict | None = None,
) -> Step:
    """The context of step `index` on a batch. counts: the denominators of the batch means of the
    loss terms, {"rows": N, "valid": |V|}; by default this batch's. Under data parallelism
    gradients are averaged over ranks, so the loop passes the global counts / world size.
    engine_reads: engine_confidences' (credit_confidence=engine); None: a no-grad pass reads c."""
    lengths = batch.attention_mask.sum(dim=1).tolist()
    micro = packing.micro_batches(lengths, cfg.micro_batch_tokens, cfg.group_size, packed=cfg.pack_sequences)
    counts = counts or {"rows": float(len(batch)), "valid": float(outcomes.valid.sum())}
    terms = [(term, coefficient(term, cfg, index)) for term in methods.loss_terms(cfg)]
    kappa = warmup(cfg.kappa, index, cfg.warmup_steps, cfg.warmup_shape)
    return Step(index, batch, micro, outcomes, rollouts, counts, terms, kappa, engine_reads)


@dataclass
class Update:
    """What one update reports besides the new weights."""

    terms: dict[str, float]  # each loss term's batch mean, before its coefficient
    grad_norm: float  # before clipping
    completion_logp: list  # [N] of [completion tokens]: the trainer's log-probs (engine/trainer agreement)
    conf: torch.Tensor | None  # [N] the c the update's forward computed, detached (NaN: no slot); None: no term read it


def term_inputs(learner: Learner, step: Step, rows: list[int], mb: Batch, fwd: pol.Forward) -> methods.TermInputs:
    """What the loss terms read on the micro-batch `rows` (mb), on the forward's device: c and
    the reference's log-probs only where a term of the run needs them."""
    needs = set().union(*(term.needs for term, _ in step.terms))
    dev = fwd.logp.device
    ref_logp = None
    if "reference" in needs:
        off = lora.adapters_off(learner.policy.model) if learner.reference is None else contextlib.nullcontext()
        with torch.no_grad(), off:
            ref_logp = pol.forward(learner.reference or learner.policy, mb, packed=learner.cfg.pack_sequences).logp
    return methods.TermInputs(
        logp=fwd.logp,
        conf=pol.model_confidence(fwd, learner.plan.model_read) if "confidence" in needs else None,
        ref_logp=ref_logp,
        credit=Credit(*(packing.to_device(value, dev) for value in step.credit.select(rows))),
        completion=packing.to_device(mb.completion_mask, dev),
        ans_mask=packing.to_device(mb.ans_mask, dev),
        conf_mask=packing.to_device(mb.conf_mask, dev),
        valid=packing.to_device(step.outcomes.valid[rows], dev),
    )


def update(learner: Learner, step: Step) -> Update:
    """Forward, the loss terms, backward per micro-batch; then one optimizer step.

    Each term is a batch mean over its rows (all, or V): a micro-batch's mean is weighted by its
    share of step.counts. A term over V with |V| = 0 contributes a zero."""
    policy, cfg = learner.policy, learner.cfg
    # Statistics stay on the device until the last backward: reading one back after each
    # backward would stall the GPU before every micro-batch.
    values, logp_of = [], []  # [[term value x share]], [(rows, logp [n_mb, L-1], completion mask)]
    conf_of = []  # [(rows, c [n_mb])]: the forward's c, detached, where a term read it
    policy.model.train()
    if learner.reference is not None:
        parallel.gather_root(learner.reference.model)
    for rows in step.micro:
        mb = step.batch.select(rows)
        fwd = pol.forward(policy, mb, packed=cfg.pack_sequences, detach_readout=learner.plan.detach_readout)
        inputs = term_inputs(learner, step, rows, mb, fwd)
        count = {"rows": float(len(rows)), "valid": float(step.outcomes.valid[rows].sum())}
        # each term's micro-batch mean, weighted by the micro-batch's share of its batch mean
        shared = [
            term.loss(inputs, cfg) * (count[term.over] / (step.counts[term.over] or 1.0)) for term, _ in step.terms
        ]
        sum(coef * value for (_, coef), value in zip(step.terms, shared)).backward()
        values.append(torch.stack([value.detach() for value in shared]))
        logp_of.append((rows, fwd.logp.detach(), mb.completion_mask))
        if inputs.conf is not None:
            conf_of.append((rows, torch.where(fwd.has_slot, inputs.conf.detach(), float("nan"))))
    if learner.reference is not None:
        parallel.release_root(learner.reference.model)

    totals = torch.stack(values).sum(dim=0).tolist()  # host sync: after the last backward
    completion_logp = runlog.rows_logp(logp_of, len(step.batch))  # [N] the trainer's log-probs of each row
    conf = runlog.rows_conf(conf_of, len(step.batch)) if conf_of else None  # [N] the update's c
    grad_norm = parallel.clip_gradients(policy.model, cfg.max_grad_norm)
    learner.optimizer.step()
    learner.optimizer.zero_grad(set_to_none=True)
    terms = {term.name: value for (term, _), value in zip(step.terms, totals)}
    return Update(terms=terms, grad_norm=grad_norm, completion_logp=completion_logp, conf=conf)


# ============================================================================================
# Steps 4-6 together: what the loop runs on a step's batch.
# ============================================================================================


def train_step(learner: Learner, step: Step) -> StepStats:
    """Steps 4-6 on a step's batch: the detached confidences, credit, the update. Returns the
    step's statistics."""
    cfg, plan, out = learner.cfg, learner.plan, step.outcomes
    # 4. what credit reads, detached
    conf, taken = detached_confidences(learner, step)
    c_model = taken.get("model")  # [N] the model's c credit read, where it read one
    # 5. credit, once, for the whole batch
    step.credit = methods.credit(out.correct, out.fmt, conf, cfg, step.kappa, truncated=out.truncated)
    # 6. the update
    done = update(learner, step)
    report = plan.record == "report"  # the confidence a step logs: a baseline's report, or the model's c
    by_engine = step.engine_reads is not None  # the trainer's c: its pass, or else the update's forward
    c_engine, c_trainer = (c_model, done.conf) if by_engine else (None, c_model)
    lengths = step.batch.attention_mask.sum(dim=1).tolist()  # [N] tokens of each row
    return StepStats(
        terms={name: done.terms.get(name) for name in methods.term_names(cfg)},  # None: left out at coefficient 0
        coefs={term.name: coef for term, coef in step.terms},
        alpha=warmup(cfg.alpha, step.index, cfg.warmup_steps, cfg.warmup_shape),
        kappa=step.kappa,
        grad_norm=done.grad_norm,
        pad_fraction=0.0 if cfg.pack_sequences else packing.pad_fraction(lengths, step.micro),
        micro_batches=len(step.micro),
        readout_pass_rows=0 if by_engine else len(step.batch) * len(taken),
        credit=step.credit,
        conf=out.reported.float() if report else c_model,
        conf_valid=~torch.isnan(out.reported) if report else out.valid,
        completion_logp=done.completion_logp,
        conf_engine=runlog.rows_or_nan(c_engine, len(step.batch)),
        conf_trainer=runlog.rows_or_nan(c_trainer, len(step.batch)),
    )


# ============================================================================================
# The loop.
# ============================================================================================


def train(cfg: Config) -> Path:
    """Run (or resume) a training run; returns the run directory.

    One process with no launcher, or one rank of a torchrun job (infra/parallel.py): every rank
    runs this function; rank 0 alone writes the run directory's files."""
    run = setup(cfg)
    if run.engine is None:  # resume=auto on a finished run
        parallel.main_print(
            run.world, f"[credo] {run.dir} is complete ({run.start_step} of {run.total_steps} steps): nothing to do"
        )
        return run.dir
    world, policy, engine, plan = run.world, run.policy, run.engine, run.plan
    bar = tqdm(
        range(run.start_step, run.total_steps),
        initial=run.start_step,
        total=run.total_steps,
        desc="credo",
        dynamic_ncols=True,
        disable=not world.is_main,
    )
    stop = None
    # SIGTERM/SIGINT stop the loop after a step; the handlers and the loggers close on any exit
    with (
        PreemptionGuard() as guard,
        runlog.RunLog(run.dir, world, cfg, resumed_at=run.start_step if run.resumed else None) as log,
    ):
        for step in bar:
            timings = {}
            # 1-2. rollouts and their segments: this rank's whole groups of the step's questions
            with runlog.timed(timings, "rollout"):
                step_idx = run.stream.take(run.questions_per_step)  # the same on every rank
                q_idx = parallel.rank_slice(step_idx, world)
                questions, prompts = [run.rows[i] for i in q_idx], [run.prompts[i] for i in q_idx]
                rollouts = make_rollouts(
                    engine, policy.tokenizer, questions, prompts, cfg, plan, step, seed=world.rank_seed(cfg.seed)
                )
                # 4. by the engine (credit_confidence=engine): c at each slot, from its prefix cache
                by_engine = (
                    engine_confidences(engine, rollouts, plan, policy) if cfg.credit_confidence == "engine" else None
                )
                engine.sleep()  # CUDA: free the GPU for the update

            # 3. outcomes: a_i, F_i, whether the slot was reached, reports sampled as text
            with runlog.timed(timings, "verify"):
                out = outcomes(rollouts, questions, cfg, plan, policy.tokenizer)

            # 4-6. the detached confidences, credit for the whole batch, the update. Gradients are
            # averaged over ranks, so the batch means take the global counts / W.
            with runlog.timed(timings, "train"):
                batch = pol.training_batch(rollouts, policy.tokenizer, plan)
                counts = parallel.all_reduce({"rows": len(rollouts), "valid": float(out.valid.sum())}, world)
                counts = {key: value / world.world_size for key, value in counts.items()}
                parallel.gather_root(policy.model)
                stats = train_step(run.learner, make_step(cfg, step, batch, out, rollouts, counts, by_engine))
                logp_gap = runlog.engine_logprob_gap(rollouts, stats.completion_logp, world)

            # 7. weights into the engine
            with runlog.timed(timings, "sync"):
                engine.push_weights(policy.model)

            ids, n_tokens = [run.rows[i]["id"] for i in step_idx], float(batch.attention_mask.sum())
            runlog.show(bar, log.step(step, ids, rollouts, out, stats, logp_gap, timings, n_tokens))  # rank 0
            stop = guard.requested(world)  # collective: every rank agrees
            if (step + 1) % cfg.save_every == 0 or step + 1 == run.total_steps or stop:
                ckpt = save_checkpoint(run.dir, step + 1, policy, run.learner.optimizer, run.stream.cursor, cfg, world)
            if stop:
                break
    engine.close()
    if stop:
        parallel.main_print(
            world,
            f"[credo] {signal.Signals(stop).name}: stopped after step {step + 1} of {run.total_steps}; "
            f"checkpoint {ckpt}. Continue with the same command and resume=auto.",
            flush=True,
        )
        raise Preempted(128 + stop)
    return run.dir


# ============================================================================================
# Setup: everything around the step.
# ============================================================================================


@dataclass
class Run:
    """What `setup` prepares for the loop."""

    world: parallel.World
    plan: ConfidencePlan
    dir: Path  # runs/<name>
    policy: Policy
    engine: object | None  # engine.VLLMEngine or engine.HFEngine; None: the run is complete
    learner: Learner | None  # the policy, its optimizer and any reference model; None: the run is complete
    rows: list[dict]  # the training problems that fit the prompt budget
    prompts: list[list[int]]  # their prompt ids
    stream: problems.QuestionStream
    questions_per_step: int  # over all ranks
    total_steps: int
    start_step: int
    resumed: bool


def setup(cfg: Config) -> Run:
    """The world, the run directory, the policy (memory fit, compile), the problems, the engine,
    the sharded model and its optimizer, and the restored state of a resumed run.

    The engine is built before any state is restored: vLLM re-seeds the global RNGs on
    start-up. Under torchrun each rank has its own (TP = 1), built from the full model before it
    is sharded; the checkpoint is loaded into host memory first (parallel.World.load_device)."""
    world = parallel.init_world()
    parallel.check_world(cfg, world)
    parallel.main_print(world, f"[credo] world size {world.world_size}", flush=True)
    plan = confidence.plan(cfg)
    run_dir = config.run_dir_of(cfg)
    resume = resume_point(cfg, run_dir)  # None: a fresh run (refused where a run already is)
    parallel.barrier(world)  # every rank has looked before rank 0 clears anything
    if world.is_main:
        if resume is None:
            clear_run(run_dir)  # overwrite=true, or what resume=auto found no checkpoint of
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.as_dict(cfg), sort_keys=False))
    parallel.barrier(world)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    policy = pol.load_policy(
        str(resume or cfg.model), world.load_device, pol.compute_dtype(cfg), cfg.temperature, quantize=cfg.lora_quant
    )
    policy.model.config.use_cache = False
    lora.for_run(policy.model, cfg, (policy.high_id, policy.low_id), policy.dtype)  # lora_rank > 0: adapters/lora.py
    checkpointing, why = memfit.decide_checkpointing(
        cfg, memfit.shape_of(policy.model.config.to_dict()), world.world_size, parallel.gpu_memory_gib(world)
    )
    if checkpointing:
        parallel.enable_activation_checkpointing(policy.model)
    if why:
        parallel.main_print(world, f"[credo] {why}", flush=True)
    if config.compiles_layers(cfg, world.device.type):
        pol.compile_update(policy)  # compiles at the first update (tens of seconds), then fused kernels
    rows = problems.load_rows(cfg.train_data, cfg.domain)
    rows, prompts = problems.training_problems(rows, cfg, plan.prompt, policy.tokenizer, announce=world.is_main)
    stream = problems.QuestionStream(len(rows), cfg.seed)
    per_step = config.questions_per_step(cfg)
    total_steps = cfg.max_steps if cfg.max_steps is not None else cfg.epochs * len(rows) // per_step

    run = Run(
        world, plan, run_dir, policy, None, None, rows, prompts, stream, per_step, total_steps, 0, resume is not None
    )
    if resume and checkpoint_step(resume) >= total_steps:
        run.start_step = checkpoint_step(resume)
        return run  # complete: no engine, nothing to train
    engine_dir = run_dir if not world.distributed else run_dir / "engine" / f"rank_{world.rank:05d}"
    run.engine = make_engine(
        cfg, plan, policy.model, policy.tokenizer, str(resume or cfg.model), engine_dir, policy.dtype
    )
    policy.model = parallel.shard_model(policy.model, world, policy.dtype)
    run.learner = Learner(policy, make_optimizer(policy.model, cfg, world.device.type), cfg, plan)
    if methods.needs_reference(cfg) and not lora.applied(policy.model):
        run.learner.reference = load_reference(cfg, world, policy)
    if resume:
        run.start_step, stream.cursor = restore_state(resume, run.learner.optimizer, policy.model, world)
        parallel.main_print(world, f"[credo] resumed from step {run.start_step} of {total_steps}: {resume}", flush=True)
    return run


def load_reference(cfg: Config, world: parallel.World, policy: Policy) -> Policy:
    """The frozen reference of a KL term: the run's starting model (cfg.model, also on resume),
    with the reserved tokens as the policy got them, its weights in the policy's compute dtype
    (nothing trains them), no gradients, sharded like the policy."""
    reference = pol.load_policy(str(cfg.model), world.load_device, policy.dtype, cfg.temperature, policy.dtype)
    reference.model.requires_grad_(False)
    reference.model.eval()
    reference.model = parallel.shard_model(reference.model, world, policy.dtype)
    return reference


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    try:  # bad input: one line naming the problem (a traceback with --debug)
        if argv[0] == "--help-config":
            print(config.help_text())
            return
        dry_run = "--dry-run" in argv
        args = [a for a in argv if a != "--dry-run"]
        cfg = config.load_config(args[0], args[1:])
        resume_point(cfg, config.run_dir_of(cfg))  # a run already there: refused unless resumed or overwritten
        if not cfg.resume:
            config.check_model_source(str(cfg.model))
    except config.INPUT_ERRORS as error:
        if debug:
            raise
        sys.exit(f"credo: {config.one_line(error)}")
    if dry_run:
        print(yaml.safe_dump(config.as_dict(cfg), sort_keys=False), end="")
        print(f"# run directory: {config.run_dir_of(cfg)}")
        return
    world = parallel.init_world()
    try:
        run_dir = train(cfg)
    except Preempted:
        parallel.shutdown(world)  # every rank stopped at the same step, after the checkpoint
        raise
    except KeyboardInterrupt:  # Ctrl-C outside the loop's guard (loading, engine start-up), or a second one in it
        parallel.shutdown(world, wait_for_peers=False)
        print(
            f"credo: interrupted (Ctrl-C); the same command with resume=auto continues from the last checkpoint "
            f"under {config.run_dir_of(cfg)}, if there is one",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(128 + signal.SIGINT) from None
    except BaseException:
        parallel.shutdown(world, wait_for_peers=False)
        raise
    parallel.shutdown(world)
    parallel.main_print(world, f"[credo] run written to {run_dir}")


if __name__ == "__main__":
    main()
