"""LoRA for a one-GPU fork: rank-r adapters on the decoder's projections, and the reserved tokens'
rows of the embedding and the output head trained in full, over a frozen model; the merged weights
the engine is pushed; the adapter files that PEFT loads.

    lora.apply(model, cfg, (high_id, low_id))   # in place; adapters start at B = 0: the same model
    head = lora.output_head(model)              # kernels.logprobs.Head: the matrix, the trained rows beside it
    with lora.adapters_off(model): ...          # the starting model: a KL term's reference, no second copy
    engine_weights = lora.merged_weights(model) # (HF name, full tensor): any model, with or without LoRA
    lora.save_adapter(state, ckpt_dir, model)   # adapter_config.json + adapter_model.safetensors (PEFT's)
    lora.load_adapter(model, ckpt_dir)          # what save_adapter wrote, back into an applied model

Why the reserved rows are separate parameters: `<CONF_HIGH>`/`<CONF_LOW>` are new tokens, and no
adapter on a projection can learn a row of the embedding or of the head. Their rows are read
through forward hooks (the embedding's output, the head's logits for HF generation) and through
`output_head` (the trainer's log-probs and eq:readout's slot read the head's matrix directly,
with the rows beside it: no [V, H] copy with the rows in place). The rows are whole rows, as
PEFT's `trainable_token_indices` saves them (`trainable_tokens_delta` holds the rows' values,
not a difference). A tied head shares one pair.

The adapters and both hooks share one Switch: `adapters_off` turns them all off, which gives
back the starting model exactly (B = 0 and the rows' start are the model's), so a KL term's
reference is a no-grad forward of the same weights.

Precision: the wrapped projections' frozen weights, and an untied head, are stored in the
compute dtype (bf16 on a GPU: autocast would cast them to it anyway, so the forward is the
same; the log-probs accumulate in fp32, the readout's two rows are upcast); norms and the
embedding stay fp32, as in full fine-tuning. Adapters and rows are fp32 master weights. Under
QLoRA (lora_quant=nf4, adapters/quant.py) the projections stay packed in 4 bits and are
dequantized inside each matmul.

Not here: the config keys (schema.py), the optimizer (credo.make_optimizer takes what trains),
the checkpoint's other files (infra/checkpoint.py), the memory estimate (infra/memfit.py).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from adapters import quant
from kernels import logprobs as logprob_kernels
from schema import PEFT_ADAPTER_CONFIG, Config

ADAPTER_CONFIG, ADAPTER_WEIGHTS = PEFT_ADAPTER_CONFIG, "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PEFT's names: the wrapped model's, under base_model.model
ROWS_KEY = "token_adapter.trainable_tokens_delta"  # PEFT's TrainableTokens weight, under the wrapped module


def targets_of(cfg: Config) -> list[str]:
    """lora_targets as a list of module names."""
    targets = cfg.lora_targets.split(",") if isinstance(cfg.lora_targets, str) else list(cfg.lora_targets)
    return [t.strip() for t in targets if t.strip()]


class Switch:
    """Whether a model's adapters and reserved-row hooks are on (adapters_off turns them off)."""

    def __init__(self) -> None:
        self.on = True


class LoRALinear(nn.Module):
    """y = base(x) + (alpha / r) B A x: the frozen `base_layer` and the adapters `lora_A` [r, in] and
    `lora_B` [out, r], named as PEFT names them. B starts at 0, A as PEFT initialises it. With the
    switch off, y = base(x)."""

    def __init__(self, base_layer: nn.Linear, rank: int, alpha: float, dtype: torch.dtype, switch: Switch):
        super().__init__()
        self.switch = switch
        base_layer.requires_grad_(False)
        # A 4-bit base (QLoRA, adapters/quant.py) keeps its packed weight: its layer dequantizes to dtype itself.
        self.base_layer = base_layer if quant.is_quantized(base_layer.weight) else base_layer.to(dtype)
        device = base_layer.weight.device
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False, device=device, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False, device=device, dtype=torch.float32)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.switch.on:
            return self.base_layer(x)
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling

    def merged_weight(self, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """[out, in] fp32: the base weight plus the scaled adapter product (full tensors given)."""
        return base.float() + (b.float() @ a.float()) * self.scaling


class ReservedRows(nn.Module):
    """The trained rows [K, H] (fp32) of the reserved ids [K], over a frozen matrix."""

    def __init__(self, matrix: torch.Tensor, ids: tuple[int, ...]):
        super().__init__()
        self.id_list = tuple(ids)
        self.register_buffer("ids", torch.tensor(ids, dtype=torch.long, device=matrix.device), persistent=False)
        self.rows = nn.Parameter(matrix.detach()[list(ids)].float().clone())

    def over(self, matrix: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[V, H] `matrix` with the reserved rows in place (a copy; differentiable in the rows)."""
        rows = self.rows if rows is None else rows
        return matrix.index_copy(0, self.ids, rows.to(matrix.dtype))


def _embed_hook(reserved: ReservedRows, switch: Switch):
    def hook(module, args, out):  # out: [..., H] the embedding of args[0], ids [...]
        if not switch.on:
            return out
        hit = args[0][..., None] == reserved.ids  # [..., K]
        rows = reserved.rows.to(out.dtype)[hit.int().argmax(dim=-1)]  # [..., H]
        return torch.where(hit.any(dim=-1, keepdim=True), rows, out)

    return hook


def _head_hook(reserved: ReservedRows, switch: Switch):
    def hook(module, args, out):  # out: [..., V] logits of args[0], hidden [..., H]
        if not switch.on:
            return out
        hidden = args[0]
        columns = hidden.to(reserved.rows.dtype) @ reserved.rows.T  # [..., K]
        return out.index_copy(-1, reserved.ids, columns.to(out.dtype))

    return hook


def apply(model, cfg: Config, reserved_ids: tuple[int, ...], compute_dtype: torch.dtype = torch.float32) -> None:
    """Turn `model` (a causal LM with the reserved tokens in place) into LoRA's in place, with the
    run's lora_rank, lora_alpha and lora_targets (apply_settings)."""
    apply_settings(model, cfg.lora_rank, cfg.lora_alpha, targets_of(cfg), reserved_ids, compute_dtype)


def apply_settings(
    model, rank: int, alpha: float, targets: list[str], reserved_ids: tuple[int, ...], compute_dtype: torch.dtype
) -> None:
    """Every module named in `targets` in the decoder gets LoRALinear adapters; the reserved rows
    of the embedding (and of an untied head) become ReservedRows under the decoder (so FSDP2
    shards them with the embedding); every other parameter is frozen, an untied head stored in
    `compute_dtype`."""
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"LoRA needs a rank >= 1, got {rank!r}")
    if not alpha > 0:
        raise ValueError(f"lora_alpha must be > 0, got {alpha!r}")
    targets = set(targets)
    if not targets:
        raise ValueError("lora_targets is empty: name the decoder's linear modules that get adapters")
    model.requires_grad_(False)
    decoder, switch = model.get_decoder(), Switch()
    found, names = set(), {n.rpartition(".")[2] for n, m in decoder.named_modules() if isinstance(m, nn.Linear)}
    for name, module in list(decoder.named_modules()):
        leaf = name.rpartition(".")[2]
        if leaf in targets and isinstance(module, nn.Linear):
            parent = decoder.get_submodule(name.rpartition(".")[0]) if "." in name else decoder
            setattr(parent, leaf, LoRALinear(module, rank, alpha, compute_dtype, switch))
            found.add(leaf)
    missing = sorted(targets - found)
    if missing:
        linear = sorted(names)
        raise ValueError(
            f"lora_targets names {missing}, which are not linear modules of {type(model).__name__}'s decoder; "
            f"its linear modules: {linear}"
        )
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    decoder.credo_embed_rows = ReservedRows(embedding.weight, reserved_ids)
    embedding.register_forward_hook(_embed_hook(decoder.credo_embed_rows, switch))
    if head.weight is not embedding.weight:
        decoder.credo_head_rows = ReservedRows(head.weight, reserved_ids)
        head.to(compute_dtype)
    head.register_forward_hook(_head_hook(head_rows(model), switch))
    model.credo_lora_switch = switch
    model.credo_lora = {"rank": rank, "alpha": float(alpha), "targets": sorted(targets)}


def applied(model) -> bool:
    """Whether lora.apply turned this model into LoRA's."""
    return hasattr(model, "credo_lora")


def head_rows(model) -> ReservedRows:
    """The head's reserved rows: its own when untied, the embedding's when tied."""
    decoder = model.get_decoder()
    return getattr(decoder, "credo_head_rows", None) or decoder.credo_embed_rows


def output_head(model) -> logprob_kernels.Head:
    """The output head as the trainer reads it (logits = hidden @ head.T): the model's matrix and,
    under LoRA with the adapters on, the trained reserved rows beside it (their gradient flows
    through them; the matrix gets none and is not copied)."""
    weight = model.get_output_embeddings().weight
    if not applied(model) or not model.credo_lora_switch.on:
        return logprob_kernels.Head(weight)
    rows = head_rows(model)
    return logprob_kernels.Head(weight, rows.id_list, rows.rows)


@contextlib.contextmanager
def adapters_off(model):
    """Within it, `model` is the starting model: every adapter and both reserved-row hooks off, and
    output_head without the trained rows. For a no-grad read (a KL term's reference)."""
    if not applied(model):
        raise ValueError("adapters_off needs a LoRA model (lora.apply); this one has no adapters")
    switch = model.credo_lora_switch
    if not switch.on:
        raise RuntimeError("the adapters are already off: adapters_off does not nest")
    switch.on = False
    try:
        yield model
    finally:
        switch.on = True


def trainable(model) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of what trains: every parameter of a full fine-tuning; LoRA's adapters and
    reserved rows."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly) FSDP2-sharded parameter; a collective for a DTensor."""
    tensor = tensor.detach()
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF checkpoint name, full tensor) of every weight, one at a time in module order: a model's
    parameters as they are, or under LoRA the merged projections (W + (alpha / r) B A, fp32; a 4-bit
    W of QLoRA dequantized) and the embedding and head with the trained rows in place. What the
    engine is pushed, and what a merged checkpoint holds. Under FSDP2 each tensor is all-gathered:
    every rank iterates in step."""
    lora = applied(model)
    decoder = model.get_decoder()
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    rows = {}
    if lora:
        rows = {id(embedding): decoder.credo_embed_rows, id(head): head_rows(model)}
    for name, param in model.named_parameters(remove_duplicate=True):
        if lora and (".lora_A." in name or ".lora_B." in name or ".credo_" in name):
            continue
        tensor = quant.dequantized(param) if quant.is_quantized(param) else _full(param)
        if id(param) in rows:
            tensor = rows[id(param)].over(tensor.float(), _full(rows[id(param)].rows))
        module_name, _, leaf = name.rpartition(".")
        if module_name.endswith(".base_layer"):
            module_name = module_name.removesuffix(".base_layer")
            wrapper = model.get_submodule(module_name)
            if leaf == "weight":
                tensor = wrapper.merged_weight(tensor, _full(wrapper.lora_A.weight), _full(wrapper.lora_B.weight))
            name = f"{module_name}.{leaf}"
        yield name, tensor


# --- PEFT's files --------------------------------------------------------------------------------


def adapter_config(model, base: str, reserved_ids: tuple[int, ...]) -> dict:
    """adapter_config.json as PEFT writes it for these adapters and reserved rows."""
    settings = model.credo_lora
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    tokens = {"embed_tokens": list(reserved_ids)} | ({} if tied else {"lm_head": list(reserved_ids)})
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": settings["rank"],
        "lora_alpha": settings["alpha"],
        "lora_dropout": 0.0,
        "target_modules": settings["targets"],
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "trainable_token_indices": tokens,
    }


def peft_name(name: str) -> str | None:
    """The PEFT key of one of our trainable parameters' names; None for any other parameter."""
    if ".lora_A." in name or ".lora_B." in name:
        return PEFT_PREFIX + name
    if name.endswith("credo_embed_rows.rows"):
        return PEFT_PREFIX + name.replace("credo_embed_rows.rows", f"embed_tokens.{ROWS_KEY}")
    if name.endswith("credo_head_rows.rows"):
        return PEFT_PREFIX + f"lm_head.{ROWS_KEY}"
    return None


def save_adapter(state: dict[str, torch.Tensor], out_dir: Path, model, base: str, reserved_ids) -> None:
    """Write the adapters and reserved rows of `state` (a full state dict of an applied model, by
    its parameter names) as PEFT's adapter_model.safetensors, and adapter_config.json."""
    weights = {peft_name(k): v.detach().float().contiguous() for k, v in state.items() if peft_name(k)}
    save_file(weights, str(Path(out_dir) / ADAPTER_WEIGHTS))
    base = str(Path(base).resolve()) if Path(base).exists() else base  # a local base, from any directory
    config = adapter_config(model, base, tuple(reserved_ids))
    (Path(out_dir) / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))


def is_adapter(path) -> bool:
    """Whether a directory holds LoRA adapters (a LoRA run's checkpoint) rather than full weights."""
    return (Path(path) / ADAPTER_CONFIG).exists()


def read_adapter_config(path) -> dict:
    return json.loads((Path(path) / ADAPTER_CONFIG).read_text())


def apply_saved(model, path, reserved_ids: tuple[int, ...], compute_dtype: torch.dtype) -> None:
    """Apply the LoRA settings a checkpoint's adapter_config.json names, and load its weights."""
    saved = read_adapter_config(path)
    apply_settings(model, saved["r"], saved["lora_alpha"], saved["target_modules"], reserved_ids, compute_dtype)
    load_adapter(model, path)


def base_of(path) -> str:
    """Where the full weights of `path` are: the base model an adapter was trained on, else `path`."""
    return read_adapter_config(path)["base_model_name_or_path"] if is_adapter(path) else str(path)


def load_adapter(model, path) -> None:
    """Copy the adapters and reserved rows saved in `path` into an applied model; every trainable
    parameter must be found there, and nothing else may be."""
    saved = load_file(str(Path(path) / ADAPTER_WEIGHTS))
    ours = {peft_name(name): p for name, p in model.named_parameters() if p.requires_grad}
    if set(saved) != set(ours):
        raise ValueError(
            f"{path}: the adapter's weights do not match this model's (missing {sorted(set(ours) - set(saved))[:3]}, "
            f"unexpected {sorted(set(saved) - set(ours))[:3]}): was it saved by a run of this model and lora settings?"
        )
    with torch.no_grad():
        for key, param in ours.items():
            param.copy_(saved[key].to(param.dtype))


def for_run(model, cfg: Config, reserved_ids: tuple[int, ...], compute_dtype: torch.dtype) -> None:
    """A run's model as its config says: LoRA applied for lora_rank > 0. A model loaded from a LoRA
    checkpoint (resume) already is, and its settings must be the run's."""
    if applied(model):
        saved, wanted = model.credo_lora, {"rank": cfg.lora_rank, "alpha": float(cfg.lora_alpha)}
        wanted["targets"] = sorted(set(targets_of(cfg)))
        if saved != wanted:
            raise ValueError(
                f"the checkpoint's LoRA settings {saved} are not this run's (lora_rank={cfg.lora_rank}, "
                f"lora_alpha={cfg.lora_alpha}, lora_targets={cfg.lora_targets}): resume with the settings it was "
                f"trained with"
            )
    elif cfg.lora_rank:
        apply(model, cfg, reserved_ids, compute_dtype)
