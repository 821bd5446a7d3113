"""Packing: which rows run together (the micro-batch plan), how a micro-batch runs through the
model (right-padded rows, or one padding-free row), and the attention that keeps a packed row's
sequences apart.

    micro = micro_batches(lengths, budget=8192, group=8, packed=True)   # row indices per micro-batch
    states = run_layers(model, input_ids, attention_mask, prompt_len, packed=True)
    logp = states.logprobs(lm_head, input_ids, completion_mask)        # [N, L-1] as if padded
    h = states.at(slot_pos)                                             # [N, H]

    packing = pack_rows(input_ids, attention_mask, prompt_len)   # each distinct prompt once
    use_sequence_attention(model)                                # idempotent
    hidden = model.model(input_ids=packing.ids, position_ids=packing.positions,
                         attention_mask=torch.ones_like(packing.ids),
                         credo_segments=packing.segments, use_cache=False).last_hidden_state

Holds: the packed layout (`Packing`: tokens, positions, segments, and where each row's
positions went) and `sequence_attention`, the transformers attention function that reads
the segments; `States`, a forward's final hidden states in either layout with the two reads a
forward makes of them (the completion's log-probs, and the states at given positions), all
indexed on the host so that nothing waits for the GPU. Does not hold: the forward itself and
what it returns (policy.forward), anything about the loss.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch._dynamo.decorators import mark_static, mark_unbacked  # not re-exported by torch._dynamo in 2.13
from torch.nn.attention.bias import causal_lower_right
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from kernels import logprobs as logprob_kernels

# --- The micro-batch plan ----------------------------------------------------------------------


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


# --- One padding-free row ----------------------------------------------------------------------


class Packing(NamedTuple):
    """A micro-batch as one padding-free row in which the rows that share a prompt share its
    tokens: each distinct prompt once, then every row's completion, which attends to its
    prompt's segment and causally to itself (sequence_attention)."""

    ids: torch.Tensor  # [1, S] the packed tokens
    positions: torch.Tensor  # [1, S] each token's position in its own sequence
    segments: torch.Tensor  # [K, 4] host: start, end, context start, context end (a prompt: no context)
    prompt_start: torch.Tensor  # [N] where each row's prompt sits in the packed row
    completion_start: torch.Tensor  # [N] where each row's completion starts
    prompt_len: torch.Tensor  # [N]

    def index(self, pos: torch.Tensor) -> torch.Tensor:
        """The packed-row index of position `pos` of each row's own sequence: pos [N] or [N, C]
        (host) -> the same shape. A position at or past a row's end maps past its completion;
        callers clamp or mask it."""
        shape = (-1,) + (1,) * (pos.dim() - 1)
        prompt_len = self.prompt_len.view(shape)
        in_prompt = self.prompt_start.view(shape) + pos
        in_completion = self.completion_start.view(shape) + pos - prompt_len
        return torch.where(pos < prompt_len, in_prompt, in_completion)


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: torch.Tensor) -> Packing:
    """Right-padded rows (input_ids, attention_mask [N, L], prompt_len [N]: each row's prompt
    is its first prompt_len ids) without their padding, each distinct prompt once (prompts first, in
    order of first appearance, then the completions in row order). A group's G rollouts share
    one prompt, so a micro-batch of whole groups computes each prompt once instead of G times:
    the trainer's forward and backward cost the prompt tokens once per group. Every output
    is that of the rows run separately, to float noise (the gradient reaching a shared prompt
    token is the sum of what its rows send it).

    >>> ids = torch.tensor([[5, 6, 7, 0], [5, 6, 9, 4], [8, 3, 0, 0]])   # rows 0, 1 share prompt [5, 6]
    >>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    >>> p = pack_rows(ids, mask, torch.tensor([2, 2, 1]))
    >>> p.ids.tolist(), p.positions.tolist()
    ([[5, 6, 8, 7, 9, 4, 3]], [[0, 1, 0, 2, 2, 3, 1]])
    >>> p.segments.tolist()   # two prompts, then three completions, each with its prompt as context
    [[0, 2, 0, 0], [2, 3, 2, 2], [3, 4, 0, 2], [4, 6, 0, 2], [6, 7, 2, 3]]
    >>> p.index(torch.tensor([[0, 1, 2, 3]] * 3)).tolist()   # row 2's positions 2, 3 lie past its end
    [[0, 1, 3, 4], [0, 1, 4, 5], [2, 6, 7, 8]]
    """
    lengths, prompt_lens = attention_mask.sum(dim=1).tolist(), prompt_len.tolist()
    pieces, positions, segments = [], [], []
    prompt_start, seen, cursor = [], {}, 0
    for row, p in zip(input_ids, prompt_lens):
        key = row[:p].numpy().tobytes()
        if key not in seen:
            seen[key] = cursor
            pieces.append(row[:p])
            positions.append(torch.arange(p))
            segments.append((cursor, cursor + p, cursor, cursor))
            cursor += p
        prompt_start.append(seen[key])
    completion_start = []
    for row, length, p, start in zip(input_ids, lengths, prompt_lens, prompt_start):
        completion_start.append(cursor)
        if length > p:
            pieces.append(row[p:length])
            positions.append(torch.arange(p, length))
            segments.append((cursor, cursor + length - p, start, start + p))
            cursor += length - p
    return Packing(
        torch.cat(pieces)[None],
        torch.cat(positions)[None],
        torch.tensor(segments, dtype=torch.long),
        torch.tensor(prompt_start, dtype=torch.long),
        torch.tensor(completion_start, dtype=torch.long),
        prompt_len,
    )


SEQUENCE_ATTENTION = "credo_sequence_sdpa"  # the attention implementation packed rows need


@torch.compiler.disable
def sequence_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, credo_segments=None, **kwargs
):
    """A transformers attention function: with `credo_segments` (Packing.segments [K, 4] of a
    packed row [1, heads, S, D]), causal sdpa within each segment, a completion's queries
    also seeing every key of its prompt's segment (its context); without it (padded batches,
    generation) exactly transformers' sdpa.

    sdpa on a packed row with a block mask would compute S^2 pairs, most of them masked out;
    this computes each segment's own pairs and builds no [S, S] mask (docs/performance.md).
    A completion's causal mask is aligned to its last key (causal_lower_right), which sdpa
    runs without materialising it on a GPU. Returns [1, S, heads, D] as transformers' sdpa does.
    The segments are host data (a CPU tensor, see forward): reading them here, once per
    layer, never waits for the GPU. It always runs eagerly, outside compile_layers' graphs:
    its slices depend on the segments' values.
    """
    if credo_segments is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1 or attention_mask is not None:
        raise ValueError(
            f"sequence_attention: credo_segments describe one packed row without a mask; got a batch of "
            f"{query.shape[0]} rows and "
            f"attention_mask={None if attention_mask is None else tuple(attention_mask.shape)}"
        )
    if credo_segments.device.type != "cpu":
        raise ValueError(
            "sequence_attention: credo_segments must be a CPU tensor (reading them from the GPU would stall "
            "every layer on a host synchronisation)"
        )
    segments = credo_segments.tolist()
    ends = [0] + [end for _, end, _, _ in segments]
    if [start for start, _, _, _ in segments] != ends[:-1] or ends[-1] != query.shape[2]:
        raise ValueError(f"sequence_attention: segments {segments} do not tile the row's {query.shape[2]} tokens")
    gqa = query.shape[1] != key.shape[1]
    # sdpa given a causal_lower_right mask skips autocast's cast to one dtype (Qwen3's q and k
    # leave their norms in fp32, v in the autocast dtype): cast as autocast would
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    out = []
    for start, end, context_start, context_end in segments:
        k, v = key[:, :, start:end], value[:, :, start:end]
        mask = None
        if context_end > context_start:
            k = torch.cat([key[:, :, context_start:context_end], k], dim=2)
            v = torch.cat([value[:, :, context_start:context_end], v], dim=2)
            mask = causal_lower_right(end - start, k.shape[2])
        out.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:end],
                k,
                v,
                attn_mask=mask,
                is_causal=mask is None,
                dropout_p=dropout,
                scale=scaling,
                enable_gqa=gqa,
            )
        )  # each [1, heads, end - start, D]
    return torch.cat(out, dim=2).transpose(1, 2).contiguous(), None


def use_sequence_attention(model) -> None:
    """Make `model` attend with sequence_attention (idempotent). It is transformers' sdpa for
    every input but a packed row, so generation and padded forwards are unchanged."""
    if model.config._attn_implementation == SEQUENCE_ATTENTION:
        return
    AttentionInterface.register(SEQUENCE_ATTENTION, sequence_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SEQUENCE_ATTENTION, sdpa_mask)
    model.set_attn_implementation(SEQUENCE_ATTENTION)


# --- A forward's hidden states, padded or packed -------------------------------------------------


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: a blocking host-to-GPU copy
    synchronises the stream first, which would let the GPU drain before every micro-batch.
    The host tensors copied here are never written afterwards, so the asynchronous copy is safe."""
    return tensor.to(device, non_blocking=True)


class States(NamedTuple):
    """The final hidden states of a micro-batch's N rows: padded [N, L, H], or one packed row
    [1, S, H] with its `packing`. Positions are given on the host, in each row's own sequence."""

    hidden: torch.Tensor  # [N, L, H] or [1, S, H]
    packing: Packing | None  # None: padded
    blocks: logprob_kernels.LogprobBlocks | None = None  # the compiled log-prob blocks; None: eager
    temperature: float = 1.0  # log pi_T of the sampled tokens

    def at(self, pos: torch.Tensor) -> torch.Tensor:
        """host [N] positions (clamped at 0) -> [N, H] the states there."""
        device, pos = self.hidden.device, pos.clamp(min=0)
        if self.packing is None:
            return self.hidden[torch.arange(len(pos), device=device), to_device(pos, device)]
        return self.hidden[0, to_device(self.packing.index(pos), device)]

    def logprobs(
        self, lm_head: torch.Tensor | logprob_kernels.Head, input_ids: torch.Tensor, scored: torch.Tensor
    ) -> torch.Tensor:
        """[N, L-1] fp32 log pi_T of each row's next token at the host mask `scored`'s columns, 0
        elsewhere (no vocabulary projection for the others)."""
        device = self.hidden.device
        if self.packing is None:
            ids = to_device(input_ids, device)
            return logprob_kernels.token_logprobs(
                self.hidden, lm_head, ids, score_mask=scored, blocks=self.blocks, temperature=self.temperature
            )
        columns = torch.arange(input_ids.shape[1] - 1).expand(input_ids.shape[0], -1)  # [N, L-1]
        at = to_device(self.packing.index(columns)[scored], device)  # [M] the scored columns' packed positions
        targets = to_device(input_ids[:, 1:][scored], device)  # [M] the tokens they predict
        logp = logprob_kernels.selected_logprobs(
            self.hidden[0, at], lm_head, targets, blocks=self.blocks, temperature=self.temperature
        )  # [M]
        return torch.zeros(scored.shape, device=device).masked_scatter(to_device(scored, device), logp)


def run_layers(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: torch.Tensor,
    packed: bool,
    blocks: logprob_kernels.LogprobBlocks | None = None,
    temperature: float = 1.0,
) -> States:
    """The final hidden states (model.model's: no output head) of right-padded rows (host [N, L] tensors; each row's
    prompt its first prompt_len ids): as they are, or `packed` into one padding-free row in which
    rows with the same prompt share its tokens (pack_rows), attended by sequence_attention (which
    this switches the model to), so that no compute goes to padding and a group's prompt is
    computed once. Everything that indexes the packed row is computed on the host, so the
    forward never waits for the GPU to learn a boundary or a count."""
    decoder, device = model.model, model.device
    if not packed:
        attention = to_device(attention_mask, device)
        position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)
        hidden = decoder(
            input_ids=to_device(input_ids, device), attention_mask=attention, position_ids=position_ids, use_cache=False
        ).last_hidden_state  # [N, L, H]
        return States(hidden, None, blocks, temperature)
    packing = pack_rows(input_ids, attention_mask, prompt_len)
    ids = to_device(packing.ids, device)  # [1, S]
    use_sequence_attention(model)
    segments = packing.segments
    # compile_layers' graphs take the segments' count as a size like any other: unbacked, so that
    # no guard ties it to another size that happens to be equal (a recompile)
    mark_unbacked(segments, 0)
    mark_static(segments, 1)
    # A mask of ones keeps transformers from building an [S, S] mask (sequence_attention separates
    # the sequences by their segments instead).
    hidden = decoder(
        input_ids=ids,
        position_ids=to_device(packing.positions, device),
        attention_mask=torch.ones_like(ids),
        credo_segments=segments,
        use_cache=False,
    ).last_hidden_state  # [1, S, H]
    return States(hidden, packing, blocks, temperature)
