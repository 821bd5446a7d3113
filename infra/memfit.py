"""What fits where: memory per GPU for a config and a model, computed from the architecture
(not measured), and the decision of `activation_checkpointing=auto`.

    python -m infra.memfit math [key=value ...]        # this config on 24 / 80 / 141 GiB x 1 / 8 / 16 GPUs
    python -m infra.memfit math --table                # the table of docs/distributed.md, for the Qwen3 sizes

What one step holds on each GPU, in its update and in its rollout phase, is listed in
`estimate_memory`'s docstring.

Does not hold: the runtime (infra/parallel.py: process groups, sharding, reductions) or the model
(policy.py); it reads a model's config.json, never its weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import config
import methods
from schema import Config

# Shapes of the Qwen3 dense checkpoints (their config.json), for machines without the hub.
QWEN3_SHAPES = {
    "Qwen/Qwen3-0.6B": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-1.7B": dict(
        hidden_size=2048,
        num_hidden_layers=28,
        intermediate_size=6144,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-4B": dict(
        hidden_size=2560,
        num_hidden_layers=36,
        intermediate_size=9728,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-8B": dict(
        hidden_size=4096,
        num_hidden_layers=36,
        intermediate_size=12288,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
    "Qwen/Qwen3-14B": dict(
        hidden_size=5120,
        num_hidden_layers=40,
        intermediate_size=17408,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=False,
    ),
}
GIB = 2**30
CUDA_OVERHEAD_GIB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation (a rule of thumb)
VLLM_ASLEEP_GIB = 1.0  # what a level-1 sleeping engine keeps on the GPU (CUDA graphs, buffers)


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
    layer = h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h + 2 * hd  # attention, MLP, two norms, q/k norms
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
    H100 (profiles of 2026-11-24, 1.7B shape): eager 3.2 MB a token measured at 1 x 4,096
    (this gives 3.21); compiled 1.7 MB at 1 x 4,096 and 2.0 MB at 2 x 9,216 (this gives 2.06).
    With checkpointing a layer keeps its input (h) and one layer is live at a time. The loss
    adds fp32 log-prob work over a vocabulary chunk, not counted (no [N, T, V] logits).

    >>> shape = QWEN3_SHAPES["Qwen/Qwen3-1.7B"]
    >>> round(activation_bytes_per_token(shape, False, 2) / 1e6, 2)
    3.21
    >>> round(activation_bytes_per_token(shape, False, 2, compiled=True) / 1e6, 2)
    2.06
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


def estimate_memory(
    cfg: Config, shape: dict, world_size: int, gpu_gib: float, checkpointing: bool | None = None
) -> dict:
    """Peak GiB per GPU in the two phases of a step, for W ranks with `gpu_gib` each.

    update:  fp32 shards of params, grads, AdamW m and v (16 P / W) + the gathered bf16
             root unit (embeddings/head, kept until backward) and its fp32 gradient + two
             gathered layers (one prefetched) + activations of one full micro-batch
             (micro_batch_tokens; compiled layers as compile_layers decides on a GPU) +
             a sleeping engine.
    rollout: fp32 params and AdamW state (12 P / W; gradients are freed) + the engine's
             share of the GPU (vllm_gpu_memory_utilization), which must hold the bf16
             weights (2 P) and the KV cache of at least one full-length sequence.
    A loss term with a frozen reference (kl_coef > 0) adds its bf16 shards (2 P / W) to both
    phases, and in the update its gathered root unit and two gathered layers under FSDP2.
    """
    checkpointing = cfg.activation_checkpointing is True if checkpointing is None else checkpointing
    params, layer_params = parameter_counts(shape)
    root_params = params - shape["num_hidden_layers"] * layer_params
    seq = cfg.max_prompt_tokens + cfg.max_completion_tokens
    tokens = cfg.micro_batch_tokens
    sharded = 16 * params / world_size
    # One process: autocast keeps bf16 copies of the weights it used until backward (2 P).
    # FSDP2: the gathered bf16 root unit and its fp32 gradient, and two gathered bf16 layers.
    gathered = 2 * params if world_size == 1 else (2 + 4) * root_params + 2 * 2 * layer_params
    compiled = config.compiles_layers(cfg, "cuda")  # what compile_layers decides on a GPU
    activations = tokens * activation_bytes_per_token(shape, checkpointing, compute_bytes=2, compiled=compiled)
    reference = reference_bytes(cfg, params, root_params, layer_params, world_size)
    update = (sharded + gathered + activations + reference["update"]) / GIB + VLLM_ASLEEP_GIB + CUDA_OVERHEAD_GIB
    engine_gib = cfg.vllm_gpu_memory_utilization * gpu_gib
    kv_gib = engine_gib - 2 * params / GIB - 1.0  # 1 GiB of engine activations / graphs
    rollout = (12 * params / world_size + reference["rollout"]) / GIB + engine_gib + CUDA_OVERHEAD_GIB
    full_sequences = kv_gib * GIB / (seq * kv_bytes_per_token(shape)) if kv_gib > 0 else 0.0
    return {
        "params_b": params / 1e9,
        "reference_gib": reference["update"] / GIB,
        "update_gib": update,
        "rollout_gib": rollout,
        "kv_cache_gib": kv_gib,
        "concurrent_sequences": full_sequences,
        "fits": update <= gpu_gib and rollout <= gpu_gib and full_sequences >= 1,
    }


def reference_bytes(cfg: Config, params: int, root_params: int, layer_params: int, world_size: int) -> dict:
    """Bytes per GPU of the frozen reference model (methods.needs_reference), in the update and in
    the rollout phase: its bf16 shards, and in the update under FSDP2 its gathered root unit and
    two gathered layers (one prefetched); nothing without one."""
    if not methods.needs_reference(cfg):
        return {"update": 0.0, "rollout": 0.0}
    shards = 2 * params / world_size
    gathered = 0 if world_size == 1 else 2 * root_params + 2 * 2 * layer_params
    return {"update": shards + gathered, "rollout": shards}


def engine_share(cfg: Config, shape: dict, gpu_gib: float) -> float:
    """vllm_gpu_memory_utilization: the configured share, or the smallest multiple of 0.05
    that holds the bf16 weights, 1 GiB of work space and one full-length sequence's KV."""
    seq = cfg.max_prompt_tokens + cfg.max_completion_tokens
    needed = (2 * parameter_counts(shape)[0] + GIB + seq * kv_bytes_per_token(shape)) / GIB / gpu_gib
    return max(cfg.vllm_gpu_memory_utilization, math.ceil(needed * 20) / 20)


def fit_cell(cfg: Config, shape: dict, world_size: int, gpu_gib: float) -> str:
    """One table cell: does a run fit (activation checkpointing only when needed, the engine's
    share raised only when the configured one cannot hold it), and the peaks."""
    cfg_share = cfg.vllm_gpu_memory_utilization
    cfg = dataclasses.replace(cfg, vllm_gpu_memory_utilization=engine_share(cfg, shape, gpu_gib))
    est = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=False)
    checkpointing = False
    if not est["fits"]:
        checkpointing = True
        est = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=True)
    peaks = f"{est['update_gib']:.0f} / {est['rollout_gib']:.0f} GiB"
    share = cfg.vllm_gpu_memory_utilization
    if est["fits"]:
        return (
            f"yes{', AC' if checkpointing else ''}{f', util {share:.2f}' if share != cfg_share else ''} "
            f"({peaks}, KV {est['concurrent_sequences']:.0f} seqs)"
        )
    if est["concurrent_sequences"] < 1:
        return f"no: engine share too small ({est['kv_cache_gib']:.0f} GiB KV)"
    return f"no ({peaks})"


def decide_checkpointing(cfg: Config, shape: dict, world_size: int, gpu_gib: float | None) -> tuple[bool, str | None]:
    """activation_checkpointing as set (true/false), or for `auto` on exactly when the update
    would not fit `gpu_gib` without it (estimate_memory) - never on a CPU (gpu_gib None: no
    device memory to run out of). Returns (on, the reason to log, or None).

    >>> cfg, shape = config.load_config("math"), QWEN3_SHAPES["Qwen/Qwen3-1.7B"]  # micro-batches of 2 x 9,218 tokens
    >>> decide_checkpointing(cfg, shape, 1, 80.0)[0], decide_checkpointing(cfg, shape, 1, 40.0)[0]
    (False, True)
    >>> decide_checkpointing(cfg, shape, 1, None)
    (False, None)
    >>> eager = dataclasses.replace(cfg, compile_layers=False)  # eager layers keep more activations
    >>> decide_checkpointing(eager, shape, 1, 80.0)[0]
    True
    """
    setting = cfg.activation_checkpointing
    if setting != "auto":
        return bool(setting), None
    if gpu_gib is None:
        return False, None
    without = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=False)
    if without["update_gib"] <= gpu_gib:  # the update's peak (a sleeping engine included) fits
        return False, None
    with_ = estimate_memory(cfg, shape, world_size, gpu_gib, checkpointing=True)
    return True, (
        f"activation checkpointing on (activation_checkpointing=auto): the update needs ~{without['update_gib']:.0f} "
        f"GiB per GPU without it, ~{with_['update_gib']:.0f} GiB with it, of {gpu_gib:.0f} GiB"
    )


def fit_table(cfg: Config, models: list[str], gpus_gib: list[float], world_sizes: list[int]) -> str:
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
    """python -m infra.memfit [config] [key=value ...] [--table]"""
    table = "--table" in argv
    args = [a for a in argv if a != "--table"]
    cfg = config.load_config(args[0] if args else "math", args[1:])
    if table:
        seq = cfg.max_prompt_tokens + cfg.max_completion_tokens
        print(
            f"Sequence budget {seq} tokens ({cfg.max_prompt_tokens} prompt + {cfg.max_completion_tokens} "
            f"completion), micro-batches of {cfg.micro_batch_tokens} tokens, engine share "
            f"vllm_gpu_memory_utilization={cfg.vllm_gpu_memory_utilization}. Cells: peak GiB per GPU in the "
            f"update / the rollout phase, full-length sequences the engine's KV cache holds at once; AC: "
            f"activation_checkpointing=true needed; util: the engine share (vllm_gpu_memory_utilization) it needs.\n"
        )
        print(fit_table(cfg, list(QWEN3_SHAPES), [24.0, 80.0, 141.0], [1, 8, 16]))
        return
    shape = model_shape(cfg.model)
    print(
        f"# {cfg.model}: sequence budget {cfg.max_prompt_tokens + cfg.max_completion_tokens} tokens, "
        f"micro-batches of {cfg.micro_batch_tokens} tokens, "
        f"activation checkpointing {cfg.activation_checkpointing}"
    )
    for gpu in (24.0, 80.0, 141.0):
        for w in (1, 8, 16):
            est = estimate_memory(cfg, shape, w, gpu)
            print(
                f"GPU {gpu:5.0f} GiB x {w:2d}: update {est['update_gib']:7.1f} GiB, "
                f"rollout {est['rollout_gib']:6.1f} GiB, "
                f"KV {est['kv_cache_gib']:6.1f} GiB = {est['concurrent_sequences']:5.1f} full sequences -> "
                f"{'fits' if est['fits'] else 'does not fit'}"
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    try:
        _fit_cli([a for a in sys.argv[1:] if a != "--debug"])
    except config.INPUT_ERRORS as error:
        if "--debug" in sys.argv:
            raise
        sys.exit(f"memfit: {config.one_line(error)}")
