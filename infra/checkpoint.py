"""Checkpoints of a run: what `runs/<name>/ckpt/step_N/` holds, how a run resumes from it,
and how a long run survives preemption.

    resume = resume_point(cfg, run_dir)          # resume=<ckpt> | auto | null; refuses to clobber a run
    ckpt = save_checkpoint(run_dir, step, policy, optimizer, cursor, cfg, world)
    step, cursor = restore_state(ckpt, optimizer, policy.model, world)
    with PreemptionGuard() as guard: ...         # SIGTERM / SIGINT: finish the step, checkpoint, exit

A checkpoint is HF safetensors weights + tokenizer (what eval.py and vLLM load), or for a LoRA
run PEFT's adapter files (adapters/lora.py), the model's config.json and the tokenizer; then the
resolved config, the step and data position, AdamW's state and every RNG stream, so that a resumed
run takes the same next step as a straight one. A checkpoint directory exists only once it
is complete (written under `.tmp`, then renamed). Does not hold: the sharded formats
themselves (infra/parallel.py: DCP), nor the choice of when to save (credo.py).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import torch
import yaml

from adapters import lora
from config import as_dict
from infra import parallel
from policy import Policy
from schema import Config


def save_checkpoint(
    run_dir: Path,
    step: int,
    policy: Policy,
    optimizer,
    data_cursor: int,
    cfg: Config,
    world: parallel.World | None = None,
) -> Path:
    """runs/<name>/ckpt/step_XXXXXX/ after `step` completed optimizer steps.

    Always: HF safetensors weights (a LoRA run: adapter_config.json and adapter_model.safetensors,
    which peft.PeftModel.from_pretrained loads on the base) + tokenizer (what eval.py loads), trainer_state.json
    (step, data position), config.yaml. One process: optimizer.pt and rng.pt. Under torchrun
    (every rank calls it): sharded/ holds the model and AdamW shards of every rank (DCP),
    rng/rank_XXXXX.pt each rank's RNG streams, and trainer_state.json the world size."""
    world = world or parallel.single_process()
    model = policy.model
    ckpt = run_dir / "ckpt" / f"step_{step:06d}"
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    if world.is_main:
        tmp.mkdir(parents=True, exist_ok=True)
    parallel.barrier(world)
    state = {"step": step, "data_cursor": data_cursor}
    if world.distributed:
        parallel.save_sharded(tmp / "sharded", model, optimizer)
        full_weights = parallel.full_state_dict_on_main(model, world)  # {} on ranks > 0
        parallel.rng_file(tmp, world).parent.mkdir(exist_ok=True)
        torch.save(parallel.rng_state(), parallel.rng_file(tmp, world))
        state["world_size"] = world.world_size
    else:
        full_weights = None
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(parallel.rng_state(), tmp / "rng.pt")
    if world.is_main:
        if lora.applied(model):
            ids = (policy.high_id, policy.low_id)
            lora.save_adapter(full_weights or model.state_dict(), tmp, model, cfg.model, ids)
            model.config.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp, state_dict=full_weights, safe_serialization=True)
        policy.tokenizer.save_pretrained(tmp)
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
        (tmp / "config.yaml").write_text(yaml.safe_dump(as_dict(cfg), sort_keys=False))
    parallel.barrier(world)
    if world.is_main:
        if ckpt.exists():
            shutil.rmtree(ckpt)
        tmp.rename(ckpt)  # a checkpoint directory exists only once it is complete
    parallel.barrier(world)
    return ckpt


def restore_state(ckpt: Path, optimizer, model=None, world: parallel.World | None = None) -> tuple[int, int]:
    """Load optimizer (and, under torchrun, the model shards) and RNG saved by save_checkpoint;
    returns (step, data cursor). The world size must be the checkpoint's."""
    world = world or parallel.single_process()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    written_by = state.get("world_size", 1)
    if written_by != world.world_size:
        raise ValueError(
            f"{ckpt} was written by {written_by} process(es) and this run has {world.world_size}: an exact "
            f"resume needs the same world size (per-rank RNG streams and rollout seeds); "
            f"launch with NPROC x NNODES = {written_by}"
        )
    if world.distributed:
        parallel.load_sharded(ckpt / "sharded", model, optimizer)
        parallel.set_rng_state(torch.load(parallel.rng_file(ckpt, world), weights_only=False))
    else:
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
        parallel.set_rng_state(torch.load(ckpt / "rng.pt", weights_only=False))
    return state["step"], state["data_cursor"]


def latest_checkpoint(run_dir: Path) -> Path:
    """The checkpoint of a run directory with the most optimizer steps."""
    steps = sorted((Path(run_dir) / "ckpt").glob("step_*[0-9]"))
    if not steps:
        raise FileNotFoundError(f"{run_dir} is a run directory without a finished checkpoint under ckpt/")
    return steps[-1]


def checkpoint_step(ckpt: Path) -> int:
    """The optimizer steps a checkpoint was written after."""
    return json.loads((Path(ckpt) / "trainer_state.json").read_text())["step"]


def run_in(run_dir: Path) -> str | None:
    """What a run directory already holds (logged steps, checkpoints), or None when it holds no run."""
    metrics = Path(run_dir) / "metrics.jsonl"
    steps = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    ckpts = sorted((Path(run_dir) / "ckpt").glob("step_*[0-9]"))
    if not steps and not ckpts:
        return None
    return f"{steps} logged steps" + (f", last checkpoint {ckpts[-1].name}" if ckpts else ", no checkpoint")


def resume_point(cfg: Config, run_dir: Path) -> Path | None:
    """The checkpoint a run continues from: resume=<ckpt dir>; resume=auto, the newest complete
    checkpoint of run_dir (None: start fresh); resume=null, None, and a run already in run_dir
    is refused (FileExistsError naming the ways out) unless overwrite=true."""
    if cfg.resume == "auto":
        ckpts = sorted((Path(run_dir) / "ckpt").glob("step_*[0-9]"))
        return ckpts[-1] if ckpts else None
    if cfg.resume:
        ckpt = Path(cfg.resume)
        if not (ckpt / "trainer_state.json").exists():
            raise FileNotFoundError(
                f"resume={ckpt}: not a complete checkpoint (no trainer_state.json); resume=auto takes the run's newest"
            )
        return ckpt
    held = run_in(run_dir)
    if held and not cfg.overwrite:
        raise FileExistsError(
            f"{run_dir} already holds a run ({held}): add resume=auto to continue it, "
            f"run_name=<new name> to start another, or overwrite=true to replace it"
        )
    return None


def clear_run(run_dir: Path) -> None:
    """Remove a previous run's logs, rollouts and checkpoints (overwrite=true)."""
    for name in ("metrics.jsonl", "rollouts", "ckpt", "tensorboard", "wandb"):
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


class Preempted(SystemExit):
    """A run stopped by SIGTERM/SIGINT after checkpointing; exits with 128 + the signal number."""


class PreemptionGuard:
    """SIGTERM and SIGINT (a cluster's preemption, Ctrl-C) ask the loop to stop after the step
    in flight instead of killing it; a second SIGINT interrupts at once. `requested(world)` is
    collective: every rank stops at the same step."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self) -> PreemptionGuard:
        self.received: int | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        print(f"\n[credo] {signal.Signals(signum).name}: stopping after this step (a checkpoint follows)", flush=True)

    def requested(self, world: parallel.World) -> int | None:
        """The signal some rank received (the same answer on every rank), or None."""
        got = parallel.all_reduce({"signal": float(self.received or 0)}, world, "max")["signal"]
        return int(got) or None
