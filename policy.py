"""The policy: model and tokenizer with the reserved tokens, rollouts as tensors, THE forward
pass, and every read of the model's confidence, shared by training and evaluation.

    policy = load_policy("Qwen/Qwen3-1.7B", device, torch.bfloat16)   # fp32 weights, bf16 compute
    batch = collate(rollouts, policy.tokenizer.pad_token_id)           # [N, L] right-padded
    fwd = forward(policy, batch)                                       # logp [N, L-1], the slot
    c = model_confidence(fwd, plan.model_read)                         # [N] the run's read of c (confidence.py)

Holds: `<CONF_HIGH>`/`<CONF_LOW>` as special tokens with initialised rows; `Batch` (collate),
the micro-batch plan (cut by tokens, whole groups); compiled decoder layers for the update;
the one forward, padded or packed, that gives per-token log-probs and the slot's hidden
states (after a read's teacher-forced tokens too), from which a registered model read gives c
(indexing computed on the host, so it never waits for the GPU); the no-grad passes that read c.
Does not hold: the reads themselves (confidence.py), the packed row's layout and attention
(kernels/packing.py), the losses (losses.py), credit or the update (credo.py), sharding
(infra/parallel.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch._dynamo.decorators import mark_static, mark_unbacked  # not re-exported by torch._dynamo in 2.13
from transformers import AutoModelForCausalLM, AutoTokenizer

import confidence
import rollout as ro
from config import ConfidencePlan
from kernels import logprobs as logprob_kernels
from kernels.packing import pack_rows, use_sequence_attention
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
) -> Policy:
    """The policy model and its tokenizer, with the reserved tokens in place; `temperature`: the
    rollouts' sampling temperature (sampling_temperature). Weights in fp32 (the master weights
    AdamW needs), or `weights_dtype` for a model nothing trains (a frozen reference)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=weights_dtype).to(device)
    high_id, low_id = add_reserved_tokens(model, tokenizer)
    use_sequence_attention(model)
    return Policy(model, tokenizer, high_id, low_id, dtype, temperature=sampling_temperature(temperature))


def reserved_ids(tokenizer) -> set[int]:
    """The ids of <CONF_HIGH> and <CONF_LOW>."""
    return {tokenizer.convert_tokens_to_ids(t) for t in RESERVED_TOKENS}


# --- Rollouts as tensors: Batch, micro-batches, packing -----------------------------------


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
        return Batch(
            self.input_ids[index, :width],
            self.attention_mask[index, :width],
            self.completion_mask[index, : width - 1],
            self.ans_mask[index, : width - 1],
            self.conf_mask[index, : width - 1],
            self.slot_pos[index],
            self.prompt_len[index],
            self.forced,
        )


def micro_batches(lengths: list[int], budget: int, group: int, packed: bool) -> list[list[int]]:
    """Row indices of each micro-batch: few micro-batches of at most `budget` tokens each.

    A micro-batch costs the sum of its lengths when packed, else its rows x its longest row
    (padding counts). Units are placed in increasing cost, and a micro-batch is closed when the
    next unit would overflow it. The units are whole groups of `group` rows where a group fits
    the budget, so that a packed row holds the group's shared prompt once (packing.pack_rows);
    the rows of a group that does not fit are placed one by one after them. Credit never depends
    on the plan (it is computed for the whole batch first), and the order never changes a
    gradient (the loss is a sum over rows).

    >>> micro_batches([5, 1, 4, 2], budget=6, group=1, packed=True)
    [[1, 3], [2], [0]]
    >>> micro_batches([5, 1, 4, 2, 1, 1], budget=6, group=2, packed=True)
    [[4, 5], [0, 1], [2, 3]]
    >>> micro_batches([5, 1, 4, 2, 1, 1], budget=5, group=2, packed=True)  # group (0, 1) is split
    [[4, 5], [1, 3], [2], [0]]
    >>> micro_batches([5, 1, 4, 2], budget=8, group=1, packed=False)   # 2 x 2, 1 x 4, 1 x 5
    [[1, 3], [2], [0]]
    """
    for row, length in enumerate(lengths):
        if length > budget:
            raise ValueError(
                f"rollout {row} has {length} tokens, more than micro_batch_tokens = {budget}; raise "
                f"micro_batch_tokens to at least max_prompt_tokens + max_completion_tokens + 2"
            )
    if len(lengths) % group:
        raise ValueError(f"{len(lengths)} rows are not whole groups of {group}")

    def cost(rows: list[int]) -> int:
        return sum(lengths[i] for i in rows) if packed else len(rows) * max(lengths[i] for i in rows)

    def fill(units: list[list[int]]) -> list[list[int]]:
        plan, current = [], []
        for unit in units:
            if current and cost(current + unit) > budget:
                plan.append(current)
                current = []
            current = current + unit
        return plan + ([current] if current else [])

    units = [list(range(q * group, (q + 1) * group)) for q in range(len(lengths) // group)]
    whole = sorted((u for u in units if cost(u) <= budget), key=lambda u: (cost(u), u[0]))
    split = sorted((i for u in units if cost(u) > budget for i in u), key=lambda i: (lengths[i], i))
    return fill(whole) + fill([[i] for i in split])


def pad_fraction(lengths: list[int], batches: list[list[int]]) -> float:
    """Share of the token slots of the built micro-batches that are padding."""
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1.0 - sum(lengths) / slots


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

    def completion_of(r: ro.Rollout) -> list[int]:
        if forced is not None and r.segments.slot is not None:
            return r.completion_ids[: r.segments.slot] + list(forced)
        return r.completion_ids

    n = len(rollouts)
    completions = [completion_of(r) for r in rollouts]
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


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: a blocking host-to-GPU copy
    synchronises the stream first, which would let the GPU drain before every micro-batch.
    The host tensors copied here are never written afterwards, so the asynchronous copy is safe."""
    return tensor.to(device, non_blocking=True)


class Forward(NamedTuple):
    """What one forward pass gives the loss."""

    logp: torch.Tensor | None  # [N, L-1] log-probs of the completion tokens (fp32; 0 elsewhere)
    slot: confidence.Slot  # the hidden states at each slot (and after its forced tokens): what a read reads
    has_slot: torch.Tensor  # [N] bool, on the device: the row has a slot


def forward(
    policy: Policy, batch: Batch, packed: bool = False, detach_readout: bool = False, logprobs: bool = True
) -> Forward:
    """One pass: per-token log-probs and the slot, from which `model_confidence` reads c.

    logprobs=False: a confidence-only pass (a no-grad read of c): no column goes through the
    vocabulary projection, and Forward.logp is None.

    packed: the micro-batch runs as one padding-free row (pack_rows) in which rows with the
    same prompt share its tokens, attended by sequence_attention (which this switches the
    model to), so no compute goes to padding and a group's prompt is computed once. The
    outputs are laid out as in the padded case.
    detach_readout: the slot's hidden states are detached, so the gradient of c reaches only
    the output head (the readout's two rows of H and L: the auxiliary head of tab:decompose).
    Computed in policy.dtype (autocast) over fp32 weights; logp is fp32, and so is every read of c
    (confidence.Slot)."""
    model, dtype = policy.model, policy.dtype
    device = model.device
    completion = batch.completion_mask  # [N, L-1] the scored columns (host)
    if not logprobs:
        completion = torch.zeros_like(completion)
    slot_pos, completion_dev = to_device(batch.slot_pos, device), to_device(completion, device)  # [N], [N, L-1]
    lm_head = model.lm_head.weight  # [V, H]
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        if packed:
            # Everything that indexes the packed row is computed here on the host, so the
            # forward never waits for the GPU to learn a boundary or a count.
            packing = pack_rows(batch.input_ids, batch.attention_mask, batch.prompt_len)
            ids = to_device(packing.ids, device)  # [1, S]
            # A mask of ones keeps transformers from building an [S, S] mask
            # (sequence_attention separates the sequences by their segments instead).
            use_sequence_attention(model)
            segments = packing.segments
            # compile_layers' graphs take the segments' count as a size like any other: unbacked,
            # so that no guard ties it to another size that happens to be equal (a recompile)
            mark_unbacked(segments, 0)
            mark_static(segments, 1)
            hidden = model.model(
                input_ids=ids,
                position_ids=to_device(packing.positions, device),
                attention_mask=torch.ones_like(ids),
                credo_segments=segments,
                use_cache=False,
            ).last_hidden_state  # [1, S, H]
            if logprobs:
                columns = torch.arange(batch.input_ids.shape[1] - 1).expand(len(batch), -1)  # [N, L-1]
                at = to_device(packing.index(columns)[completion], device)  # [M] the scored columns' positions
                targets = to_device(batch.input_ids[:, 1:][completion], device)  # [M] the tokens they predict
                scored = logprob_kernels.selected_logprobs(
                    hidden[0, at], lm_head, targets, blocks=policy.logprob_blocks, temperature=policy.temperature
                )  # [M]
                logp = torch.zeros(completion.shape, device=device).masked_scatter(completion_dev, scored)

            def hidden_at(pos: torch.Tensor) -> torch.Tensor:  # host [N] -> [N, H]
                return hidden[0, to_device(packing.index(pos.clamp(min=0)), device)]
        else:
            attention = to_device(batch.attention_mask, device)
            position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)
            ids = to_device(batch.input_ids, device)
            hidden = model.model(
                input_ids=ids, attention_mask=attention, position_ids=position_ids, use_cache=False
            ).last_hidden_state  # [N, L, H]
            logp = logprob_kernels.token_logprobs(
                hidden,
                lm_head,
                ids,
                score_mask=completion,
                blocks=policy.logprob_blocks,
                temperature=policy.temperature,
            )  # [N, L-1]

            def hidden_at(pos: torch.Tensor) -> torch.Tensor:  # host [N] -> [N, H]
                return hidden[torch.arange(len(batch), device=device), to_device(pos.clamp(min=0), device)]

    # The slot, and the position after each teacher-forced token: a read of c computes on them in
    # fp32, outside autocast (eq:readout's z_H - z_L is a difference of two close logits)
    hidden_slot = tuple(hidden_at(batch.slot_pos + p) for p in range(batch.forced + 1))  # P x [N, H]
    if detach_readout:
        hidden_slot = tuple(h.detach() for h in hidden_slot)
    slot = confidence.Slot(hidden_slot, lm_head, policy.token_id)
    return Forward(logp if logprobs else None, slot, slot_pos >= 0)


def training_batch(rollouts: list[ro.Rollout], tokenizer, plan: ConfidencePlan) -> Batch:
    """The Batch the update trains on: the model read's tokens teacher-forced after each slot
    (plan.forced: "0." for eq:digitexp), and the sampled slot token in the confidence segment for
    conf_train=sampled (plan.samples_slot_token)."""
    forced = [confidence.token_id(tokenizer, token) for token in plan.forced]
    return collate(rollouts, tokenizer.pad_token_id, forced=forced or None, slot_token_scored=plan.samples_slot_token)


def at_slot(tokenizer, rollouts: list[ro.Rollout]) -> list[ro.Rollout]:
    """Rollouts whose numeral was sampled as text, cut right after <confidence> (ro.through_slot,
    closed where the numeral merged with the tag) and parsed like the readout channel: what
    eq:digitexp teacher-forces "0." after. A rollout that already ends at its slot (a readout
    rollout, on any prompt) is kept as it was parsed, so this is idempotent."""
    out = []
    for r in rollouts:
        if r.segments.slot is not None and r.segments.slot == len(r.completion_ids):
            out.append(r)
            continue
        ids, repaired = ro.through_slot(tokenizer, r.completion_ids)
        out.append(
            replace(
                r,
                completion_ids=ids,
                slot_repaired=repaired or r.slot_repaired,
                segments=ro.parse_segments(tokenizer, ids, "readout", ""),
            )
        )
    return out


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
    completion up to its slot (at_slot: a tag that merged with a numeral sampled after it is
    closed first) + the read's teacher-forced tokens; NaN where there is no slot. What eval.py
    reads, and a baseline's eq:sw weights (tab:sw_baseline)."""
    tokenizer = policy.tokenizer
    forced = [policy.token_id(token) for token in read.forced]
    batch = collate(at_slot(tokenizer, rollouts), tokenizer.pad_token_id, forced=forced or None)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    return confidences(policy, batch, micro_batches(lengths, budget, 1, packed=packed), packed, read)
