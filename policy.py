"""The policy: model and tokenizer with the reserved tokens, rollouts as tensors, THE forward
pass, and every read of the model's confidence, shared by training and evaluation.

    policy = load_policy("Qwen/Qwen3-1.7B", device, torch.bfloat16)   # fp32 weights, bf16 compute
    batch = collate(rollouts, policy.tokenizer.pad_token_id)           # [N, L] right-padded
    fwd = forward(policy, batch)                                       # logp [N, L-1], the slot
    c = model_confidence(fwd, plan.model_read)                         # [N] the run's read of c (confidence.py)

Holds: `<CONF_HIGH>`/`<CONF_LOW>` as special tokens with initialised rows; `Batch` (collate);
compiled decoder layers for the update; the one forward, padded or packed, that gives
per-token log-probs and the slot's hidden states (after a read's teacher-forced tokens too),
from which a registered model read gives c; the no-grad passes that read c.
Does not hold: the reads themselves (confidence.py), the micro-batch plan, the padded and
packed layouts and their attention (kernels/packing.py), the losses (losses.py), credit or
the update (credo.py), sharding (infra/parallel.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import confidence
import rollout as ro
from adapters import lora, quant
from confidence import ConfidencePlan
from kernels import logprobs as logprob_kernels
from kernels import packing
from schema import Config

RESERVED_TOKENS = (ro.CONF_HIGH, ro.CONF_LOW)
RESERVED_INIT_WORDS = {ro.CONF_HIGH: "high", ro.CONF_LOW: "low"}


# --- The model and its reserved tokens --------------------------------------------------------


def compute_dtype(cfg: Config) -> torch.dtype:
    """The dtype of forward/backward compute: bf16 on GPU and fp32 on CPU for `auto`.

    Weights and optimizer state always stay fp32 (bf16 runs under autocast):
    at the paper's learning rate an AdamW update is ~1e-4 of a weight, below
    bf16's resolution (~4e-3), so bf16 master weights would silently not train.
    """
    if cfg.precision == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return {"bf16": torch.bfloat16, "fp32": torch.float32}[cfg.precision]


def add_reserved_tokens(model, tokenizer) -> tuple[int, int]:
    """Make <CONF_HIGH>/<CONF_LOW> single special tokens with embedding rows; return their ids.

    New ids land in the spare rows of the embedding matrix when it has them
    (Qwen3: 151,936 rows > 151,669 tokens), so the matrix is never resized down.
    Rows of newly added tokens start as the mean embedding of the pieces of
    "high" / "low" (input embedding, and output head when untied). Tokens that
    are already present (a CREDO checkpoint) are left as they are.
    """
    missing = [t for t in RESERVED_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
    ids = []
    for token in RESERVED_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"{token} encodes to {encoded}, not one id: the tokenizer does not treat it as special")
        ids.append(encoded[0])
    rows = model.get_input_embeddings().weight.shape[0]
    if max(ids) >= rows:
        model.resize_token_embeddings(len(tokenizer))  # grows only: the matrix had no spare rows left
    init_reserved_rows(model, tokenizer, missing)
    return ids[0], ids[1]


def init_reserved_rows(model, tokenizer, tokens) -> None:
    """Set the embedding rows (input, and output head when untied) of each reserved token in
    `tokens` to the mean embedding of the pieces of its word ("high" / "low")."""
    matrices = {id(m): m for m in (model.get_input_embeddings().weight, model.get_output_embeddings().weight)}
    with torch.no_grad():
        for token in tokens:
            pieces = tokenizer.encode(RESERVED_INIT_WORDS[token], add_special_tokens=False)
            new_id = tokenizer.convert_tokens_to_ids(token)
            for matrix in matrices.values():
                matrix[new_id] = matrix[pieces].mean(dim=0)


@dataclass
class Policy:
    """What every forward needs: the model (fp32 master weights; sharded in place under
    torchrun, parallel.shard_model), its tokenizer, the reserved ids, the compute dtype and
    the temperature the rollouts were sampled at (the log-probs are those of pi_T)."""

    model: torch.nn.Module
    tokenizer: object
    high_id: int  # <CONF_HIGH>
    low_id: int  # <CONF_LOW>
    dtype: torch.dtype  # forward/backward compute (compute_dtype): fp32 weights under autocast
    logprob_blocks: logprob_kernels.LogprobBlocks | None = None  # compiled (compile_update); None: eager
    temperature: float = 1.0  # log pi_T = log_softmax(logits / T) of the sampled tokens (sampling_temperature)

    def token_id(self, text: str) -> int:
        """The id of one token: the reserved pair's as this policy holds them, any other's by its tokenizer."""
        reserved = {ro.CONF_HIGH: self.high_id, ro.CONF_LOW: self.low_id}
        return reserved[text] if text in reserved else confidence.token_id(self.tokenizer, text)


def sampling_temperature(temperature: float) -> float:
    """The T of the trainer's log-probs for rollouts sampled at `temperature`: that T itself, so
    the policy gradient and eq:grpo's ratio are those of the policy that sampled (as TRL and
    verl do); 1 for greedy rollouts (T = 0), whose log-probs vLLM also reports at T = 1."""
    return float(temperature) if temperature > 0 else 1.0


def load_policy(
    model_dir: str,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    temperature: float = 1.0,
    weights_dtype: torch.dtype = torch.float32,
    quantize: str = "none",
) -> Policy:
    """The policy model and its tokenizer, with the reserved tokens in place; `temperature`: the
    rollouts' sampling temperature (sampling_temperature). Weights in fp32 (the master weights
    AdamW needs), or `weights_dtype` for a model nothing trains (a frozen reference). A LoRA
    run's checkpoint (adapters/lora.py) loads as its base model with its adapters applied.
    `quantize` (lora_quant): nf4 loads the base's linear layers in 4 bits (adapters/quant.py)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = lora.base_of(model_dir)
    if quantize == "none":
        model = AutoModelForCausalLM.from_pretrained(base, dtype=weights_dtype).to(device)
    else:  # bitsandbytes places the packed weights as it loads them: no .to() after
        settings = quant.quantization_config(quantize, dtype)
        model = AutoModelForCausalLM.from_pretrained(
            base, dtype=weights_dtype, quantization_config=settings, device_map={"": device}
        )
    high_id, low_id = add_reserved_tokens(model, tokenizer)
    if lora.is_adapter(model_dir):
        lora.apply_saved(model, model_dir, (high_id, low_id), dtype)
    packing.use_sequence_attention(model)
    return Policy(model, tokenizer, high_id, low_id, dtype, temperature=sampling_temperature(temperature))


# --- Rollouts as tensors ----------------------------------------------------------------------


@dataclass
class Batch:
    """Rollouts as right-padded tensors. Columns index *targets*: column k is the
    token at sequence position k + 1, predicted from position k."""

    input_ids: torch.Tensor  # [N, L]   prompt + completion, padded
    attention_mask: torch.Tensor  # [N, L]
    completion_mask: torch.Tensor  # [N, L-1] o_i: the completion tokens
    ans_mask: torch.Tensor  # [N, L-1] answer segment
    conf_mask: torch.Tensor  # [N, L-1] analysis segment (and a sampled slot token, conf_train=sampled)
    slot_pos: torch.Tensor  # [N]      position whose next-token distribution is the slot; -1: none
    prompt_len: torch.Tensor  # [N]    prompt tokens of each row (its first prompt_len ids)
    forced: int = 0  # tokens teacher-forced after each slot (a model read's, e.g. "0." for eq:digitexp)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: list[int]) -> Batch:
        """The given rows, trimmed to their longest sequence."""
        index = torch.tensor(rows, dtype=torch.long)
        width = int(self.attention_mask[index].sum(dim=1).max())
        ids, attention = (t[index, :width] for t in (self.input_ids, self.attention_mask))
        completion, ans, conf = (t[index, : width - 1] for t in (self.completion_mask, self.ans_mask, self.conf_mask))
        return Batch(ids, attention, completion, ans, conf, self.slot_pos[index], self.prompt_len[index], self.forced)


def collate(
    rollouts: list[ro.Rollout], pad_id: int, forced: list[int] | None = None, slot_token_scored: bool = False
) -> Batch:
    """Right-pad rollouts into a Batch.

    forced: token ids teacher-forced after the slot (a model read's, confidence.Read.forced):
    every rollout with a slot is cut at the slot and they are appended (not completion tokens),
    so that the slot column gives the first position the read reads and the p-th column to its
    right the position after p forced tokens ("0." for eq:digitexp). None: rows as sampled.
    slot_token_scored: a sampled slot token belongs to the confidence segment (conf_train=sampled).
    Only sampled tokens are scored: not the teacher-forced tokens, nor a tail close_slot wrote.
    """
    n, cut = len(rollouts), forced is not None
    completions = [
        r.completion_ids[: r.segments.slot] + forced if cut and r.segments.slot is not None else r.completion_ids
        for r in rollouts
    ]
    width = max(len(r.prompt_ids) + len(c) for r, c in zip(rollouts, completions))
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    completion, ans, conf = (torch.zeros((n, width - 1), dtype=torch.bool) for _ in range(3))
    slot_pos = torch.full((n,), -1, dtype=torch.long)
    for i, (r, ids) in enumerate(zip(rollouts, completions)):
        p, seg = len(r.prompt_ids), r.segments
        c = min(len(ids) - (len(forced) if forced is not None and seg.slot is not None else 0), r.sampled_len)
        input_ids[i, : p + len(ids)] = torch.tensor(r.prompt_ids + ids)
        attention[i, : p + len(ids)] = 1
        # completion token j sits at position p + j and is predicted from column p + j - 1
        completion[i, p - 1 : p - 1 + c] = True
        ans[i, p - 1 : p - 1 + seg.answer_end] = True
        scored_slot = int(slot_token_scored and seg.slot is not None and seg.slot < c)
        conf[i, p - 1 + seg.analysis_start : p - 1 + min(seg.analysis_end + scored_slot, c)] = True
        if seg.slot is not None:
            slot_pos[i] = p - 1 + seg.slot  # position of completion token slot-1 (the end of <confidence>)
    prompt_len = torch.tensor([len(r.prompt_ids) for r in rollouts], dtype=torch.long)
    return Batch(input_ids, attention, completion, ans, conf, slot_pos, prompt_len, len(forced or ()))


def compile_layers(model, backend: str = "inductor") -> None:
    """Run each decoder layer's forward through torch.compile in train mode (idempotent).

    What it buys on a GPU: the layer's elementwise work (RMSNorm, rotary, SiLU x up, residual
    adds, autocast's casts) becomes a few fused kernels around the matmuls instead of dozens
    of separate ones (an H100 profile of 2026-11-24, 1.7B shape, 1 x 4,096: MFU 0.189 -> 0.268).
    Shapes are dynamic (every micro-batch has another length: one compilation, no recompiles).
    Attention stays eager (sequence_attention is excluded), so each layer is two graphs
    around it. Only train mode is compiled: generation on this model (engine=hf, eval) runs
    one-token decode steps through a KV cache, where compiling would recompile for little.
    Numerics: fused kernels reorder fp32 arithmetic (about 1e-6 relative), hence the switch
    (compile_layers). Activation checkpointing wraps the compiled forward, FSDP2's hooks too.
    """
    for layer in model.get_decoder().layers:
        if getattr(layer, "_credo_compiled", False):
            continue
        eager = layer.forward
        compiled = torch.compile(eager, backend=backend, dynamic=True)

        def forward(*args, _layer=layer, _eager=eager, _compiled=compiled, **kwargs):
            return (_compiled if _layer.training else _eager)(*args, **kwargs)

        layer.forward, layer._credo_compiled = forward, True


def compile_update(policy: Policy, backend: str = "inductor") -> None:
    """What `compile_layers: true` (or auto, on CUDA) compiles for the update: the decoder
    layers (compile_layers) and the log-prob head's blocks (logprob_kernels.compile_logprob_blocks),
    the two places where elementwise work between matmuls costs a GPU most. Idempotent."""
    compile_layers(policy.model, backend)
    if policy.logprob_blocks is None:
        policy.logprob_blocks = logprob_kernels.compile_logprob_blocks(backend)


# --- The forward pass -----------------------------------------------------------------------


class Forward(NamedTuple):
    """What one forward pass gives the loss."""

    logp: torch.Tensor | None  # [N, L-1] log-probs of the completion tokens (fp32; 0 elsewhere)
    slot: confidence.Slot  # the hidden states at each slot (and after its forced tokens): what a read reads
    has_slot: torch.Tensor  # [N] bool, on the device: the row has a slot


def forward(
    policy: Policy, batch: Batch, packed: bool = False, detach_readout: bool = False, logprobs: bool = True
) -> Forward:
    """One pass: per-token log-probs and the slot, from which `model_confidence` reads c.

    packed: the micro-batch runs as one padding-free row, a group's prompt computed once
    (packing.run_layers); the outputs are laid out as in the padded case.
    logprobs=False: a confidence-only pass (a no-grad read of c): nothing goes through the
    vocabulary projection, and Forward.logp is None.
    detach_readout: the slot's hidden states are detached, so the gradient of c reaches only
    the output head (the readout's two rows of H and L: the auxiliary head of tab:decompose).
    Computed in policy.dtype (autocast) over fp32 weights; logp is fp32, and so is every read of c."""
    model, dtype = policy.model, policy.dtype
    lm_head = lora.output_head(model)  # kernels.logprobs.Head: [V, H], any trained rows beside it
    with torch.autocast(model.device.type, dtype=dtype, enabled=dtype != torch.float32):
        states = packing.run_layers(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.prompt_len,
            packed,
            policy.logprob_blocks,
            policy.temperature,
        )
        logp = states.logprobs(lm_head, batch.input_ids, batch.completion_mask) if logprobs else None  # [N, L-1]
    # The slot, and the position after each teacher-forced token: a read of c computes on them in
    # fp32, outside autocast (eq:readout's z_H - z_L is a difference of two close logits)
    hidden_slot = tuple(states.at(batch.slot_pos + p) for p in range(batch.forced + 1))  # P x [N, H]
    if detach_readout:
        hidden_slot = tuple(h.detach() for h in hidden_slot)
    slot = confidence.Slot(hidden_slot, lm_head, policy.token_id)
    return Forward(logp, slot, packing.to_device(batch.slot_pos, model.device) >= 0)


def training_batch(rollouts: list[ro.Rollout], tokenizer, plan: ConfidencePlan) -> Batch:
    """The Batch the update trains on: the model read's tokens teacher-forced after each slot
    (plan.forced: "0." for eq:digitexp), and the sampled slot token in the confidence segment for
    conf_train=sampled (plan.samples_slot_token)."""
    forced = [confidence.token_id(tokenizer, token) for token in plan.forced]
    return collate(rollouts, tokenizer.pad_token_id, forced=forced or None, slot_token_scored=plan.samples_slot_token)


# --- The model's c: a registered model read (confidence.py) of a forward's slot -----------------


def model_confidence(fwd: Forward, read: confidence.Read) -> torch.Tensor:
    """[N] the model's c from a forward by the model read `read` (ConfidencePlan.model_read),
    with its gradient; 0.5 where a row has no slot (no c there: every consumer masks it)."""
    return torch.where(fwd.has_slot, read.of_slot(fwd.slot), 0.5)


def confidences(
    policy: Policy, batch: Batch, micro: list[list[int]], packed: bool, read: confidence.Read
) -> torch.Tensor:
    """[N] the model's c of every row of a batch by the model read `read`, detached, on the host,
    from a confidence-only pass (no vocabulary projection for the completion) over the
    micro-batches `micro` (for a training batch, the update's own); NaN where a row has no slot."""
    c = torch.full((len(batch),), float("nan"))
    with torch.no_grad():
        for rows in micro:
            c[rows] = model_confidence(forward(policy, batch.select(rows), packed=packed, logprobs=False), read).cpu()
    return torch.where(batch.slot_pos >= 0, c, float("nan"))


def slot_confidences(
    policy: Policy, rollouts: list[ro.Rollout], read: confidence.Read, budget: int, packed: bool
) -> torch.Tensor:
    """[N] c of each rollout by the model read `read`, from a no-grad pass over prompt +
    completion up to its slot (rollout.at_slot: a tag that merged with a numeral sampled after it is
    closed first) + the read's teacher-forced tokens; NaN where there is no slot. What eval.py
    reads, and a baseline's eq:sw weights (tab:sw_baseline)."""
    if rollouts is None:
        raise ValueError(
            "a pass at the slot reads the rollouts: credo.make_step(rollouts=) for a baseline's eq:sw weights"
        )
    tokenizer = policy.tokenizer
    forced = [policy.token_id(token) for token in read.forced]
    batch = collate(ro.at_slot(tokenizer, rollouts), tokenizer.pad_token_id, forced=forced or None)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    return confidences(policy, batch, packing.micro_batches(lengths, budget, 1, packed=packed), packed, read)
