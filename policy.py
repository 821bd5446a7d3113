"""The policy: model and tokenizer with the reserved tokens, rollouts as tensors, THE forward
pass, and every read of the model's confidence, shared by training and evaluation.

    policy = load_policy("Qwen/Qwen3-1.7B", device, torch.bfloat16)   # fp32 weights, bf16 compute
    batch = collate(rollouts, policy.tokenizer.pad_token_id)           # [N, L] right-padded
    fwd = forward(policy, batch)                                       # logp [N, L-1], z_diff [N]
    c = model_confidence(fwd)                                          # [N] sigmoid(z_H - z_L), eq:readout

Holds: `<CONF_HIGH>`/`<CONF_LOW>` as special tokens with initialised rows; `Batch` (collate),
the micro-batch plan (cut by tokens, whole groups); compiled decoder layers for the update;
the one forward, padded or packed, that gives per-token log-probs, the readout `z_H - z_L`
at the slot and eq:digitexp (indexing computed on the host, so it never waits for the GPU);
the no-grad confidence reads of evaluation.
Does not hold: the packed row's layout and attention (kernels/packing.py), the losses (losses.py),
credit or the update (credo.py), sharding (infra/parallel.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch._dynamo.decorators import mark_static, mark_unbacked  # not re-exported by torch._dynamo in 2.13
from transformers import AutoModelForCausalLM, AutoTokenizer

import losses
import rollout as ro
from kernels import logprobs as logprob_kernels
from kernels.packing import pack_rows, use_sequence_attention
from methods import registrar
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


def sampling_temperature(temperature: float) -> float:
    """The T of the trainer's log-probs for rollouts sampled at `temperature`: that T itself, so
    the policy gradient and eq:grpo's ratio are those of the policy that sampled (as TRL and
    verl do); 1 for greedy rollouts (T = 0), whose log-probs vLLM also reports at T = 1."""
    return float(temperature) if temperature > 0 else 1.0


def load_policy(
    model_dir: str, device: torch.device, dtype: torch.dtype = torch.float32, temperature: float = 1.0
) -> Policy:
    """The policy model (fp32 master weights) and its tokenizer, with the reserved tokens in place;
    `temperature`: the rollouts' sampling temperature (sampling_temperature)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
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
    digit_pos: torch.Tensor | None = None  # [N] decimal position after a teacher-forced "0." (eq:digitexp); -1: none
    digit_ids: torch.Tensor | None = None  # [10] token ids of "0".."9"

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
            None if self.digit_pos is None else self.digit_pos[index],
            self.digit_ids,
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


def digit_token_ids(tokenizer) -> tuple[list[int], int]:
    """Ids of "0".."9" and of "." (each must be a single token) for eq:digitexp."""

    def single(text: str) -> int:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"the digit expectation needs {text!r} to be one token; this tokenizer gives {ids}")
        return ids[0]

    return [single(str(d)) for d in range(10)], single(".")


def collate(
    rollouts: list[ro.Rollout],
    pad_id: int,
    teacher_digits: tuple[list[int], int] | None = None,
    slot_token_scored: bool = False,
) -> Batch:
    """Right-pad rollouts into a Batch.

    teacher_digits: (ids of "0".."9", id of "."): every rollout with a slot is cut at the slot
    and "0." is appended (not completion tokens), so that the slot column gives the integer
    position and the column two to its right the decimal position of eq:digitexp.
    slot_token_scored: a sampled slot token belongs to the confidence segment (conf_train=sampled).
    Only sampled tokens are scored: not the teacher-forced digits, nor a tail close_slot wrote.
    """

    def completion_of(r: ro.Rollout) -> list[int]:
        if teacher_digits is not None and r.segments.slot is not None:
            return r.completion_ids[: r.segments.slot] + [teacher_digits[0][0], teacher_digits[1]]
        return r.completion_ids

    n = len(rollouts)
    completions = [completion_of(r) for r in rollouts]
    width = max(len(r.prompt_ids) + len(c) for r, c in zip(rollouts, completions))
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    completion, ans, conf = (torch.zeros((n, width - 1), dtype=torch.bool) for _ in range(3))
    slot_pos = torch.full((n,), -1, dtype=torch.long)
    digit_pos = torch.full((n,), -1, dtype=torch.long) if teacher_digits is not None else None
    for i, (r, ids) in enumerate(zip(rollouts, completions)):
        p, seg = len(r.prompt_ids), r.segments
        c = min(len(ids) - (2 if digit_pos is not None and seg.slot is not None else 0), r.sampled_len)
        input_ids[i, : p + len(ids)] = torch.tensor(r.prompt_ids + ids)
        attention[i, : p + len(ids)] = 1
        # completion token j sits at position p + j and is predicted from column p + j - 1
        completion[i, p - 1 : p - 1 + c] = True
        ans[i, p - 1 : p - 1 + seg.answer_end] = True
        scored_slot = int(slot_token_scored and seg.slot is not None and seg.slot < c)
        conf[i, p - 1 + seg.analysis_start : p - 1 + min(seg.analysis_end + scored_slot, c)] = True
        if seg.slot is not None:
            slot_pos[i] = p - 1 + seg.slot  # position of completion token slot-1 (the end of <confidence>)
            if digit_pos is not None:
                digit_pos[i] = slot_pos[i] + 2  # the position of the appended "."
    digits = torch.tensor(teacher_digits[0]) if teacher_digits is not None else None
    prompt_len = torch.tensor([len(r.prompt_ids) for r in rollouts], dtype=torch.long)
    return Batch(input_ids, attention, completion, ans, conf, slot_pos, prompt_len, digit_pos, digits)


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
    z_diff: torch.Tensor  # [N] z_H - z_L at the slot (eq:readout)
    c_digit: torch.Tensor | None  # [N] eq:digitexp at the slot, when the batch has teacher-forced digits


def forward(
    policy: Policy, batch: Batch, packed: bool = False, detach_readout: bool = False, logprobs: bool = True
) -> Forward:
    """One pass: per-token log-probs, the readout and (with teacher-forced digits) eq:digitexp.

    logprobs=False: a confidence-only pass (a no-grad readout or digit pass): no column goes
    through the vocabulary projection, and Forward.logp is None.

    packed: the micro-batch runs as one padding-free row (pack_rows) in which rows with the
    same prompt share its tokens, attended by sequence_attention (which this switches the
    model to), so no compute goes to padding and a group's prompt is computed once. The
    outputs are laid out as in the padded case.
    detach_readout: z_diff is read from the detached final hidden state, so its gradient
    reaches only the output rows of H and L (the auxiliary head of tab:decompose).
    Computed in policy.dtype (autocast) over fp32 weights; every output is fp32."""
    model, high_id, low_id, dtype = policy.model, policy.high_id, policy.low_id, policy.dtype
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

    # eq:readout in fp32, outside autocast: z_H - z_L is a difference of two close logits
    h_slot = hidden_at(batch.slot_pos)  # [N, H]
    z_diff = losses.readout_logits(h_slot.detach() if detach_readout else h_slot, lm_head, high_id, low_id)  # [N]
    z_diff = torch.where(slot_pos >= 0, z_diff, 0.0)
    c_digit = None
    if batch.digit_pos is not None:
        digits = to_device(batch.digit_ids, device)
        h_int = h_slot.float()  # [N, H] before "0"
        h_dec = hidden_at(batch.digit_pos).float()  # [N, H] after "0."
        c_digit = losses.digit_expectation(h_int @ lm_head[digits[:2]].float().T, h_dec @ lm_head[digits].float().T)
    return Forward(logp if logprobs else None, z_diff, c_digit)


def training_batch(rollouts: list[ro.Rollout], tokenizer, teacher_digits: bool, slot_token_scored: bool) -> Batch:
    """The Batch the update trains on: with "0." teacher-forced after the slot for the
    digit-expectation emission (ConfidencePlan.teacher_digits), and the sampled slot token in
    the confidence segment for conf_train=sampled (ConfidencePlan.samples_slot_token)."""
    digits = digit_token_ids(tokenizer) if teacher_digits else None
    return collate(rollouts, tokenizer.pad_token_id, teacher_digits=digits, slot_token_scored=slot_token_scored)


def at_slot(tokenizer, rollouts: list[ro.Rollout]) -> list[ro.Rollout]:
    """Rollouts whose numeral was sampled as text, cut right after <confidence> (ro.through_slot,
    closed where the numeral merged with the tag) and parsed like the readout channel: what
    eq:digitexp teacher-forces "0." after. Idempotent: a rollout already ended at the slot
    keeps its ids and its count of repaired tokens."""
    out = []
    for r in rollouts:
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


# --- The confidence channel: how the model's c is read from a forward --------------------------
# One registry entry per way of reading c off the logits, `(fwd: Forward) -> c [N]` with its
# gradient; config.ConfidencePlan.model_read names the run's. (A confidence sampled as text is
# read by sampling.TEXT_READS; a new channel adds an entry to one of them, and its prompt and
# stopping rule to config.confidence_plan.)
MODEL_READS: dict[str, Callable[[Forward], torch.Tensor]] = {}


def register_model_read(name: str) -> Callable:
    """Register the decorated `(fwd: Forward) -> c [N]` as the model read `name`."""
    return registrar(MODEL_READS, "model read", name)


@register_model_read("readout")
def read_readout(fwd: Forward) -> torch.Tensor:
    """c = sigmoid(z_H - z_L) at the slot (eq:readout); the auxiliary head's when the forward
    read the detached hidden state (ConfidencePlan.detach_readout)."""
    return losses.readout(fwd.z_diff, torch.zeros_like(fwd.z_diff))


@register_model_read("digit_exp")
def read_digit_expectation(fwd: Forward) -> torch.Tensor:
    """eq:digitexp after the teacher-forced "0." (ConfidencePlan.teacher_digits)."""
    if fwd.c_digit is None:
        raise ValueError("the digit expectation needs a batch with teacher-forced digits (training_batch)")
    return fwd.c_digit


def model_confidence(fwd: Forward, read: str = "readout") -> torch.Tensor:
    """[N] the model's own c from a forward, with its gradient, by the model read `read`."""
    if read not in MODEL_READS:
        raise ValueError(f"model read {read!r} is not registered; choose one of {tuple(MODEL_READS)}")
    return MODEL_READS[read](fwd)


# --- No-grad confidence reads (evaluation, and a baseline's eq:sw weights) --------------------


def _no_grad_reads(policy: Policy, batch: Batch, plan: list[list[int]], packed: bool) -> Forward:
    """A confidence-only pass (no vocabulary projection) over the micro-batches of `plan`:
    z_diff [N] and, with teacher-forced digits, c_digit [N], in row order."""
    n = len(batch)
    z_diff = torch.zeros(n)
    c_digit = torch.full((n,), float("nan")) if batch.digit_pos is not None else None
    with torch.no_grad():
        for rows in plan:
            fwd = forward(policy, batch.select(rows), packed=packed, logprobs=False)
            z_diff[rows] = fwd.z_diff.float().cpu()
            if c_digit is not None:
                c_digit[rows] = fwd.c_digit.float().cpu()
    return Forward(None, z_diff, c_digit)


def confidences(policy: Policy, batch: Batch, micro: list[list[int]], packed: bool, read: str) -> torch.Tensor:
    """[N] the model's c of every row of a training batch by the model read `read`, detached,
    from a no-grad pass over the micro-batches `micro` (the update's own); NaN where a row has
    no slot."""
    c = model_confidence(_no_grad_reads(policy, batch, micro, packed), read)  # [N]
    return torch.where(batch.slot_pos >= 0, c, float("nan"))


def digit_expectations(policy: Policy, rollouts: list[ro.Rollout], budget: int, packed: bool) -> torch.Tensor:
    """[N] eq:digitexp of each rollout: a no-grad pass over prompt + completion up to
    <confidence> (at_slot: a tag that merged with the numeral is closed first) + a
    teacher-forced "0."; NaN where there is no <confidence> tag (no position to read).

    Integer position (right after <confidence>): candidates "0", "1", renormalised -> p0, p1.
    Decimal position (after "0."): candidates "0".."9", renormalised -> q_d.
    c = p1 * 1.0 + p0 * E[d] / 10 (losses.digit_expectation)."""
    tokenizer = policy.tokenizer
    batch = collate(at_slot(tokenizer, rollouts), tokenizer.pad_token_id, teacher_digits=digit_token_ids(tokenizer))
    lengths = batch.attention_mask.sum(dim=1).tolist()
    plan = micro_batches(lengths, budget, 1, packed=packed)
    c_digit = _no_grad_reads(policy, batch, plan, packed).c_digit  # [N]
    return torch.where(batch.digit_pos >= 0, c_digit, float("nan"))


def readouts(policy: Policy, rollouts: list[ro.Rollout], budget: int, packed: bool) -> torch.Tensor:
    """[N] c = sigmoid(z_H - z_L) at each rollout's slot from a no-grad pass (eq:readout);
    NaN where the rollout has no slot."""
    batch = collate(rollouts, policy.tokenizer.pad_token_id)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    plan = micro_batches(lengths, budget, 1, packed=packed)
    c = torch.sigmoid(_no_grad_reads(policy, batch, plan, packed).z_diff)  # [N]
    return torch.where(batch.slot_pos >= 0, c, float("nan"))
