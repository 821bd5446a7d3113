"""Data-parallel training for credo.py with PyTorch's own stack: torchrun + FSDP2 + DCP.

    python credo.py tiny                                   # one process: no launcher, no process group
    NPROC=8 bash run.sh math                               # = torchrun --nproc_per_node 8 credo.py math
    NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 NPROC=8 bash run.sh math    # on each node, NODE_RANK 0 / 1

How a step runs on W ranks (every rank the same code, `credo.train`):

  * questions  every rank draws the same global questions of the step from the
               QuestionStream and keeps its contiguous slice of Q / W (whole groups:
               group statistics need no communication);
  * rollouts   each rank's own colocated vLLM (TP = 1), with a rank-specific seed;
               on CUDA it sleeps (level 1) during the update and wakes for the push;
  * update     the policy is sharded with FSDP2 (`fully_shard` per decoder layer, then
               the backbone with the output head); the losses' denominators are the
               global counts / W, so the rank-averaged gradient is the gradient of the
               whole batch's loss;
  * push       weights go into the engine as full tensors gathered one parameter at a
               time, in layer order (never a whole full-precision copy on one GPU);
  * metrics    scalars are all-reduced, per-rollout records gathered on rank 0, which
               alone writes metrics.jsonl, rollouts/ and the exported HF weights;
  * checkpoint sharded model + AdamW state with torch.distributed.checkpoint (DCP),
               per-rank RNG states, a rank-0 safetensors export for eval.py.

Precision: the sharded parameters and AdamW state are fp32 master weights. With bf16
compute FSDP2 gathers them as bf16 (MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)) and reduce-scatters gradients in fp32; with fp32 compute (CPU) there
is no mixed-precision policy at all.

Simplifications, on purpose:
  * Pure data parallelism: the model is sharded but every rank runs whole sequences
    (no tensor, sequence or pipeline parallelism) and its own TP = 1 engine, so a model
    must fit one GPU in bf16 for generation. `python -m infra.memfit` says where.
  * Under torchrun each rank loads the full fp32 checkpoint into host memory, builds its
    engine from it, then `fully_shard` moves its shard to the GPU (W copies in a node's
    RAM for a moment); meta-device init with rank-0 broadcast would remove that, at the
    cost of more code.
  * vLLM's sleep mode exists on CUDA only; on CPU the engine stays resident during the
    update (rollout.VLLMEngine.sleep / wake_up are explicit no-ops there).
  * An exact resume needs the world size the checkpoint was written with (per-rank RNG
    streams and rank seeds); a different world size is refused, not approximated.
  * Multi-node runs need `out_dir` on a filesystem every node sees (DCP writes one
    file per rank into the checkpoint directory).
  * The backbone (embeddings, final norm) and the output head form one FSDP unit that
    stays gathered for a whole update (gather_root ... release_root): the trainer reads
    `lm_head.weight` directly (it never materialises [N, T, V] logits), so the head has
    no forward of its own for FSDP to hook. Its gathered bf16 copy (2 x 0.6 B parameters
    for Qwen3-8B) is held through the update, which infra/memfit.py counts.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from schema import Config

ROLLOUT_SEED_STRIDE = 7919  # rank r samples with seed + r * 7919: far from the paper's seeds 43..45


# ============================================================================================
# The world: torchrun's environment, or one process with no launcher.
# ============================================================================================


@dataclass(frozen=True)
class World:
    """This process's place in the job. world_size 1: no process group exists."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def load_device(self) -> torch.device:
        """Where a checkpoint is first loaded: the GPU for one process; host memory under
        torchrun, from where `fully_shard` moves each rank's shard to its GPU."""
        return self.device if not self.distributed else torch.device("cpu")

    def rank_seed(self, seed: int) -> int:
        """This rank's rollout seed for the run's `seed`: rank 0 samples as a single process would."""
        return seed + ROLLOUT_SEED_STRIDE * self.rank


def single_process() -> World:
    """The world of one process with no launcher (no process group)."""
    return World(0, 1, 0, torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def init_world() -> World:
    """Join the torchrun job described by RANK / WORLD_SIZE / LOCAL_RANK (MASTER_ADDR/PORT),
    or describe a single process when there is no launcher (or a launcher with one rank).
    NCCL on CUDA, gloo on CPU. Calling it again returns the same world."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        if world_size > 1 and local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPUs: "
                f"NPROC must not exceed the GPUs per node"
            )
        torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo", device_id=device if cuda else None)
    return World(rank, world_size, local_rank, device)


def shutdown(world: World, wait_for_peers: bool = True) -> None:
    """Leave the job. First a barrier: gloo completes every collective this rank has pending
    before it, and no rank tears its process group down while a peer still sends to it. A
    process that exits while gloo's worker threads hold work dies in std::terminate
    ("terminate called without an active exception"); under load this hit whichever rank
    finished first. After a failure pass wait_for_peers=False: a peer may never arrive."""
    if world.distributed and dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def main_print(world: World, *args, **kwargs) -> None:
    """print on rank 0 only (every rank would print the same line)."""
    if world.is_main:
        print(*args, **kwargs)


# ============================================================================================
# Work split: the step's questions across ranks.
# ============================================================================================


def check_world(cfg: Config, world: World) -> None:
    """The step's questions (per_device_batch_size x grad_accum / group_size, the same for every
    world size) must split into equal whole-group slices across ranks; a QLoRA run has one rank."""
    if cfg.lora_quant != "none" and world.world_size > 1:
        raise ValueError(
            f"lora_quant={cfg.lora_quant} runs in one process: FSDP2 does not shard bitsandbytes' packed 4-bit "
            f"weights; use NPROC=1, or lora_quant=none across {world.world_size} ranks"
        )
    rollouts = cfg.per_device_batch_size * cfg.grad_accum
    questions = rollouts // cfg.group_size
    if questions % world.world_size:
        raise ValueError(
            f"{world.world_size} ranks cannot share {questions} questions per step "
            f"(per_device_batch_size {cfg.per_device_batch_size} x grad_accum {cfg.grad_accum} = {rollouts} "
            f"rollouts / group_size {cfg.group_size}): use a world size (NPROC x NNODES) that divides {questions}, "
            f"or raise grad_accum"
        )


def rank_slice(items: list, world: World) -> list:
    """This rank's contiguous share of the step's global list (equal shares; see check_world)."""
    share = len(items) // world.world_size
    return items[world.rank * share : (world.rank + 1) * share]


# ============================================================================================
# Sharding: FSDP2 per decoder layer, then the backbone + head; activation checkpointing.
# ============================================================================================


def enable_activation_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in backward (transformers' per-layer
    checkpointing, non-reentrant so it composes with FSDP2's hooks)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def shard_model(model, world: World, compute_dtype: torch.dtype):
    """Shard `model` in place across the world with FSDP2 and return it (unchanged for one process).

    Units: every decoder layer, then the backbone (embeddings, final norm) together with the
    output head. The head is registered under the backbone for the `fully_shard` call only,
    so that the backbone's forward gathers it too: the trainer multiplies hidden states by
    `lm_head.weight` itself. The root unit is not resharded after forward, so the gathered
    head stays valid until the backward, after which FSDP reduce-scatters its gradient.
    """
    if not world.distributed:
        return model

    mesh = init_device_mesh(world.device.type, (world.world_size,))
    if compute_dtype == torch.float32:
        mp_policy = MixedPrecisionPolicy()  # no casts: fp32 everywhere
    else:
        mp_policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    backbone, head = model.get_decoder(), model.get_output_embeddings()
    for layer in backbone.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    backbone.add_module("_credo_head", head)
    try:
        fully_shard(backbone, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=False)
    finally:
        del backbone._modules["_credo_head"]
    backbone.set_reshard_after_backward(False, recurse=False)  # gathered for a whole update: see gather_root
    model._is_fsdp_managed_module = True  # transformers' generate then keeps ranks in step (synced_gpus)
    return model


def _root_unit(model):
    backbone = model.get_decoder()
    return backbone if isinstance(backbone, FSDPModule) else None


def gather_root(model) -> None:
    """Gather the root unit (embeddings, final norm, output head) for an update: the trainer
    reads `lm_head.weight` before the backbone's forward runs, and across micro-batches.
    It stays gathered through every backward (FSDP still reduce-scatters its gradient after
    each) until release_root. No-op for an unsharded model."""
    root = _root_unit(model)
    if root is not None:
        root.unshard()


def release_root(model) -> None:
    """Free the gathered root unit and put its sharded parameters (and their gradients) back on
    the modules: call it after the last backward of an update, before the norm and the
    optimizer step (a gathered copy would not see the step). No-op for an unsharded model."""
    root = _root_unit(model)
    if root is not None:
        root.reshard()


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly) sharded DTensor; a collective for DTensors."""

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def clip_gradients(model, max_norm: float | None) -> float:
    """Clip the global gradient norm (no-op for None) and return the norm before clipping.

    Under FSDP2 it first releases the gathered root unit (parallel.release_root: the last
    backward of the update is done), so the norm runs over the sharded DTensor gradients
    of every rank and is the norm of the whole, rank-averaged gradient."""
    release_root(model)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm if max_norm is not None else float("inf"))
    return grad_norm(norm)


def grad_norm(norm: torch.Tensor) -> float:
    """A norm from clip_grad_norm_ as a float (over DTensor gradients it is a replicated DTensor)."""
    return float(full_tensor(norm))


# ============================================================================================
# Reductions for metrics and counts (no-ops for one process).
# ============================================================================================


def all_reduce(values: dict[str, float], world: World, op: str = "sum") -> dict[str, float]:
    """Element-wise sum / mean / max of named scalars over ranks; every rank gets the result."""
    if not world.distributed:
        return dict(values)
    keys = list(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=world.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    if op == "mean":
        tensor /= world.world_size
    return dict(zip(keys, tensor.tolist()))


def gather_on_main(obj, world: World) -> list | None:
    """[rank 0's obj, rank 1's obj, ...] on rank 0 (picklable objects), None elsewhere."""
    if not world.distributed:
        return [obj]
    out = [None] * world.world_size if world.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def concat_rows(parts: list):
    """Concatenate per-rank row collections: lists, 1-d tensors, or dicts of either."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: concat_rows([p[key] for p in parts]) for key in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    return [item for part in parts for item in part]


# ============================================================================================
# Checkpoints: DCP for the sharded model + optimizer, rank-0 HF export, per-rank RNG.
# ============================================================================================


def save_sharded(path: Path, model, optimizer) -> None:
    """Every rank writes its shard of the model and AdamW state (DCP, one file per rank)."""

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(path))


def load_sharded(path: Path, model, optimizer) -> None:
    """Read a DCP checkpoint into this rank's shards (DCP reshards if the layout differs)."""

    model_state, optim_state = get_state_dict(model, optimizer)  # fresh AdamW state is initialised here
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict_on_main(model, world: World) -> dict:
    """The full fp32 state dict in rank 0's host memory (gathered one tensor at a time);
    {} on the other ranks. A collective: every rank calls it."""

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_file(ckpt: Path, world: World) -> Path:
    return ckpt / "rng" / f"rank_{world.rank:05d}.pt"


def gpu_memory_gib(world: World) -> float | None:
    """Total memory of this rank's GPU in GiB; None on a CPU."""
    if world.device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(world.device).total_memory / 2**30
