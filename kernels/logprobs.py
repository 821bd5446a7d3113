"""Per-token log-probs of completions from final hidden states, without [N, L, V] logits.

`token_logprobs` (padded rows) and `selected_logprobs` (chosen positions, as a packed row
needs) are what the training forward calls (policy.forward); the rest are the custom
autograd functions behind them: eager blocks of `chunk_tokens` rows, or blocks
compiled once (`compile_logprob_blocks`) for the GPU update. Both hold one fp32
[rows, V] block at a time and recompute its logits in backward from the saved
log-sum-exp.

Does not hold: the paper's equations (losses.py) or the model's forward (policy.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


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
    """

    @staticmethod
    def forward(ctx, hidden, lm_head, targets, chunk: int, dtype: torch.dtype, t: float):
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), lm_head.to(dtype)
            rows = h_all.shape[0]
            out = torch.empty(rows, dtype=torch.float32, device=hidden.device)
            lse = torch.empty_like(out)
            buf = torch.empty(min(chunk, rows), w.shape[0], dtype=torch.float32, device=hidden.device)
            for s in range(0, rows, chunk):
                h, y = h_all[s : s + chunk], targets[s : s + chunk]
                logits = _block_logits(buf[: h.shape[0]], h, w, t)  # [n, V] fp32, / T
                out[s : s + chunk] = logits.gather(1, y[:, None]).squeeze(1)
                top = logits.amax(dim=1, keepdim=True)  # [n, 1]
                sumexp = logits.sub_(top).exp_().sum(dim=1)  # [n]
                lse[s : s + chunk] = top.squeeze(1) + sumexp.log()
            out.sub_(lse)
        ctx.save_for_backward(hidden, lm_head, targets, lse)
        ctx.chunk, ctx.dtype, ctx.t = chunk, dtype, t
        return out

    @staticmethod
    def backward(ctx, grad):
        hidden, lm_head, targets, lse = ctx.saved_tensors
        chunk, dtype, t = ctx.chunk, ctx.dtype, ctx.t
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), lm_head.to(dtype)
            rows = h_all.shape[0]
            grad = grad.float() / t  # d(logits / T) / d logits
            grad_h = torch.empty_like(hidden) if need_h else None
            grad_w = torch.zeros(lm_head.shape, dtype=torch.float32, device=lm_head.device) if need_w else None
            buf = torch.empty(min(chunk, rows), w.shape[0], dtype=torch.float32, device=hidden.device)
            for s in range(0, rows, chunk):
                h, y, g = h_all[s : s + chunk], targets[s : s + chunk], grad[s : s + chunk, None]
                d_logits = _block_logits(buf[: h.shape[0]], h, w, t)
                d_logits.sub_(lse[s : s + chunk, None]).exp_().mul_(-g)  # -g softmax
                d_logits.scatter_add_(1, y[:, None], g)  # + g onehot(target)
                d = d_logits if dtype == torch.float32 else d_logits.to(dtype)
                if need_h:
                    grad_h[s : s + chunk] = d @ w
                if need_w:
                    if d.dtype == torch.float32 and h.dtype == torch.float32:
                        grad_w.addmm_(d.T, h)
                    else:
                        grad_w += (d.T @ h).float()
        return grad_h, grad_w.to(lm_head.dtype) if need_w else None, None, None, None, None


def _block_logits(buf: torch.Tensor, h: torch.Tensor, w: torch.Tensor, t: float = 1.0) -> torch.Tensor:
    """buf <- (h @ w.T) / T in fp32, reusing buf's memory when the matmul itself is fp32."""
    if h.dtype == torch.float32:
        logits = torch.mm(h, w.T, out=buf)
    else:
        logits = buf.copy_(h @ w.T)
    return logits if t == 1.0 else logits.div_(t)


# --- The same log-probs with compiled blocks (a GPU's fast path) ------------------------------


def logprob_block_forward(
    h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block of the vocabulary projection, forward: (logit / T of the target, log-sum-exp
    of logits / T), fp32.

    h: [n, H], w: [V, H] in the compute dtype, y: [n], t: [] fp32 (T; a tensor, so a
    new temperature does not recompile) -> ([n], [n]). Written for torch.compile: the fp32
    upcast, scale, max, exp and sum become one pass over the matmul's [n, V] output."""
    logits = (h @ w.T).float() / t  # [n, V]
    return logits.gather(1, y[:, None]).squeeze(1), torch.logsumexp(logits, dim=1)


def logprob_block_backward(
    h: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
    lse: torch.Tensor,
    g: torch.Tensor,
    grad_w: torch.Tensor | None,
    t: torch.Tensor,
) -> torch.Tensor:
    """One block, backward: d logits = (g / T) (onehot(y) - softmax(logits / T)), recomputed
    from the log-sum-exp.

    Returns the block's hidden-state gradient [n, H] (compute dtype); adds its head gradient
    d logits.T @ h to `grad_w` ([V, H] fp32) in place, unless grad_w is None. Written for
    torch.compile: d logits is one pass from the matmul's output, and the fp32 accumulation
    one more (an add fused with the upcast)."""
    logits = (h @ w.T).float() / t  # [n, V]
    target = torch.arange(logits.shape[1], device=logits.device) == y[:, None]  # [n, V]
    d_logits = ((g / t)[:, None] * (target.float() - (logits - lse[:, None]).exp())).to(h.dtype)
    if grad_w is not None:
        grad_w.add_((d_logits.T @ h).float())
    return d_logits @ w


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
    def forward(ctx, hidden, lm_head, targets, blocks: LogprobBlocks, dtype: torch.dtype, t: float):
        chunk = blocks.chunk_tokens
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.detach().to(dtype), lm_head.detach().to(dtype)  # the blocks see no autograd
            scale = torch.tensor(t, dtype=torch.float32, device=hidden.device)
            target_logit = torch.empty(len(h_all), dtype=torch.float32, device=hidden.device)
            lse = torch.empty_like(target_logit)
            for s in range(0, len(h_all), chunk):
                target_logit[s : s + chunk], lse[s : s + chunk] = blocks.forward(
                    h_all[s : s + chunk], w, targets[s : s + chunk], scale
                )
        ctx.save_for_backward(hidden, lm_head, targets, lse, scale)
        ctx.blocks, ctx.dtype = blocks, dtype
        return target_logit - lse

    @staticmethod
    def backward(ctx, grad):
        hidden, lm_head, targets, lse, scale = ctx.saved_tensors
        chunk, need_w = ctx.blocks.chunk_tokens, ctx.needs_input_grad[1]
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.detach().to(ctx.dtype), lm_head.detach().to(ctx.dtype)
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
                )
        return grad_h, grad_w.to(lm_head.dtype) if need_w else None, None, None, None, None


def token_logprobs(
    hidden: torch.Tensor,
    lm_head: torch.Tensor,
    input_ids: torch.Tensor,
    chunk_tokens: int = 512,
    score_mask: torch.Tensor | None = None,
    blocks: LogprobBlocks | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Per-token log-probs of sequences from their final hidden states, without [N, L, V] logits.

    hidden:    [N, L, H] final hidden states (after the model's last norm), every position.
    lm_head:   [V, H] output-embedding matrix (logits = hidden @ lm_head.T).
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
    lm_head: torch.Tensor,
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
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
    else:
        dtype = torch.promote_types(hidden.dtype, lm_head.dtype)
    if blocks is None:
        return _LinearLogprobs.apply(hidden, lm_head, targets, chunk_tokens, dtype, float(temperature))
    return _BlockedLinearLogprobs.apply(hidden, lm_head, targets, blocks, dtype, float(temperature))
