"""What a run writes each step: one line of `metrics.jsonl` and, when asked, the step's
rollouts (text, a and the grader's verdict, c, rewards, advantages) under `rollouts/`; a step
whose grader failed on some rollouts says so on stderr.

Holds: the step's metrics from its rollouts, outcomes and update statistics (`step_metrics`),
the engine/trainer log-prob agreement, the phase timings (`timed`), and the writers. The calibration numbers come from
metrics.py, the one implementation the evaluation uses too. Does not hold: the loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import config
import metrics
import verifier
from infra import parallel
from methods import Credit
from schema import Config


@contextmanager
def timed(timings: dict, phase: str):
    """Add the wall time of the block to timings[phase] (the step's t_<phase> metric)."""
    t0 = time.perf_counter()
    yield
    timings[phase] = time.perf_counter() - t0


@dataclass
class StepStats:
    """What one update reports (runlog writes it): scalars, and per-rollout tensors [N]."""

    terms: dict  # each loss term's batch mean, before its coefficient; None: left out (coefficient 0)
    coefs: dict  # the coefficient of each term the step computed
    alpha: float  # alpha and kappa after their warm-up
    kappa: float
    grad_norm: float  # before clipping
    pad_fraction: float  # padded share of the micro-batches' token slots (0 when packed)
    micro_batches: int
    readout_pass_rows: int  # rows of the trainer's no-grad passes for credit (0: the engine read c)
    credit: Credit  # [N] each
    conf: torch.Tensor  # [N] the confidence of record: the model's c, or a baseline's report
    conf_valid: torch.Tensor  # [N] bool: conf exists
    completion_logp: list  # [N] of [completion tokens] the trainer's log-probs (None where absent)
    conf_engine: torch.Tensor  # [N] the model's c as the engine read it (NaN where it read none)
    conf_trainer: torch.Tensor  # [N] ... as the trainer computed it: its no-grad pass, or the update's forward

    def scalars(self) -> dict:
        """The step's scalars that ranks average: every computed term as loss_<name>, and the rest."""
        computed = {f"loss_{name}": value for name, value in self.terms.items() if value is not None}
        names = ("alpha", "kappa", "grad_norm", "pad_fraction", "micro_batches", "readout_pass_rows")
        return {**computed, **{name: getattr(self, name) for name in names}}

    def per_rollout(self) -> dict:
        sources = {"conf_engine": self.conf_engine, "conf_trainer": self.conf_trainer}
        return {"conf": self.conf, "conf_valid": self.conf_valid, **sources, **self.credit._asdict()}

    def merged(self, scalars: dict, per_rollout: dict) -> StepStats:
        """These statistics with `scalars` and `per_rollout` (as scalars() and per_rollout()
        name them) in place of their own: the step over every rank."""
        rows = dict(per_rollout)
        named = {key: rows.pop(key) for key in ("conf", "conf_valid", "conf_engine", "conf_trainer")}
        terms = {name: scalars.get(f"loss_{name}") for name in self.terms}
        others = {key: value for key, value in scalars.items() if not key.startswith("loss_")}
        return replace(self, **others, **named, terms=terms, credit=Credit(**rows))


def rows_conf(pieces: list, n: int) -> torch.Tensor:
    """[n] fp32 on the host: each row's c from the update's micro-batches `pieces`, (rows, c [n_mb])."""
    conf = torch.full((n,), float("nan"))
    for rows, c in pieces:
        conf[rows] = c.float().cpu()
    return conf


def rows_or_nan(values: torch.Tensor | None, n: int) -> torch.Tensor:
    """[n] fp32 `values`, or NaN everywhere where there are none."""
    return torch.full((n,), float("nan")) if values is None else values.float()


def engine_conf_gap(stats: StepStats) -> dict:
    """The engine's c against the trainer's over the rollouts that have both (credit_confidence=
    engine and a term that reads c): mean and largest |c_engine - c_trainer|; None where none has both."""
    both = ~torch.isnan(stats.conf_engine) & ~torch.isnan(stats.conf_trainer)
    gaps = (stats.conf_engine[both].double() - stats.conf_trainer[both].double()).abs()
    if not len(gaps):
        return {"engine_conf_gap": None, "engine_conf_gap_max": None}
    return {"engine_conf_gap": float(gaps.mean()), "engine_conf_gap_max": float(gaps.max())}


def step_metrics(rollouts, correct, verdicts, fmt, valid, stats, logp_gap, timings: dict, n_train_tokens: int) -> dict:
    """valid: the readout exists; the confidence metrics use the confidence of record
    (stats: credo.StepStats, over every rank); verdicts: the grader's (verifier.Verdict)."""
    reported = stats.conf_valid
    conf = stats.conf[reported]
    a_valid = correct[reported]
    completion_tokens = sum(len(r.completion_ids) for r in rollouts)
    return {
        "loss": sum(coef * stats.terms[name] for name, coef in stats.coefs.items()),
        # every listed term; null where its coefficient is 0 (never computed, not a 0 that was trained)
        **{f"loss_{name}": value for name, value in stats.terms.items()},
        "alpha": stats.alpha,
        "kappa": stats.kappa,
        "reward_ans": float(stats.credit.r_ans.mean()),
        "reward_conf": float(stats.credit.r_conf.mean()),
        "acc": float(correct.mean()),
        "grading_errors": sum(verdict.grading_error for verdict in verdicts),  # rollouts the grader failed on: a = 0
        "format_rate": float(fmt.mean()),
        "readout_rate": float(valid.float().mean()),
        "slot_misaligned": sum(r.segments.slot_misaligned for r in rollouts),
        "slot_repaired": sum(r.slot_repaired > 0 for r in rollouts),  # close_slot ended them at the tag
        "truncated_rate": sum(r.truncated for r in rollouts) / len(rollouts),
        "mean_c": float(conf.mean()) if len(conf) else None,
        "ece": metrics.ece(conf.double().numpy(), a_valid.numpy()) if len(conf) else None,
        "brier": metrics.brier(conf.double().numpy(), a_valid.numpy()) if len(conf) else None,
        "report_rate": float(reported.float().mean()),
        "w_std": float(stats.credit.w[reported].std(unbiased=False)) if len(conf) else None,
        "grad_norm": stats.grad_norm,
        "pad_fraction": stats.pad_fraction,
        "micro_batches": stats.micro_batches,
        "readout_pass_rows": stats.readout_pass_rows,
        "engine_logprob_gap": logp_gap,
        **engine_conf_gap(stats),
        "completion_len": completion_tokens / len(rollouts),
        "rollout_tok_s": completion_tokens / max(timings["rollout"], 1e-9),
        "train_tok_s": n_train_tokens / max(timings["train"], 1e-9),
        **{f"t_{k}": v for k, v in timings.items()},
    }


def show(bar, record: dict | None) -> None:
    """The step's answer reward, accuracy and mean c on the progress bar (None: not rank 0)."""
    if record is not None:
        mean_c = "-" if record["mean_c"] is None else f"{record['mean_c']:.2f}"
        bar.set_postfix(reward=f"{record['reward_ans']:.2f}", acc=f"{record['acc']:.2f}", c=mean_c)


def rows_logp(pieces: list, n: int) -> list:
    """[n] each row's log-probs of its completion tokens (a host tensor), from the update's
    micro-batches `pieces`: (rows, logp [n_mb, L-1] on the device, completion mask [n_mb, L-1])."""
    out: list[torch.Tensor | None] = [None] * n
    for rows, logp, mask in pieces:
        for row, row_logp, row_mask in zip(rows, logp.cpu(), mask):
            out[row] = row_logp[row_mask]
    return out


def engine_logprob_gap(
    rollouts, completion_logp: list[torch.Tensor], world: parallel.World | None = None
) -> float | None:
    """Mean |engine log-prob - trainer log-prob| over sampled completion tokens (of every rank;
    a tail close_slot wrote has neither): a weight-sync check (it grows if the engine samples
    from other weights than the trainer scores). Both are at the sampling temperature; the
    engine's also renormalise over what top-k / top-p kept, so with a truncation on the gap
    holds -log(kept mass of pi_T) besides float noise (docs/toy.md measures it)."""
    world = world or parallel.single_process()
    have = all(r.engine_logprobs for r in rollouts)
    gap_sum = tokens = 0.0
    if have:
        gaps = torch.cat([(lp - torch.tensor(r.engine_logprobs)).abs() for r, lp in zip(rollouts, completion_logp)])
        gap_sum, tokens = float(gaps.double().sum()), float(len(gaps))
    total = parallel.all_reduce({"missing": float(not have), "sum": gap_sum, "tokens": tokens}, world)
    if total["missing"] or not total["tokens"]:
        return None
    return total["sum"] / total["tokens"]


def write_rollouts(path: Path, rollouts, correct, verdicts, stats) -> None:
    with path.open("w") as f:
        for i, r in enumerate(rollouts):
            f.write(
                json.dumps(
                    {
                        "question_id": r.question_id,
                        "text": r.text,
                        "finish_reason": r.finish_reason,
                        "slot_repaired": r.slot_repaired > 0,
                        "a": float(correct[i]),
                        "verdict": verdicts[i].reason,  # why a is what it is (verifier.Verdict)
                        "c": float(stats.conf[i]) if stats.conf_valid[i] else None,
                        # the model's c by each source, where both exist (credo.train_step)
                        "c_engine": None if stats.conf_engine[i].isnan() else float(stats.conf_engine[i]),
                        "c_trainer": None if stats.conf_trainer[i].isnan() else float(stats.conf_trainer[i]),
                        "format": r.segments.fmt,
                        "t": float(stats.credit.target[i]),  # the confidence target (the `target` registry)
                        "r_ans": float(stats.credit.r_ans[i]),
                        "r_conf": float(stats.credit.r_conf[i]),
                        "w": float(stats.credit.w[i]),
                        "adv_ans": float(stats.credit.adv_ans[i]),
                        "adv_conf": float(stats.credit.adv_conf[i]),
                    }
                )
                + "\n"
            )


# ============================================================================================
# The loop.
# ============================================================================================


class RunLog:
    """The per-step record of a run, written by rank 0: metrics.jsonl (one JSON line per step),
    with save_rollouts rollouts/step_XXXXXX.jsonl, and the scalars to each other logger of
    report_to (TensorBoard under <run>/tensorboard, Weights & Biases under <run>/wandb)."""

    def __init__(self, run_dir: Path, world: parallel.World, cfg: Config, resumed_at: int | None = None):
        self.run_dir, self.world, self.save_rollouts = run_dir, world, cfg.save_rollouts
        self.metrics_path = run_dir / "metrics.jsonl"
        self.sinks = []
        if not world.is_main:
            return
        self.sinks = [
            open_sink(name, run_dir, cfg, resumed_at or 0) for name in config.reporters(cfg) if name != "jsonl"
        ]
        if (
            resumed_at is not None and self.metrics_path.exists()
        ):  # drop lines a longer, abandoned run wrote past the checkpoint
            kept = [
                line for line in self.metrics_path.read_text().splitlines() if json.loads(line)["step"] < resumed_at
            ]
            self.metrics_path.write_text("".join(line + "\n" for line in kept))
        if self.save_rollouts:
            (run_dir / "rollouts").mkdir(exist_ok=True)

    def step(
        self,
        step: int,
        question_ids: list[str],
        rollouts,
        out,
        stats,
        logp_gap: float | None,
        timings: dict,
        n_train_tokens: float,
    ) -> dict | None:
        """Reduce the step over all ranks (scalars averaged, timings maxed, per-rollout rows
        gathered on rank 0) and write it; returns the metrics line on rank 0, None elsewhere.
        Every rank must call it (it holds collectives)."""
        world = self.world
        timings = parallel.all_reduce(timings, world, "max")
        n_train_tokens = int(parallel.all_reduce({"n": n_train_tokens}, world)["n"])
        scalars = parallel.all_reduce(stats.scalars(), world, "mean")
        gathered = parallel.gather_on_main(
            (rollouts, out.correct, out.verdicts, out.fmt, out.valid, stats.per_rollout()), world
        )
        if not world.is_main:
            return None
        all_rollouts, all_correct, all_verdicts, all_fmt, all_valid, all_rows = (
            parallel.concat_rows(part) for part in zip(*gathered)
        )
        all_stats = stats.merged(scalars, all_rows)
        record = {
            "step": step,
            "world_size": world.world_size,
            "questions": question_ids,
            **step_metrics(
                all_rollouts,
                all_correct,
                all_verdicts,
                all_fmt,
                all_valid,
                all_stats,
                logp_gap,
                timings,
                n_train_tokens,
            ),
        }
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.save_rollouts:
            path = self.run_dir / "rollouts" / f"step_{step:06d}.jsonl"
            write_rollouts(path, all_rollouts, all_correct, all_verdicts, all_stats)
        failures = verifier.failure_summary(all_verdicts)
        if failures is not None:
            print(f"[credo] step {step}: {failures}", file=sys.stderr)
        scalars = {key: value for key, value in record.items() if type(value) in (int, float) and key != "step"}
        for sink in self.sinks:
            sink.log(scalars, step)
        return record

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc) -> None:
        for sink in self.sinks:
            sink.close()


# --- Other loggers of report_to: imported only when asked -----------------------------------


class TensorBoardSink:
    """Scalars as TensorBoard events under <run>/tensorboard (a resumed run purges the steps it redoes)."""

    def __init__(self, run_dir: Path, resumed_at: int):
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package: only when asked
        except ImportError as error:
            raise ValueError(
                f"report_to=tensorboard needs the tensorboard package (pip install tensorboard): {error}"
            ) from None
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resumed_at or None)

    def log(self, scalars: dict, step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars to Weights & Biases, one run per run directory (resumed in place); offline
    unless asked or logged in (wandb_mode: auto), so it never needs the network."""

    def __init__(self, run_dir: Path, cfg: Config):
        try:
            import wandb  # optional: only when asked
        except ImportError as error:
            raise ValueError(f"report_to=wandb needs the wandb package (pip install wandb): {error}") from None
        mode = cfg.wandb_mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        name = run_dir.name
        self.run = wandb.init(
            project=cfg.wandb_project,
            name=name,
            id=hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16],
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            config=config.as_dict(cfg),
        )

    def log(self, scalars: dict, step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


def open_sink(name: str, run_dir: Path, cfg: Config, resumed_at: int):
    """The logger `name` of report_to (config.REPORTERS, jsonl excepted)."""
    if name == "tensorboard":
        return TensorBoardSink(run_dir, resumed_at)
    if name == "wandb":
        return WandbSink(run_dir, cfg)
    raise ValueError(f"report_to: unknown logger {name!r}; choose from {config.REPORTERS}")
