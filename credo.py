"""CREDO training loop: RLVR (GRPO) with a confidence read out of two reserved tokens.

    python credo.py tiny max_steps=2            # or: bash run.sh tiny max_steps=2
    python credo.py configs/math.yaml seed=44
    python credo.py --help-config               # every key: default, source in the paper, help

One step, as in section 3 of the paper (equations by their labels):

  1. rollouts   B questions x G samples from the engine (vLLM), stopped at the slot
  2. segments   answer / analysis / slot of each completion, found on token ids
  3. outcomes   a_i by math-verify in killable workers (code: the sandbox), F_i, the slot
  4. forward    ONE pass over prompt+completion: per-token log-probs and
                z_H - z_L at the slot (`eq:readout`), without [N, T, V] fp32 logits
  5. credit     r^ans, r^conf (`eq:rewards3`) -> group-standardised A^ans, A^conf;
                discrepancy weights w (`eq:sw`) from the detached readout;
                per-token advantages (`eq:total`)
  6. update     clipped objective (`eq:grpo`) + alpha * L_cal (`eq:calloss`),
                alpha and kappa warmed up linearly; AdamW with accumulation
  7. sync       weights pushed into the engine in memory; prefix cache reset

The baselines (GRPO, RLCR, DCPO on the verbalized channel) and the ablations are the same
loop with other config values: each method is one rewards function in methods.py's registry,
and `config.confidence_plan` derives once, from what the method reads, what its confidence
is and who reads it (docs/forking.md).

Where things live: schema.py and config.py (the typed Config, the confidence plan), sampling.py
(steps 1-3), methods.py (the rewards and the shared credit), policy.py (model, batches, THE
forward, every confidence read), losses.py (the equations), rollout.py (prompts, segments),
engine.py (generation), verifier.py (grading), parallel.py (torchrun, FSDP2), checkpoint.py
(resume, preemption), runlog.py (what a step writes). This file holds the update and the loop.

Simplifications, on purpose (read them before forking):
  * One optimizer step per rollout batch, so the update is on-policy: the
    "old" log-probs of `eq:grpo` are the detached current ones (rho = 1), and
    the clip only matters if you add inner epochs.
  * No KL term and no reference model (the paper's KL coefficient is 0).
  * Advantages need the readout of every member of a group. Micro-batches are
    cut by tokens (micro_batch_tokens) and hold whole groups, so the readouts
    come from the same forward that trains; only a group too long for one
    micro-batch gets a no-grad readout pass over its rows first.
  * One process per GPU, data parallel only (parallel.py: torchrun, FSDP2, a colocated
    TP = 1 engine per rank, DCP checkpoints; `NPROC=8 bash run.sh math`). With no
    launcher it is one process with no process group, as before.
"""

from __future__ import annotations

import random
import signal
import sys
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm import tqdm

import config
import data
import losses
import memfit
import parallel
import policy as pol
import runlog
import sampling
import tables
from checkpoint import (
    Preempted,
    PreemptionGuard,
    checkpoint_step,
    clear_run,
    restore_state,
    resume_point,
    save_checkpoint,
)
from config import ConfidencePlan
from engine import make_engine
from methods import ConfidenceReads, Credit, confidence_reads, credit
from policy import Batch, Policy
from runlog import StepStats
from schema import Config

# ============================================================================================
# Step 5: rewards, targets, advantages (per whole groups).
# ============================================================================================


def warmup(value: float, step: int, warmup_steps: int) -> float:
    """Linear warm-up: value * (step + 1) / warmup_steps for the first warmup_steps steps."""
    return value * min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else value


# ============================================================================================
# Step 6: the update.
# ============================================================================================


def make_optimizer(model, cfg: Config, device_type: str) -> torch.optim.AdamW:
    """AdamW with tab:hyper's settings, in torch's fused kernel where config.fuses_adam says
    (adam_fused=auto: on CUDA). Its state is the same either way, so a checkpoint of one
    resumes in the other."""
    fused = {"fused": True} if config.fuses_adam(cfg, device_type) else {}
    return torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        **fused,
    )


def confidence_loss(
    fwd: pol.Forward,
    conf: torch.Tensor,
    target: torch.Tensor,
    correct: torch.Tensor,
    valid: torch.Tensor,
    plan: ConfidencePlan,
) -> torch.Tensor:
    """The term alpha multiplies: L_cal (eq:calloss), or the auxiliary head's BCE (conf_train=head)."""
    if plan.cal_loss == "head":
        return losses.auxiliary_head_loss(fwd.z_diff, correct, valid)
    return losses.calibration_loss(conf, target, valid)


def group_credit(
    rows: list[int],
    c_model: torch.Tensor | None,
    out: sampling.Outcomes,
    reads: ConfidenceReads,
    cfg: Config,
    kappa: float,
) -> Credit:
    """credit() for the whole groups `rows`; c_model: [len(rows)] their detached model c,
    wherever `reads` leaves it to the model."""
    if reads.rewards is not None:
        conf, conf_valid = reads.rewards[rows], reads.rewards_valid[rows]
    else:
        conf, conf_valid = c_model, out.valid[rows]
    if reads.weights is not None:
        w_conf, w_valid = reads.weights[rows], reads.weights_valid[rows]
    else:
        w_conf, w_valid = c_model, out.valid[rows]
    return credit(out.correct[rows], out.fmt[rows], conf, conf_valid, cfg, kappa, w_conf, w_valid)


def split_group_credit(
    policy: Policy,
    batch: Batch,
    micro: list[list[int]],
    whole: list[bool],
    out: sampling.Outcomes,
    reads: ConfidenceReads,
    cfg: Config,
    plan: ConfidencePlan,
    kappa: float,
) -> Credit:
    """Credit of every row whose micro-batch does not hold whole groups, [N] (0 elsewhere).

    Credit needs every group member's confidence. A group placed whole in a micro-batch gets
    its model c from that micro-batch's training forward; a group too long for one micro-batch
    (its rows split over several) gets it here, from a no-grad pass over its rows first.
    Where credit reads no model c (reports sampled as text), every row is credited here."""
    n = len(batch)
    if not plan.reads_model:
        return group_credit(list(range(n)), None, out, reads, cfg, kappa)
    c_model = torch.zeros(n)  # [N]
    with torch.no_grad():
        for rows in (rows for rows, is_whole in zip(micro, whole) if not is_whole):
            fwd = pol.forward(
                policy,
                batch.select(rows),
                packed=cfg.pack_sequences,
                detach_readout=plan.cal_loss == "head",
                logprobs=False,
            )
            c_model[rows] = pol.model_confidence(fwd).float().cpu()
    split = sorted(row for rows, is_whole in zip(micro, whole) if not is_whole for row in rows)
    part = group_credit(split, c_model[split], out, reads, cfg, kappa)
    index = torch.tensor(split)
    return Credit(*(torch.zeros(n).index_copy(0, index, value.float()) for value in part))


def train_on_batch(
    policy: Policy,
    optimizer,
    batch: Batch,
    out: sampling.Outcomes,
    cfg: Config,
    plan: ConfidencePlan,
    step: int,
    n_total: float | None = None,
    n_valid_total: float | None = None,
) -> StepStats:
    """Forward/backward over micro-batches, one optimizer step. Returns the step's statistics.

    out.valid: the rollouts of L_cal; out.reported: what the rewards read instead of the
    model's c (plan.rewards_read); out.weight_conf: eq:sw's confidence when a no-grad pass
    gave it (plan.weights_read). n_total, n_valid_total: the denominators of the batch means
    of J and L_cal; by default this call's N and |V|. Under data parallelism gradients are
    averaged over ranks, so a caller passes the global counts divided by the world size."""
    n, group = len(batch), cfg.group_size
    alpha, kappa = warmup(cfg.alpha, step, cfg.warmup_steps), warmup(cfg.kappa, step, cfg.warmup_steps)
    n_norm = float(n_total) if n_total is not None else float(n)
    # |V| = 0 leaves L_cal a zero; a passed-in share |V|/W may be below 1 and is used as it is
    n_valid = (
        float(n_valid_total) if n_valid_total is not None and n_valid_total > 0 else max(float(out.valid.sum()), 1.0)
    )
    head, packed = plan.cal_loss == "head", cfg.pack_sequences
    reads = confidence_reads(out.reported, out.weight_conf, plan.weights_read)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    micro = pol.micro_batches(lengths, cfg.micro_batch_tokens, group, whole_groups=plan.reads_model, packed=packed)
    whole = [plan.reads_model and pol.holds_whole_groups(rows, group) for rows in micro]  # credited from their forward
    shared = split_group_credit(policy, batch, micro, whole, out, reads, cfg, plan, kappa) if not all(whole) else None

    c_model = torch.zeros(n)  # [N] the model's c, detached
    step_credit = Credit.zeros(n)  # [N] each
    # Statistics stay on the device until the last backward: reading one back after each
    # backward would stall the GPU before every micro-batch (device: copy with .to(dev)).
    loss_terms, logp_of = [], []  # ((pg, cal), rows, |V| rows); (rows, logp [n_mb, L-1], mask, c unless credited)
    policy.model.train()
    for rows, is_whole in zip(micro, whole):
        mb = batch.select(rows)
        fwd = pol.forward(policy, mb, packed=packed, detach_readout=head)
        conf = pol.model_confidence(fwd)  # [n_mb], with grad
        if is_whole:  # credit needs the group's c: the one host sync of a micro-batch, between forward and backward
            c_model[rows] = conf.detach().float().cpu()
            mb_credit = group_credit(rows, c_model[rows], out, reads, cfg, kappa)
        else:
            mb_credit = shared.select(rows)
        dev = fwd.logp.device
        adv_tok = losses.token_advantages(
            *(
                pol.to_device(t, dev)
                for t in (mb_credit.adv_ans, mb_credit.adv_conf, mb_credit.w, mb.ans_mask, mb.conf_mask)
            )
        )  # [n_mb, L-1]
        pg = losses.clipped_policy_loss(
            fwd.logp, fwd.logp.detach(), adv_tok, pol.to_device(mb.completion_mask, dev), cfg.clip_eps
        )
        cal = confidence_loss(
            fwd, conf, *(pol.to_device(t, dev) for t in (mb_credit.target, out.correct[rows], out.valid[rows])), plan
        )
        # Both terms are means over the whole rollout batch (sequences for J, V for L_cal).
        n_valid_mb = int(out.valid[rows].sum())
        loss = pg * len(rows) / n_norm + alpha * cal * n_valid_mb / n_valid
        loss.backward()
        loss_terms.append((torch.stack([pg.detach(), cal.detach()]), len(rows), n_valid_mb))
        logp_of.append((rows, fwd.logp.detach(), mb.completion_mask, None if is_whole else conf.detach()))
        step_credit.place(rows, mb_credit)

    loss_pg = loss_cal = 0.0
    for (pg, cal), (_, n_mb, n_valid_mb) in zip(
        torch.stack([terms for terms, _, _ in loss_terms]).tolist(), loss_terms
    ):
        loss_pg += pg * n_mb / n_norm  # the host sync of the step's losses, after every backward
        loss_cal += cal * n_valid_mb / n_valid
    completion_logp: list[torch.Tensor | None] = [None] * n  # per rollout, for the engine/trainer agreement metric
    for rows, logp, mask, conf in logp_of:
        for row, row_logp, row_mask in zip(rows, logp.cpu(), mask):
            completion_logp[row] = row_logp[row_mask]
        if conf is not None:
            c_model[rows] = conf.float().cpu()

    grad_norm = parallel.clip_gradients(policy.model, cfg.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if plan.record == "report":  # a baseline's confidence of record: its report
        conf_of_record, conf_valid = out.reported.float(), reads.rewards_valid
    else:
        conf_of_record, conf_valid = c_model, out.valid
    return StepStats(
        loss_pg=loss_pg,
        loss_cal=loss_cal,
        alpha=alpha,
        kappa=kappa,
        grad_norm=grad_norm,
        pad_fraction=0.0 if packed else pol.pad_fraction(lengths, micro),
        micro_batches=len(micro),
        readout_pass_rows=sum(len(rows) for rows, is_whole in zip(micro, whole) if plan.reads_model and not is_whole),
        credit=step_credit,
        conf=conf_of_record,
        conf_valid=conf_valid,
        completion_logp=completion_logp,
    )


# ============================================================================================
# The loop.
# ============================================================================================


def train(cfg: Config) -> Path:
    """Run (or resume) a training run; returns the run directory.

    One process with no launcher, or one rank of a torchrun job (parallel.py): every rank
    runs this function; rank 0 alone writes the run directory's files."""
    world = parallel.init_world()
    parallel.check_world(cfg, world)
    parallel.main_print(world, f"[credo] world size {world.world_size}", flush=True)
    plan = config.confidence_plan(cfg)
    run_dir = config.run_dir_of(cfg)
    resume = resume_point(cfg, run_dir)  # None: a fresh run (refused where a run already is)
    parallel.barrier(world)  # every rank has looked before rank 0 clears anything
    if world.is_main:
        if resume is None:
            clear_run(run_dir)  # overwrite=true, or what resume=auto found no checkpoint of
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.as_dict(cfg), sort_keys=False))
        data.prepare_on_first_use(cfg.train_data)  # the paper's split, downloaded on first use
    parallel.barrier(world)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    # Under torchrun the checkpoint is loaded into host memory and sharded onto the GPUs
    # after the engine has its copy (parallel.World.load_device).
    policy = pol.load_policy(str(resume or cfg.model), world.load_device, pol.compute_dtype(cfg), cfg.temperature)
    policy.model.config.use_cache = False
    checkpointing, why = memfit.decide_checkpointing(
        cfg, memfit.shape_of(policy.model.config.to_dict()), world.world_size, parallel.gpu_memory_gib(world)
    )
    if checkpointing:
        parallel.enable_activation_checkpointing(policy.model)
    if why:
        parallel.main_print(world, f"[credo] {why}", flush=True)
    if config.compiles_layers(cfg, world.device.type):
        pol.compile_update(policy)  # compiles at the first update (tens of seconds), then fused kernels
    rows = data.load_rows(cfg.train_data, cfg.domain)
    rows, prompts = sampling.training_problems(rows, cfg, plan, policy.tokenizer, announce=world.is_main)
    stream = sampling.QuestionStream(len(rows), cfg.seed)
    per_step = config.questions_per_step(cfg)  # the whole step's, over all ranks
    total_steps = cfg.max_steps if cfg.max_steps is not None else cfg.epochs * len(rows) // per_step

    if resume and checkpoint_step(resume) >= total_steps:  # resume=auto on a finished run
        parallel.main_print(
            world,
            f"[credo] {run_dir} is complete ({checkpoint_step(resume)} of {total_steps} steps): nothing to do",
            flush=True,
        )
        return run_dir

    # The engine starts from the same weights the trainer holds (reserved rows included).
    # It is built before any state is restored: vLLM re-seeds the global RNGs on start-up.
    # Each rank has its own (TP = 1), built from the full model before it is sharded.
    engine_dir = run_dir if not world.distributed else run_dir / "engine" / f"rank_{world.rank:05d}"
    engine = make_engine(cfg, plan, policy.model, policy.tokenizer, str(resume or cfg.model), engine_dir, policy.dtype)
    policy.model = parallel.shard_model(policy.model, world, policy.dtype)
    optimizer = make_optimizer(policy.model, cfg, world.device.type)
    start_step = 0
    if resume:
        start_step, stream.cursor = restore_state(resume, optimizer, policy.model, world)

    bar = tqdm(
        range(start_step, total_steps),
        initial=start_step,
        total=total_steps,
        desc="credo",
        dynamic_ncols=True,
        disable=not world.is_main,
    )
    stop = None
    # SIGTERM/SIGINT stop the loop after a step; the handlers and the loggers close on any exit
    with (
        PreemptionGuard() as guard,
        runlog.RunLog(run_dir, world, cfg, resumed_at=start_step if resume else None) as log,
    ):
        for step in bar:
            timings = {}
            # 1-2. rollouts and their segments: this rank's whole groups of the step's questions
            with runlog.timed(timings, "rollout"):
                step_idx = stream.take(per_step)  # the same on every rank
                q_idx = parallel.rank_slice(step_idx, world)
                questions = [rows[i] for i in q_idx]
                rollouts = sampling.make_rollouts(
                    engine,
                    policy.tokenizer,
                    questions,
                    [prompts[i] for i in q_idx],
                    cfg,
                    plan,
                    step,
                    seed=world.rank_seed(cfg.seed),
                )
                engine.sleep()  # CUDA: free the GPU for the update

            # 3. outcomes: a_i, F_i, whether the slot was reached, reports sampled as text
            with runlog.timed(timings, "verify"):
                out = sampling.outcomes(rollouts, questions, cfg, plan, policy.tokenizer)

            # 4-6. one forward per micro-batch, credit, update. Gradients are averaged over ranks,
            # so the batch means take the global counts / W (None: this call's own, one process).
            with runlog.timed(timings, "train"):
                batch = pol.training_batch(rollouts, policy.tokenizer, plan.teacher_digits, plan.samples_slot_token)
                counts = parallel.all_reduce({"n": len(rollouts), "valid": float(out.valid.sum())}, world)
                n_total, n_valid_total = (
                    (counts["n"] / world.world_size, counts["valid"] / world.world_size)
                    if world.distributed
                    else (None, None)
                )
                parallel.gather_root(policy.model)
                if plan.weights_read == "digit_pass":  # tab:sw_baseline
                    out.weight_conf = pol.digit_expectations(
                        policy, rollouts, cfg.micro_batch_tokens, cfg.pack_sequences
                    )
                stats = train_on_batch(
                    policy, optimizer, batch, out, cfg, plan, step, n_total=n_total, n_valid_total=n_valid_total
                )
                logp_gap = runlog.engine_logprob_gap(rollouts, stats.completion_logp, world)

            # 7. weights into the engine
            with runlog.timed(timings, "sync"):
                engine.push_weights(policy.model)

            record = log.step(
                step,
                [rows[i]["id"] for i in step_idx],
                rollouts,
                out,
                stats,
                logp_gap,
                timings,
                n_train_tokens=float(batch.attention_mask.sum()),
            )
            if record is not None:
                bar.set_postfix(
                    reward=f"{record['reward_ans']:.2f}",
                    acc=f"{record['acc']:.2f}",
                    c="-" if record["mean_c"] is None else f"{record['mean_c']:.2f}",
                )
            stop = guard.requested(world)  # collective: every rank agrees
            if (step + 1) % cfg.save_every == 0 or step + 1 == total_steps or stop:
                ckpt = save_checkpoint(run_dir, step + 1, policy, optimizer, stream.cursor, cfg, world)
            if stop:
                break
    engine.close()
    if stop:
        parallel.main_print(
            world,
            f"[credo] {signal.Signals(stop).name}: stopped after step {step + 1} of {total_steps}; "
            f"checkpoint {ckpt}. Continue with the same command and resume=auto.",
            flush=True,
        )
        raise Preempted(128 + stop)
    return run_dir


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
        if argv[0] == "--list":
            print(tables.list_configs())
            return
        if argv[0] == "--table":
            if len(argv) != 2:
                raise ValueError(f"usage: credo.py --table <name>; tables: {', '.join(tables.load_tables())}")
            print(tables.table_commands(argv[1]))
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
    except BaseException:
        parallel.shutdown(world, wait_for_peers=False)
        raise
    parallel.shutdown(world)
    parallel.main_print(world, f"[credo] run written to {run_dir}")


if __name__ == "__main__":
    main()
