"""What fits where: memory per GPU for a config and a model, computed from the architecture
(not measured), and the decision of `activation_checkpointing=auto`.

    python -m infra.memfit math [key=value ...]        # this config on 24 / 80 / 141 GiB x 1 / 8 / 16 GPUs
    python -m infra.memfit math --table                # the table of docs/distributed.md, for the Qwen3 sizes

What one step holds on each GPU, in its update and in its rollout phase, is listed in
`estimate_memory`'s docstring: for full fine-tuning (lora_rank=0, the paper's) every weight's
fp32 master, gradient and AdamW state; with LoRA (lora_rank=r > 0) that state for the adapters
and the reserved tokens' rows only (`lora_parameter_count`), the adapted projections frozen in
the compute dtype and the other weights in fp32; with QLoRA (lora_quant=nf4) every projection
packed in 4 bits instead.

    python -m infra.memfit math lora_rank=32           # the same with rank-32 adapters on lora_targets
    python -m infra.memfit math lora_rank=32 lora_quant=nf4   # QLoRA: a 4-bit base

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
# Bytes per weight of NF4 with double quantization: 4 bits + 0.127 bits of quantization constants
# (an fp32 scale per 64 weights, itself quantized to 8 bits per block of 256): QLoRA (Dettmers et al. 2023).
NF4_BYTES = 4.127 / 8


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


def compute_bytes(cfg: Config) -> int:
    """Bytes of a value in the compute dtype on a GPU: 4 for precision=fp32, else 2 (auto is bf16 there)."""
    return 4 if cfg.precision == "fp32" else 2


def projection_features(shape: dict) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear projection of a decoder layer: LoRA's possible targets."""
    h, inter, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }


def lora_modules(targets: str | list) -> list[str]:
    """The module names of lora_targets (comma-separated or a list), each once; none, or a name that
    is not a projection of a decoder layer, is an error (as adapters/lora.py refuses them).

    >>> lora_modules("q_proj, v_proj,q_proj"), lora_modules(["down_proj"])
    (['q_proj', 'v_proj'], ['down_proj'])
    """
    names = targets.split(",") if isinstance(targets, str) else [str(name) for name in targets]
    names = list(dict.fromkeys(name.strip() for name in names if name.strip()))
    known = list(projection_features(QWEN3_SHAPES["Qwen/Qwen3-8B"]))
    unknown = [name for name in names if name not in known]
    if not names:
        raise ValueError(f"lora_targets is empty: name the projections that get adapters ({', '.join(known)})")
    if unknown:
        raise ValueError(
            f"lora_targets names {', '.join(unknown)}: not a projection of a decoder layer ({', '.join(known)})"
        )
    return names


def reserved_row_count(shape: dict) -> int:
    """Parameters of the reserved tokens' rows, which train in full with LoRA: 2 rows x hidden of the
    input embedding, and 2 more of the output head when it is untied."""
    return 2 * shape["hidden_size"] * (1 if shape["tie_word_embeddings"] else 2)


def lora_layer_count(shape: dict, rank: int, targets: str | list) -> int:
    """Adapter parameters of one decoder layer: A [r, in] and B [out, r] on every target module."""
    features = projection_features(shape)
    return rank * sum(sum(features[name]) for name in lora_modules(targets))


def lora_parameter_count(shape: dict, rank: int, targets: str | list) -> int:
    """Trainable parameters with LoRA of rank r > 0: the adapters of every decoder layer and the
    reserved tokens' rows (Qwen3-8B at rank 32 on all seven projections: 87.3 M, 1.1 % of 8.19 B).

    >>> lora_parameter_count(QWEN3_SHAPES["Qwen/Qwen3-8B"], 32, Config().lora_targets)  # all seven projections
    87310336
    """
    if rank < 1:
        raise ValueError(f"a LoRA rank is positive (0 is full fine-tuning), got {rank}")
    return shape["num_hidden_layers"] * lora_layer_count(shape, rank, targets) + reserved_row_count(shape)


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


def lora_activation_bytes_per_token(
    shape: dict, rank: int, targets: str | list, checkpointing: bool, compute_bytes: int
) -> int:
    """Bytes LoRA adds to activation_bytes_per_token per token: each target module's rank-r
    intermediate (A's output, B's input; r values in the compute dtype) in every layer, or with
    checkpointing in the one live layer. The adapters' inputs are the projections' inputs, counted there."""
    per_layer = compute_bytes * rank * len(lora_modules(targets))
    return per_layer if checkpointing else per_layer * shape["num_hidden_layers"]


def kv_bytes_per_token(shape: dict, engine_bytes: int = 2) -> int:
    return 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"] * engine_bytes


def estimate_memory(
    cfg: Config, shape: dict, world_size: int, gpu_gib: float, checkpointing: bool | None = None
) -> dict:
    """Peak GiB per GPU in the two phases of a step, for W ranks with `gpu_gib` each.

    update:  the weights and their training state (training_state_bytes / W) + what a forward and
             backward hold unsharded (gathered_bytes) + activations of one full micro-batch
             (micro_batch_tokens; compiled layers as compile_layers decides on a GPU; with LoRA
             also the adapters' rank-r intermediates) + a sleeping engine.
    rollout: the same weights and state without gradients (training_state_bytes / W) + the
             engine's share of the GPU (vllm_gpu_memory_utilization), which must hold the bf16
             weights (2 P, merged with LoRA) and the KV cache of at least one full-length sequence.
    Full fine-tuning (lora_rank=0) holds fp32 shards of params, grads, AdamW m and v (16 P / W;
    12 P / W in the rollout phase) and counts bf16 compute (the paper's). With LoRA (lora_rank > 0)
    only the T = lora_parameter_count trainable parameters hold that state; the other weights are
    frozen (training_state_bytes), without gradient or AdamW state.
    A loss term with a frozen reference (kl_coef > 0) adds its bf16 shards (2 P / W) to both
    phases, and in the update its gathered root unit and two gathered layers under FSDP2; under
    LoRA nothing (the reference is the same weights with the adapters off).
    """
    checkpointing = cfg.activation_checkpointing is True if checkpointing is None else checkpointing
    params, layer_params = parameter_counts(shape)
    root_params = params - shape["num_hidden_layers"] * layer_params
    seq = cfg.max_prompt_tokens + cfg.max_completion_tokens
    tokens = cfg.micro_batch_tokens
    state = training_state_bytes(cfg, shape)
    gathered = gathered_bytes(cfg, shape, world_size)
    activations = tokens * activation_bytes(cfg, shape, checkpointing)
    reference = reference_bytes(cfg, params, root_params, layer_params, world_size)
    held = state["update"] / world_size + gathered + activations + reference["update"]
    update = held / GIB + VLLM_ASLEEP_GIB + CUDA_OVERHEAD_GIB
    engine_gib = cfg.vllm_gpu_memory_utilization * gpu_gib
    kv_gib = engine_gib - 2 * params / GIB - 1.0  # 1 GiB of engine activations / graphs
    rollout = (state["rollout"] / world_size + reference["rollout"]) / GIB + engine_gib + CUDA_OVERHEAD_GIB
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


def training_state_bytes(cfg: Config, shape: dict) -> dict[str, int]:
    """Bytes of the policy's weights and their training state over all ranks (FSDP2 shards them
    all alike: a rank holds 1 / W), in the update and in the rollout phase (gradients freed).
    Full fine-tuning: fp32 weights, gradients, AdamW m and v for every parameter (16 P; 12 P).
    LoRA (adapters/lora.py): that for the T trainable parameters (16 T; 12 T); the target
    projections' frozen weights and an untied head in the compute dtype, every other frozen
    weight (embedding, norms, projections without adapters) in fp32, as in full fine-tuning."""
    params = parameter_counts(shape)[0]
    if cfg.lora_rank == 0:
        return {"update": 16 * params, "rollout": 12 * params}
    trainable = lora_parameter_count(shape, cfg.lora_rank, cfg.lora_targets)
    low, packed = frozen_low_precision_counts(cfg, shape)
    frozen = compute_bytes(cfg) * low + NF4_BYTES * packed + 4 * (params - low - packed - reserved_row_count(shape))
    return {"update": 16 * trainable + frozen, "rollout": 12 * trainable + frozen}


def frozen_low_precision_counts(cfg: Config, shape: dict) -> tuple[int, int]:
    """Frozen weights under LoRA stored below fp32: (in the compute dtype, packed in 4 bits). LoRA:
    the target projections and an untied head in the compute dtype. QLoRA (lora_quant=nf4): every
    projection of every layer packed (transformers quantizes each linear layer but the head), an
    untied head in the compute dtype."""
    if cfg.lora_quant == "nf4":
        packed = shape["num_hidden_layers"] * sum(i * o for i, o in projection_features(shape).values())
        return untied_head_count(shape), packed
    return target_weight_count(shape, cfg.lora_targets) + untied_head_count(shape), 0


def target_weight_count(shape: dict, targets: str | list) -> int:
    """Weights of the projections that get adapters, over every layer (frozen in the compute dtype)."""
    features = projection_features(shape)
    return shape["num_hidden_layers"] * sum(i * o for i, o in (features[name] for name in lora_modules(targets)))


def untied_head_count(shape: dict) -> int:
    """Weights of an untied output head ([V, H]; 0 when it is the embedding): frozen in the
    compute dtype under LoRA."""
    return 0 if shape.get("tie_word_embeddings", True) else shape["vocab_size"] * shape["hidden_size"]


def gathered_bytes(cfg: Config, shape: dict, world_size: int) -> float:
    """Bytes per GPU a forward and backward hold beyond the shards. One process: autocast's bf16
    copies of the fp32 weights it used, kept until backward (2 P). FSDP2: the gathered root unit
    (embeddings/head, kept until backward) and its fp32 gradient, and two gathered layers (one
    prefetched), in the compute dtype. LoRA: autocast's copies of the adapters and of the fp32
    frozen weights only (2 (P - targeted - untied head)), or under FSDP2 the gathered root unit and
    layers with their adapters. No copy of the head: the trainer reads it in its own dtype, the
    trained rows beside it (kernels.logprobs.Head)."""
    params, layer_params = parameter_counts(shape)
    root_params = params - shape["num_hidden_layers"] * layer_params
    if cfg.lora_rank == 0:
        return 2 * params if world_size == 1 else (2 + 4) * root_params + 2 * 2 * layer_params
    dtype_bytes = compute_bytes(cfg)
    if world_size == 1:
        return 0 if dtype_bytes == 4 else 2 * (params - sum(frozen_low_precision_counts(cfg, shape)))
    adapters = lora_layer_count(shape, cfg.lora_rank, cfg.lora_targets)
    root = dtype_bytes * root_params + 4 * reserved_row_count(shape)
    return root + 2 * dtype_bytes * (layer_params + adapters)


def activation_bytes(cfg: Config, shape: dict, checkpointing: bool) -> float:
    """Activation bytes per token of a micro-batch on a GPU (compile_layers as it decides there):
    activation_bytes_per_token in bf16 for full fine-tuning; with LoRA in the compute dtype, plus
    the adapters' intermediates (lora_activation_bytes_per_token)."""
    compiled = config.compiles_layers(cfg, "cuda")  # what compile_layers decides on a GPU
    if cfg.lora_rank == 0:
        return activation_bytes_per_token(shape, checkpointing, compute_bytes=2, compiled=compiled)
    dtype_bytes = compute_bytes(cfg)
    layers = activation_bytes_per_token(shape, checkpointing, compute_bytes=dtype_bytes, compiled=compiled)
    return layers + lora_activation_bytes_per_token(shape, cfg.lora_rank, cfg.lora_targets, checkpointing, dtype_bytes)


def reference_bytes(cfg: Config, params: int, root_params: int, layer_params: int, world_size: int) -> dict:
    """Bytes per GPU of the frozen reference model (methods.needs_reference), in the update and in
    the rollout phase: its bf16 shards, and in the update under FSDP2 its gathered root unit and
    two gathered layers (one prefetched); nothing without one, or under LoRA (the policy's own
    weights with the adapters off, adapters/lora.adapters_off)."""
    if not methods.needs_reference(cfg) or cfg.lora_rank:
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


def lora_label(cfg: Config) -> str:
    """What a LoRA config trains, for the CLI's headers ("" for full fine-tuning)."""
    if cfg.lora_rank == 0:
        return ""
    frozen = "fp32" if compute_bytes(cfg) == 4 else "bf16"
    trained = f"LoRA rank {cfg.lora_rank} on {','.join(lora_modules(cfg.lora_targets))} and the reserved tokens' rows"
    if cfg.lora_quant == "nf4":
        return f"{trained} over QLoRA's base: every projection packed in 4 bits (NF4), an untied head in {frozen}"
    return f"{trained}, those projections and an untied head frozen in {frozen}, the other weights in fp32"


def fit_table(cfg: Config, models: list[str], gpus_gib: list[float], world_sizes: list[int]) -> str:
    """A markdown table of what fits where for cfg's sequence budget and micro-batch:
    models x GPU memory (rows) x number of GPUs (columns)."""
    head = "| model | params | GPU memory | " + " | ".join(f"{w} GPU{'s' if w > 1 else ''}" for w in world_sizes) + " |"
    lines = [head, "|" + "---|" * (3 + len(world_sizes))]
    for model in models:
        shape = model_shape(model)
        params = f"{parameter_counts(shape)[0] / 1e9:.1f} B"
        if cfg.lora_rank:
            params += f", {lora_parameter_count(shape, cfg.lora_rank, cfg.lora_targets) / 1e6:.1f} M trained"
        for gpu in gpus_gib:
            cells = [fit_cell(cfg, shape, w, gpu) for w in world_sizes]
            lines.append(f"| {model.split('/')[-1]} | {params} | {gpu:.0f} GiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fit_cli(argv: list[str]) -> None:
    """python -m infra.memfit [config] [key=value ...] [--table]"""
    table = "--table" in argv
    args = [a for a in argv if a != "--table"]
    cfg = config.load_config(args[0] if args else "math", args[1:])
    if table:
        rows = fit_table(cfg, list(QWEN3_SHAPES), [24.0, 80.0, 141.0], [1, 8, 16])  # a bad setting stops here
        seq = cfg.max_prompt_tokens + cfg.max_completion_tokens
        print(
            f"Sequence budget {seq} tokens ({cfg.max_prompt_tokens} prompt + {cfg.max_completion_tokens} "
            f"completion), micro-batches of {cfg.micro_batch_tokens} tokens, engine share "
            f"vllm_gpu_memory_utilization={cfg.vllm_gpu_memory_utilization}. Cells: peak GiB per GPU in the "
            f"update / the rollout phase, full-length sequences the engine's KV cache holds at once; AC: "
            f"activation_checkpointing=true needed; util: the engine share (vllm_gpu_memory_utilization) it needs."
            + (f" {lora_label(cfg)}." if cfg.lora_rank else "")
            + "\n"
        )
        print(rows)
        return
    shape = model_shape(cfg.model)
    trainable = lora_parameter_count(shape, cfg.lora_rank, cfg.lora_targets) if cfg.lora_rank else 0
    print(
        f"# {cfg.model}: sequence budget {cfg.max_prompt_tokens + cfg.max_completion_tokens} tokens, "
        f"micro-batches of {cfg.micro_batch_tokens} tokens, "
        f"activation checkpointing {cfg.activation_checkpointing}"
    )
    if cfg.lora_rank:
        share = trainable / parameter_counts(shape)[0]
        print(f"# {lora_label(cfg)}: {trainable / 1e6:.1f} M trainable parameters ({share:.2%})")
    for gpu in (24.0, 80.0, 141.0):
        for w in (1,) if cfg.lora_quant != "none" else (1, 8, 16):  # QLoRA runs in one process
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
