"""Per-token log-probs of completions from final hidden states, without [N, L, V] logits.

`token_logprobs` (padded rows) and `selected_logprobs` (chosen positions, as a packed row
needs) are what the training forward calls (policy.forward); the rest are the custom
autograd functions behind them: eager blocks of `chunk_tokens` rows, or blocks
compiled once (`compile_logprob_blocks`) for the GPU update. Both hold one fp32
[rows, V] block at a time and recompute its logits in backward from the saved
log-sum-exp.

The head they read is a `Head`: the model's [V, H] matrix in its own dtype and, under LoRA,
the reserved tokens' trained fp32 rows beside it, which replace the matrix's rows at their ids
in every logit. No fp32 [V, H] copy of a bf16 head is made, and none with the rows in place.

Does not hold: the paper's equations (losses.py) or the model's forward (policy.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

VOCAB_BLOCK = 16384  # rows of a low-precision head upcast at a time by Head.logits


class Head(NamedTuple):
    """The output head as the trainer reads it (logits = hidden @ head.T): `weight` [V, H] in its
    own dtype, and the reserved `ids` (K of them) whose logits come from `rows` [K, H] fp32
    instead (LoRA's trained rows, adapters/lora.py); no ids: the weight alone."""

    weight: torch.Tensor  # [V, H]
    ids: tuple[int, ...] = ()
    rows: torch.Tensor | None = None  # [K, H] fp32, the rows of `ids`

    def rows_of(self, token_ids) -> torch.Tensor:
        """[k, H] fp32 the head's rows of `token_ids` (a trained row where there is one)."""
        picked = [self.rows[self.ids.index(t)] if t in self.ids else self.weight[t].float() for t in token_ids]
        return torch.stack(picked)

    def ids_on(self, device) -> torch.Tensor | None:
        """[K] the reserved ids as a tensor on `device`; None when there are none."""
        return torch.tensor(self.ids, dtype=torch.long, device=device) if self.ids else None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, V] fp32 logits of hidden [N, H], the matmul in fp32. A low-precision weight (frozen:
        LoRA's) is upcast VOCAB_BLOCK rows at a time (_Fp32Logits); the reserved ids' from their rows."""
        h, low = hidden.float(), self.weight.dtype != torch.float32
        if low and self.weight.requires_grad:
            raise ValueError(f"Head.logits trains an fp32 head only; this {self.weight.dtype} head requires grad")
        logits = _Fp32Logits.apply(h, self.weight) if low else h @ self.weight.T
        ids = self.ids_on(hidden.device)
        return logits if ids is None else logits.index_copy(1, ids, h @ self.rows.T)


def as_head(head: torch.Tensor | Head) -> Head:
    """A Head from a bare [V, H] matrix (no reserved rows), or the Head itself."""
    return head if isinstance(head, Head) else Head(head)


class _Fp32Logits(torch.autograd.Function):
    """h @ weight.float().T for h [N, H] fp32 and a frozen low-precision weight [V, H], without an
    fp32 copy of the weight: it is upcast VOCAB_BLOCK rows at a time, in forward and in backward
    (autograd would save each upcast block). Only h gets a gradient."""

    @staticmethod
    def forward(ctx, h, weight):
        ctx.save_for_backward(weight)
        return torch.cat([h @ block.float().T for block in weight.split(VOCAB_BLOCK)], dim=1)  # [N, V]

    @staticmethod
    def backward(ctx, grad):  # grad: [N, V] fp32
        (weight,) = ctx.saved_tensors
        grads = grad.split(VOCAB_BLOCK, dim=1)
        return sum(g @ block.float() for g, block in zip(grads, weight.split(VOCAB_BLOCK))), None


class _LinearLogprobs(torch.autograd.Function):
    """log softmax(hidden @ lm_head.T / T)[targets], `chunk` rows at a time, with its own backward.

    hidden: [M, H], lm_head: [V, H], targets: [M] -> [M] fp32; T the sampling temperature
    (`t`, dividing the fp32 logits as vLLM's sampler does). Forward keeps only the per-row
    log-sum-exp; backward recomputes a block's logits once and turns them into
    d logits = (g / T) (onehot(target) - softmax(logits / T)) in place. One fp32 [chunk, V]
    buffer is reused for every block of both passes: no [M, V] tensor, and no fresh
    allocation per block (on a CPU a fresh 300 MB block costs more in page faults
    than the exp over it). Matmuls run in `dtype` (bf16 under autocast), every
    softmax quantity in fp32, as `(hidden @ lm_head.T).float()` would.

    Reserved rows (a Head's): `ids` [K] and `reserved` [K, H] fp32 give the logits of those
    columns (in `dtype`, as the others); `reserved` gets the [K, H] fp32 gradient of those
    columns and lm_head's rows at `ids` none. ids None: lm_head alone.
    """

    @staticmethod
    def forward(ctx, hidden, lm_head, reserved, targets, ids, chunk: int, dtype: torch.dtype, t: float):
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), lm_head.to(dtype)
            r = reserved.to(dtype) if ids is not None else None
            rows = h_all.shape[0]
            out = torch.empty(rows, dtype=torch.float32, device=hidden.device)
            lse = torch.empty_like(out)
            buf = torch.empty(min(chunk, rows), w.shape[0], dtype=torch.float32, device=hidden.device)
            for s in range(0, rows, chunk):
                h, y = h_all[s : s + chunk], targets[s : s + chunk]
                logits = _block_logits(buf[: h.shape[0]], h, w, t)  # [n, V] fp32, / T
                if ids is not None:
                    logits[:, ids] = (h @ r.T).float() / t  # [n, K] the reserved columns
                out[s : s + chunk] = logits.gather(1, y[:, None]).squeeze(1)
                top = logits.amax(dim=1, keepdim=True)  # [n, 1]
                sumexp = logits.sub_(top).exp_().sum(dim=1)  # [n]
                lse[s : s + chunk] = top.squeeze(1) + sumexp.log()
            out.sub_(lse)
        ctx.save_for_backward(hidden, lm_head, reserved if ids is not None else None, targets, ids, lse)
        ctx.chunk, ctx.dtype, ctx.t = chunk, dtype, t
        return out

    @staticmethod
    def backward(ctx, grad):
        hidden, lm_head, reserved, targets, ids, lse = ctx.saved_tensors
        chunk, dtype, t = ctx.chunk, ctx.dtype, ctx.t
        need_h, need_w, need_r = ctx.needs_input_grad[:3]
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), lm_head.to(dtype)
            r = reserved.to(dtype) if ids is not None else None
            rows = h_all.shape[0]
            grad = grad.float() / t  # d(logits / T) / d logits
            grad_h = torch.empty_like(hidden) if need_h else None
            grad_w = torch.zeros(lm_head.shape, dtype=torch.float32, device=lm_head.device) if need_w else None
            grad_r = torch.zeros_like(reserved, dtype=torch.float32) if need_r else None
            buf = torch.empty(min(chunk, rows), w.shape[0], dtype=torch.float32, device=hidden.device)
            for s in range(0, rows, chunk):
                h, y, g = h_all[s : s + chunk], targets[s : s + chunk], grad[s : s + chunk, None]
                d_logits = _block_logits(buf[: h.shape[0]], h, w, t)
                if ids is not None:
                    d_logits[:, ids] = (h @ r.T).float() / t
                d_logits.sub_(lse[s : s + chunk, None]).exp_().mul_(-g)  # -g softmax
                d_logits.scatter_add_(1, y[:, None], g)  # + g onehot(target)
                d_reserved = None
                if ids is not None:  # the reserved columns' gradient goes to their rows, not to lm_head
                    d_reserved = d_logits[:, ids]  # [n, K] fp32
                    d_logits[:, ids] = 0.0
                    if need_r:
                        grad_r.addmm_(d_reserved.T, h.float())
                d = d_logits if dtype == torch.float32 else d_logits.to(dtype)
                if need_h:
                    grad_h[s : s + chunk] = d @ w
                    if d_reserved is not None:
                        grad_h[s : s + chunk] += d_reserved.to(dtype) @ r
                if need_w:
                    if d.dtype == torch.float32 and h.dtype == torch.float32:
                        grad_w.addmm_(d.T, h)
                    else:
                        grad_w += (d.T @ h).float()
        grad_w = grad_w.to(lm_head.dtype) if need_w else None
        return grad_h, grad_w, grad_r, None, None, None, None, None


def _block_logits(buf: torch.Tensor, h: torch.Tensor, w: torch.Tensor, t: float = 1.0) -> torch.Tensor:
    """buf <- (h @ w.T) / T in fp32, reusing buf's memory when the matmul itself is fp32."""
    if h.dtype == torch.float32:
        logits = torch.mm(h, w.T, out=buf)
    else:
        logits = buf.copy_(h @ w.T)
    return logits if t == 1.0 else logits.div_(t)


# --- The same log-probs with compiled blocks (a GPU's fast path) ------------------------------


def _compiled_block_logits(h, w, t, ids, r) -> torch.Tensor:
    """[n, V] fp32 logits / T of one block, the reserved columns `ids` from their rows r [K, H]."""
    logits = (h @ w.T).float() / t
    return logits if ids is None else logits.index_copy(1, ids, (h @ r.T).float() / t)


def logprob_block_forward(
    h: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
    t: torch.Tensor,
    ids: torch.Tensor | None = None,
    r: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block of the vocabulary projection, forward: (logit / T of the target, log-sum-exp
    of logits / T), fp32.

    h: [n, H], w: [V, H] in the compute dtype, y: [n], t: [] fp32 (T; a tensor, so a
    new temperature does not recompile); ids [K], r [K, H] (compute dtype): a Head's reserved
    rows, or None -> ([n], [n]). Written for torch.compile: the fp32
    upcast, scale, max, exp and sum become one pass over the matmul's [n, V] output."""
    logits = _compiled_block_logits(h, w, t, ids, r)  # [n, V]
    return logits.gather(1, y[:, None]).squeeze(1), torch.logsumexp(logits, dim=1)


def logprob_block_backward(
    h: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
    lse: torch.Tensor,
    g: torch.Tensor,
    grad_w: torch.Tensor | None,
    t: torch.Tensor,
    ids: torch.Tensor | None = None,
    r: torch.Tensor | None = None,
    grad_r: torch.Tensor | None = None,
) -> torch.Tensor:
    """One block, backward: d logits = (g / T) (onehot(y) - softmax(logits / T)), recomputed
    from the log-sum-exp.

    Returns the block's hidden-state gradient [n, H] (compute dtype); adds its head gradient
    d logits.T @ h to `grad_w` ([V, H] fp32) in place, unless grad_w is None. Written for
    torch.compile: d logits is one pass from the matmul's output, and the fp32 accumulation
    one more (an add fused with the upcast). With reserved rows (ids, r), their columns'
    gradient goes to grad_r ([K, H] fp32, in place) and to h through r, not to grad_w."""
    logits = _compiled_block_logits(h, w, t, ids, r)  # [n, V]
    target = torch.arange(logits.shape[1], device=logits.device) == y[:, None]  # [n, V]
    d_logits = (g / t)[:, None] * (target.float() - (logits - lse[:, None]).exp())  # [n, V] fp32
    grad_h = 0.0
    if ids is not None:
        d_reserved = d_logits[:, ids]  # [n, K]
        d_logits = d_logits.index_fill(1, ids, 0.0)
        if grad_r is not None:
            grad_r.add_(d_reserved.T @ h.float())
        grad_h = d_reserved.to(h.dtype) @ r
    d_logits = d_logits.to(h.dtype)
    if grad_w is not None:
        grad_w.add_((d_logits.T @ h).float())
    return d_logits @ w + grad_h


class LogprobBlocks(NamedTuple):
    """logprob_block_forward/backward as compiled functions, and the rows per block."""

    forward: Callable
    backward: Callable
    chunk_tokens: int


def compile_logprob_blocks(backend: str = "inductor", chunk_tokens: int = 2048) -> LogprobBlocks:
    """token_logprobs' per-block work under torch.compile (dynamic block rows: one graph each).

    What it saves on a GPU, per block of n rows (V x H head): the eager blocks make several
    passes over an fp32 [n, V] buffer (upcast, max, exp, sum; again in backward) and upcast
    then add the bf16 [V, H] head gradient (about 18 bytes per weight); compiled, each is one
    pass (10 bytes per weight for the accumulation). The blocks are larger (2,048 rows, not
    512) because that accumulation is paid per block: on an H100 it takes about 300 / n of
    the block's four matmuls' time (0.6 at 512 rows, 0.15 at 2,048), while the [n, V] bf16
    blocks it costs (two of 0.6 GB at 2,048 rows, Qwen3's vocabulary) are small beside the
    layers' activations (docs/performance.md has the estimate, unmeasured on a GPU so far).
    Numerics: the fused reductions reorder fp32 sums (about 1e-6). A block of one row
    compiles once more (torch.compile specialises sizes 0 and 1)."""
    forward = torch.compile(logprob_block_forward, backend=backend, dynamic=True)
    backward = torch.compile(logprob_block_backward, backend=backend, dynamic=True)
    return LogprobBlocks(forward, backward, chunk_tokens)


class _BlockedLinearLogprobs(torch.autograd.Function):
    """_LinearLogprobs with its per-block work in `blocks` (compile_logprob_blocks): the same
    values, without the reused fp32 buffer (compiled blocks keep no [n, V] fp32 tensor)."""

    @staticmethod
    def forward(ctx, hidden, lm_head, reserved, targets, ids, blocks: LogprobBlocks, dtype: torch.dtype, t: float):
        chunk = blocks.chunk_tokens
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.detach().to(dtype), lm_head.detach().to(dtype)  # the blocks see no autograd
            r = reserved.detach().to(dtype) if ids is not None else None
            scale = torch.tensor(t, dtype=torch.float32, device=hidden.device)
            target_logit = torch.empty(len(h_all), dtype=torch.float32, device=hidden.device)
            lse = torch.empty_like(target_logit)
            for s in range(0, len(h_all), chunk):
                target_logit[s : s + chunk], lse[s : s + chunk] = blocks.forward(
                    h_all[s : s + chunk], w, targets[s : s + chunk], scale, ids, r
                )
        ctx.save_for_backward(hidden, lm_head, reserved if ids is not None else None, targets, ids, lse, scale)
        ctx.blocks, ctx.dtype = blocks, dtype
        return target_logit - lse

    @staticmethod
    def backward(ctx, grad):
        hidden, lm_head, reserved, targets, ids, lse, scale = ctx.saved_tensors
        chunk, need_w, need_r = ctx.blocks.chunk_tokens, ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.detach().to(ctx.dtype), lm_head.detach().to(ctx.dtype)
            r = reserved.detach().to(ctx.dtype) if ids is not None else None
            grad_r = torch.zeros(reserved.shape, dtype=torch.float32, device=hidden.device) if need_r else None
            # A fresh fp32 vector: the upstream gradient may be a broadcast (stride 0) or a view of
            # a [N, L-1] tensor, and the compiled blocks would recompile for either.
            grad = torch.empty(grad.shape, dtype=torch.float32, device=grad.device).copy_(grad)
            grad_w = torch.zeros(lm_head.shape, dtype=torch.float32, device=lm_head.device) if need_w else None
            grad_h = torch.empty_like(hidden)
            for s in range(0, len(h_all), chunk):
                grad_h[s : s + chunk] = ctx.blocks.backward(
                    h_all[s : s + chunk],
                    w,
                    targets[s : s + chunk],
                    lse[s : s + chunk],
                    grad[s : s + chunk],
                    grad_w,
                    scale,
                    ids,
                    r,
                    grad_r,
                )
        return grad_h, grad_w.to(lm_head.dtype) if need_w else None, grad_r, None, None, None, None, None


def token_logprobs(
    hidden: torch.Tensor,
    lm_head: torch.Tensor | Head,
    input_ids: torch.Tensor,
    chunk_tokens: int = 512,
    score_mask: torch.Tensor | None = None,
    blocks: LogprobBlocks | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Per-token log-probs of sequences from their final hidden states, without [N, L, V] logits.

    hidden:    [N, L, H] final hidden states (after the model's last norm), every position.
    lm_head:   [V, H] output-embedding matrix (logits = hidden @ lm_head.T), or a Head (its
               reserved rows trained beside the matrix).
    input_ids: [N, L] the sequences (padding: any valid id; mask it later).
    score_mask: [N, L-1] bool, the columns to score (the completion tokens o_i); the others
               get 0 and cost nothing: the vocabulary projection is the costliest part of
               the loss, and a prompt token has no gradient. None: every column. On the
               CPU it is read without waiting for the GPU (the trainer passes it so).

    temperature: T > 0, the rollouts' sampling temperature: log pi_T = log_softmax(logits / T),
               the policy that sampled them (as TRL and verl compute it), so that the
               gradient and eq:grpo's ratio are that policy's. Top-k / top-p truncation is
               not applied (docs/toy.md measures what it leaves). The readout of eq:readout
               does not go through here: it reads the raw logits.

    Returns `logp: [N, L-1]` (fp32; column k is log pi_T(input_ids[k+1] | ids[:k+1])).

    The naive route materialises fp32 logits `[N, L, V]` (V = 151,936 for Qwen3:
    2.5 GB per 4k tokens) and a log_softmax of the same size. Here the rows are
    processed `chunk_tokens` at a time (`_LinearLogprobs`): forward and backward
    each hold one fp32 `[chunk_tokens, V]` block, and backward recomputes a block's
    logits once, from the saved log-sum-exp.

    blocks: the per-block work compiled (compile_logprob_blocks, with its own block rows),
    as the update runs on a GPU; None: the eager blocks above, `chunk_tokens` rows each.
    """
    n_seq, seq_len, dim = hidden.shape
    flat_hidden = hidden[:, :-1].reshape(-1, dim)  # [N*(L-1), H]
    flat_targets = input_ids[:, 1:].reshape(-1)  # [N*(L-1)]
    if score_mask is None:
        logp = selected_logprobs(flat_hidden, lm_head, flat_targets, chunk_tokens, blocks, temperature)
    else:
        # The scored columns' indices: where score_mask lives (a host mask needs no device sync)
        rows = score_mask.reshape(-1).nonzero().squeeze(1).to(hidden.device, non_blocking=True)  # [M]
        scored = selected_logprobs(flat_hidden[rows], lm_head, flat_targets[rows], chunk_tokens, blocks, temperature)
        logp = torch.zeros(flat_targets.shape, dtype=torch.float32, device=hidden.device).index_copy(0, rows, scored)
    return logp.reshape(n_seq, seq_len - 1)  # [N, L-1]


def selected_logprobs(
    hidden: torch.Tensor,
    lm_head: torch.Tensor | Head,
    targets: torch.Tensor,
    chunk_tokens: int = 512,
    blocks: LogprobBlocks | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log pi_T(targets | hidden) row by row: hidden [M, H] (the positions that predict them),
    targets [M] -> [M] fp32. token_logprobs' work once the scored columns are chosen; a packed
    row whose prompts are shared (packing.pack_rows) calls it directly, since there the token
    that follows a position in the row is not always the one it predicts. The matmuls run
    in the autocast dtype when autocast is on."""
    if not temperature > 0:
        raise ValueError(f"log-probs at temperature {temperature!r}: a sampling temperature must be > 0")
    head, device_type = as_head(lm_head), hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
    else:
        dtype = torch.promote_types(hidden.dtype, head.weight.dtype)
    ids, t = head.ids_on(hidden.device), float(temperature)
    if blocks is None:
        return _LinearLogprobs.apply(hidden, head.weight, head.rows, targets, ids, chunk_tokens, dtype, t)
    return _BlockedLinearLogprobs.apply(hidden, head.weight, head.rows, targets, ids, blocks, dtype, t)
