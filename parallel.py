"""Data-parallel training for credo.py with PyTorch's own stack: torchrun + FSDP2 + DCP.

    python credo.py tiny                                   # one process: no launcher, no process group
    NPROC=8 bash run.sh math                               # = torchrun --nproc_per_node 8 credo.py math
    NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 NPROC=8 bash run.sh math    # on each node, NODE_RANK 0 / 1
    python parallel.py fit math [key=value ...]            # what fits where: memory per GPU, computed

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
    must fit one GPU in bf16 for generation. `python parallel.py fit` says where.
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
    for Qwen3-8B) is held through the update, which `fit` counts.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
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

import config

ROLLOUT_SEED_STRIDE = 7919   # rank r samples with seed + r * 7919: far from the paper's seeds 43..45


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
            raise RuntimeError(f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPUs: "
                               f"NPROC must not exceed the GPUs per node")
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


def check_world(cfg: dict, world: World) -> None:
    """The step's questions (per_device_batch_size x grad_accum / group_size, the same for every
    world size) must split into equal whole-group slices across ranks."""
    rollouts = cfg["per_device_batch_size"] * cfg["grad_accum"]
    questions = rollouts // cfg["group_size"]
    if questions % world.world_size:
        raise ValueError(
            f"{world.world_size} ranks cannot share {questions} questions per step "
            f"(per_device_batch_size {cfg['per_device_batch_size']} x grad_accum {cfg['grad_accum']} = {rollouts} "
            f"rollouts / group_size {cfg['group_size']}): use a world size (NPROC x NNODES) that divides {questions}, "
            f"or raise grad_accum"
        )


def rank_slice(items: list, world: World) -> list:
    """This rank's contiguous share of the step's global list (equal shares; see check_world)."""
    share = len(items) // world.world_size
    return items[world.rank * share:(world.rank + 1) * share]


def rank_seed(seed: int, world: World) -> int:
    """The rollout seed of this rank: rank 0 samples as a single process would."""
    return seed + ROLLOUT_SEED_STRIDE * world.rank


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
        mp_policy = MixedPrecisionPolicy()   # no casts: fp32 everywhere
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
    backbone.set_reshard_after_backward(False, recurse=False)   # gathered for a whole update: see gather_root
    model._is_fsdp_managed_module = True   # transformers' generate then keeps ranks in step (synced_gpus)
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

    model_state, optim_state = get_state_dict(model, optimizer)   # fresh AdamW state is initialised here
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict_on_main(model, world: World) -> dict:
    """The full fp32 state dict in rank 0's host memory (gathered one tensor at a time);
    {} on the other ranks. A collective: every rank calls it."""

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_file(ckpt: Path, world: World) -> Path:
    return ckpt / "rng" / f"rank_{world.rank:05d}.pt"


# ============================================================================================
# What fits where: memory per GPU, computed from a config and a model config.
# ============================================================================================

# Shapes of the Qwen3 dense checkpoints (their config.json), for machines without the hub.
QWEN3_SHAPES = {
    "Qwen/Qwen3-0.6B": dict(hidden_size=1024, num_hidden_layers=28, intermediate_size=3072, num_attention_heads=16,
                            num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "Qwen/Qwen3-1.7B": dict(hidden_size=2048, num_hidden_layers=28, intermediate_size=6144, num_attention_heads=16,
                            num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "Qwen/Qwen3-4B": dict(hidden_size=2560, num_hidden_layers=36, intermediate_size=9728, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "Qwen/Qwen3-8B": dict(hidden_size=4096, num_hidden_layers=36, intermediate_size=12288, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "Qwen/Qwen3-14B": dict(hidden_size=5120, num_hidden_layers=40, intermediate_size=17408, num_attention_heads=40,
                           num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
}
GIB = 2**30
CUDA_OVERHEAD_GIB = 3.0        # CUDA context, NCCL buffers, allocator fragmentation (a rule of thumb)
VLLM_ASLEEP_GIB = 1.0          # what a level-1 sleeping engine keeps on the GPU (CUDA graphs, buffers)


def shape_of(config: dict) -> dict:
    """The architecture numbers the estimate needs, from a model's config (config.json as a dict)."""
    config = {**config, "head_dim": config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]}
    return {key: config[key] for key in QWEN3_SHAPES["Qwen/Qwen3-8B"]}


def model_shape(model: str) -> dict:
    """The architecture numbers of a local checkpoint (config.json) or of a known Qwen3 id."""
    config_file = Path(model) / "config.json"
    if config_file.exists():
        return shape_of(json.loads(config_file.read_text()))
    if model in QWEN3_SHAPES:
        return QWEN3_SHAPES[model]
    raise ValueError(f"no config.json under {model!r} and not a known id ({', '.join(QWEN3_SHAPES)})")


def parameter_counts(shape: dict) -> tuple[int, int]:
    """(all parameters, parameters of one decoder layer) of a Qwen3-style model."""
    h, inter, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    layer = h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h + 2 * hd    # attention, MLP, two norms, q/k norms
    embed = shape["vocab_size"] * h
    head = 0 if shape["tie_word_embeddings"] else embed
    return shape["num_hidden_layers"] * layer + embed + head + h, layer


def activation_bytes_per_token(shape: dict, checkpointing: bool, compute_bytes: int, compiled: bool = False) -> float:
    """Bytes kept for backward per token of a micro-batch, over the whole model (an estimate).

    Eager layers keep roughly their normed inputs and outputs (6 h), q/k/v and attention
    output (4 q + 4 kv with RoPE copies), four MLP tensors (4 i) in the compute dtype, and two
    fp32 RMSNorm inputs. Compiled layers (compile_layers) keep what inductor's partitioner
    saves, the matmul inputs and outputs, and recompute the elementwise work in backward:
    two normed inputs (2 h), q, k, v and the attention output (2 q + 2 kv), gate, up and
    the down projection's input (3 i), and the two fp32 residual inputs. Calibrated on an
    H100 (../shared/gpu/prof2*.log, 1.7B shape): eager 3.2 MB a token measured at 1 x 4,096
    (this gives 3.21); compiled 1.7 MB at 1 x 4,096 and 2.0 MB at 2 x 9,216 (this gives 2.06).
    With checkpointing a layer keeps its input (h) and one layer is live at a time. The loss
    adds fp32 log-prob work over a vocabulary chunk, not counted (no [N, T, V] logits).

    >>> shape = QWEN3_SHAPES["Qwen/Qwen3-1.7B"]
    >>> round(activation_bytes_per_token(shape, False, 2) / 1e6, 2), round(activation_bytes_per_token(shape, False, 2, compiled=True) / 1e6, 2)
    (3.21, 2.06)
    """
    h, inter, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    if compiled:
        per_layer = compute_bytes * (2 * h + 2 * q + 2 * kv + 3 * inter) + 4 * 2 * h
    else:
        per_layer = compute_bytes * (6 * h + 4 * q + 4 * kv + 4 * inter) + 4 * 2 * h
    layers = shape["num_hidden_layers"]
    if checkpointing:
        return compute_bytes * h * layers + per_layer
    return per_layer * layers


def kv_bytes_per_token(shape: dict, engine_bytes: int = 2) -> int:
    return 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"] * engine_bytes


def estimate_memory(cfg: dict, shape: dict, world_size: int, gpu_gib: float, checkpointing: bool | None = None) -> dict:
    """Peak GiB per GPU in the two phases of a step, for W ranks with `gpu_gib` each.

    update:  fp32 shards of params, grads, AdamW m and v (16 P / W) + the gathered bf16
             root unit (embeddings/head, kept until backward) and its fp32 gradient + two
             gathered layers (one prefetched) + activations of one full micro-batch
             (micro_batch_tokens; compiled layers as compile_layers decides on a GPU) +
             a sleeping engine.
    rollout: fp32 params and AdamW state (12 P / W; gradients are freed) + the engine's
             share of the GPU (vllm_gpu_memory_utilization), which must hold the bf16
             weights (2 P) and the KV cache of at least one full-length sequence.
    """
    checkpointing = cfg.get("activation_checkpointing") is True if checkpointing is None else checkpointing
    params, layer_params = parameter_counts(shape)
    root_params = params - shape["num_hidden_layers"] * layer_params
    seq = cfg["max_prompt_tokens"] + cfg["max_completion_tokens"]
    tokens = config.micro_batch_budget(cfg)
    sharded = 16 * params / world_size
    # One process: autocast keeps bf16 copies of the weights it used until backward (2 P).
    # FSDP2: the gathered bf16 root unit and its fp32 gradient, and two gathered bf16 layers.
    gathered = 2 * params if world_size == 1 else (2 + 4) * root_params + 2 * 2 * layer_params
    compiled = config.compiles_layers(cfg, "cuda")     # what compile_layers decides on a GPU
    activations = tokens * activation_bytes_per_token(shape, checkpointing, compute_bytes=2, compiled=compiled)
    update = (sharded + gathered + activations) / GIB + VLLM_ASLEEP_GIB + CUDA_OVERHEAD_GIB
    engine_gib = cfg["vllm_gpu_memory_utilization"] * gpu_gib
    kv_gib = engine_gib - 2 * params / GIB - 1.0        # 1 GiB of engine activations / graphs
    rollout = 12 * params / world_size / GIB + engine_gib + CUDA_OVERHEAD_GIB
    full_sequences = kv_gib * GIB / (seq * kv_bytes_per_token(shape)) if kv_gib > 0 else 0.0
    return {
        "params_b": params / 1e9, "update_gib": update, "rollout_gib": rollout, "kv_cache_gib": kv_gib,
        "concurrent_sequences": full_sequences,
        "fits": update <= gpu_gib and rollout <= gpu_gib and full_sequences >= 1,
    }


def engine_share(cfg: dict, shape: dict, gpu_gib: float) -> float:
    """vllm_gpu_memory_utilization: the configured share, or the smallest multiple of 0.05
    that holds the bf16 weights, 1 GiB of work space and one full-length sequence's KV."""
    seq = cfg["max_prompt_tokens"] + cfg["max_completion_tokens"]
    needed = (2 * parameter_counts(shape)[0] + GIB + seq * kv_bytes_per_token(shape)) / GIB / gpu_gib
    return max(cfg["vllm_gpu_memory_utilization"], math.ceil(needed * 20) / 20)


def fit_cell(cfg: dict, shape: dict, world_size: int, gpu_gib: float) -> str:
    """One table cell: does a run fit (activation checkpointing only when needed, the engine's
    share raised only when the configured one cannot hold it), and the peaks."""
    cfg_share = cfg["vllm_gpu_memory_utilization"]
    cfg = {**cfg, "vllm_gpu_memory_utilization": engine_share(cfg, shape, gpu_gib)}
    est = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=False)
    checkpointing = False
    if not est["fits"]:
        checkpointing = True
        est = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=True)
    peaks = f"{est['update_gib']:.0f} / {est['rollout_gib']:.0f} GiB"
    share = cfg["vllm_gpu_memory_utilization"]
    if est["fits"]:
        return (f"yes{', AC' if checkpointing else ''}{f', util {share:.2f}' if share != cfg_share else ''} "
                f"({peaks}, KV {est['concurrent_sequences']:.0f} seqs)")
    if est["concurrent_sequences"] < 1:
        return f"no: engine share too small ({est['kv_cache_gib']:.0f} GiB KV)"
    return f"no ({peaks})"


def decide_checkpointing(cfg: dict, shape: dict, world_size: int, gpu_gib: float | None) -> tuple[bool, str | None]:
    """activation_checkpointing as set (true/false), or for `auto` on exactly when the update
    would not fit `gpu_gib` without it (estimate_memory) - never on a CPU (gpu_gib None: no
    device memory to run out of). Returns (on, the reason to log, or None).

    >>> cfg, shape = config.load_config("math"), QWEN3_SHAPES["Qwen/Qwen3-1.7B"]   # micro-batches of 2 x 9,218 tokens
    >>> decide_checkpointing(cfg, shape, 1, 80.0)[0], decide_checkpointing(cfg, shape, 1, 40.0)[0], decide_checkpointing(cfg, shape, 1, None)
    (False, True, (False, None))
    >>> decide_checkpointing({**cfg, "compile_layers": False}, shape, 1, 80.0)[0]    # eager layers keep more
    True
    """
    setting = cfg["activation_checkpointing"]
    if setting != "auto":
        return bool(setting), None
    if gpu_gib is None:
        return False, None
    without = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=False)
    if without["update_gib"] <= gpu_gib:                  # the update's peak (a sleeping engine included) fits
        return False, None
    with_ = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=True)
    return True, (f"activation checkpointing on (activation_checkpointing=auto): the update needs ~{without['update_gib']:.0f} "
                  f"GiB per GPU without it, ~{with_['update_gib']:.0f} GiB with it, of {gpu_gib:.0f} GiB")


def gpu_memory_gib(world: World) -> float | None:
    """Total memory of this rank's GPU in GiB; None on a CPU."""
    if world.device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(world.device).total_memory / GIB


def fit_table(cfg: dict, models: list[str], gpus_gib: list[float], world_sizes: list[int]) -> str:
    """A markdown table of what fits where for cfg's sequence budget and micro-batch:
    models x GPU memory (rows) x number of GPUs (columns)."""
    head = "| model | params | GPU memory | " + " | ".join(f"{w} GPU{'s' if w > 1 else ''}" for w in world_sizes) + " |"
    lines = [head, "|" + "---|" * (3 + len(world_sizes))]
    for model in models:
        shape = model_shape(model)
        params = parameter_counts(shape)[0] / 1e9
        for gpu in gpus_gib:
            cells = [fit_cell(cfg, shape, w, gpu) for w in world_sizes]
            lines.append(f"| {model.split('/')[-1]} | {params:.1f} B | {gpu:.0f} GiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fit_cli(argv: list[str]) -> None:
    """python parallel.py fit [config] [key=value ...] [--table]"""
    table = "--table" in argv
    args = [a for a in argv if a != "--table"]
    cfg = config.load_config(args[0] if args else "math", args[1:])
    if table:
        seq = cfg["max_prompt_tokens"] + cfg["max_completion_tokens"]
        print(f"Sequence budget {seq} tokens ({cfg['max_prompt_tokens']} prompt + {cfg['max_completion_tokens']} "
              f"completion), micro-batches of {config.micro_batch_budget(cfg)} tokens, engine share "
              f"vllm_gpu_memory_utilization={cfg['vllm_gpu_memory_utilization']}. Cells: peak GiB per GPU in the "
              f"update / the rollout phase, full-length sequences the engine's KV cache holds at once; AC: "
              f"activation_checkpointing=true needed; util: the engine share (vllm_gpu_memory_utilization) it needs.\n")
        print(fit_table(cfg, list(QWEN3_SHAPES), [24.0, 80.0, 141.0], [1, 8, 16]))
        return
    shape = model_shape(cfg["model"])
    print(f"# {cfg['model']}: sequence budget {cfg['max_prompt_tokens'] + cfg['max_completion_tokens']} tokens, "
          f"micro-batches of {config.micro_batch_budget(cfg)} tokens, "
          f"activation checkpointing {cfg['activation_checkpointing']}")
    for gpu in (24.0, 80.0, 141.0):
        for w in (1, 8, 16):
            est = estimate_memory(cfg, shape, w, gpu)
            print(f"GPU {gpu:5.0f} GiB x {w:2d}: update {est['update_gib']:7.1f} GiB, rollout {est['rollout_gib']:6.1f} GiB, "
                  f"KV {est['kv_cache_gib']:6.1f} GiB = {est['concurrent_sequences']:5.1f} full sequences -> "
                  f"{'fits' if est['fits'] else 'does not fit'}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "fit":
        print(__doc__)
        sys.exit(0 if len(sys.argv) < 2 else 2)
    try:
        _fit_cli([a for a in sys.argv[2:] if a != "--debug"])
    except config.INPUT_ERRORS as error:
        if "--debug" in sys.argv:
            raise
        sys.exit(f"parallel: {config.one_line(error)}")
