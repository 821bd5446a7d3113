"""Checkpoints of a run: what `runs/<name>/ckpt/step_N/` holds and how a run resumes from it.

    ckpt = save_checkpoint(run_dir, step, policy, optimizer, cursor, cfg, world)
    step, cursor = restore_state(ckpt, optimizer, policy.model, world)

A checkpoint is HF safetensors weights + tokenizer (what eval.py and vLLM load), the resolved
config, the step and data position, AdamW's state and every RNG stream, so that a resumed
run takes the same next step as a straight one. A checkpoint directory exists only once it
is complete (written under `.tmp`, then renamed). Does not hold: the sharded formats
themselves (parallel.py: DCP), nor the choice of when to save (credo.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import yaml

import parallel
from policy import Policy

def save_checkpoint(run_dir: Path, step: int, policy: Policy, optimizer, data_cursor: int, cfg: dict,
                    world: parallel.World | None = None) -> Path:
    """runs/<name>/ckpt/step_XXXXXX/ after `step` completed optimizer steps.

    Always: HF safetensors weights + tokenizer (what eval.py loads), trainer_state.json
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
        full_weights = parallel.full_state_dict_on_main(model, world)        # {} on ranks > 0
        parallel.rng_file(tmp, world).parent.mkdir(exist_ok=True)
        torch.save(parallel.rng_state(), parallel.rng_file(tmp, world))
        state["world_size"] = world.world_size
    else:
        full_weights = None
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(parallel.rng_state(), tmp / "rng.pt")
    if world.is_main:
        model.save_pretrained(tmp, state_dict=full_weights, safe_serialization=True)
        policy.tokenizer.save_pretrained(tmp)
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
        (tmp / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    parallel.barrier(world)
    if world.is_main:
        if ckpt.exists():
            shutil.rmtree(ckpt)
        tmp.rename(ckpt)   # a checkpoint directory exists only once it is complete
    parallel.barrier(world)
    return ckpt


def restore_state(ckpt: Path, optimizer, model=None, world: parallel.World | None = None) -> tuple[int, int]:
    """Load optimizer (and, under torchrun, the model shards) and RNG saved by save_checkpoint;
    returns (step, data cursor). The world size must be the checkpoint's."""
    world = world or parallel.single_process()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    written_by = state.get("world_size", 1)
    if written_by != world.world_size:
        raise ValueError(f"{ckpt} was written by {written_by} process(es) and this run has {world.world_size}: an exact "
                         f"resume needs the same world size (per-rank RNG streams and rollout seeds); "
                         f"launch with NPROC x NNODES = {written_by}")
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
