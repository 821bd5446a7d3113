"""logprob_kernels.py: per-token log-probs without [N, L, V] logits, against the naive route."""

import math
import os

import pytest
import torch

from kernels import logprobs
from kernels.logprobs import token_logprobs
from losses import readout_logits

T = torch.tensor


def random_case(seed: int, n: int, length: int, h: int, v: int, device):
    """hidden [n, length, h] and head [v, h] (fp64, with grad), ids [n, length]."""
    torch.manual_seed(seed)
    hidden = torch.randn(n, length, h, dtype=torch.float64).to(device).requires_grad_()
    head = torch.randn(v, h, dtype=torch.float64).to(device).requires_grad_()
    return hidden, head, torch.randint(0, v, (n, length)).to(device)


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


@pytest.mark.parametrize("chunk", [1, 5, 7, 1024])
def test_chunked_logprobs_and_readout_match_naive(chunk, device):
    n, length, h, v = 3, 7, 16, 50
    hidden, head, ids = random_case(0, n, length, h, v, device)
    slot = (
        T([6, -1, 2]).long().to(device)
    )  # row 0: the slot is the last position (generation stopped at the tag); row 1: none
    logp = token_logprobs(hidden, head, ids, chunk_tokens=chunk)  # [N, L-1]
    h_slot = hidden[torch.arange(n, device=device), slot.clamp(min=0)]  # [N, H]
    z = torch.where(slot >= 0, readout_logits(h_slot, head, high_id=7, low_id=11), 0.0)  # [N], as policy.forward

    logits = hidden.float() @ head.float().T  # naive [N, L, V]
    naive_logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    naive_z = torch.stack(
        [logits[0, 6, 7] - logits[0, 6, 11], logits.new_zeros(()), logits[2, 2, 7] - logits[2, 2, 11]]
    )
    assert z.dtype == torch.float32
    assert logp.shape == (n, length - 1)
    torch.testing.assert_close(logp, naive_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(z, naive_z, atol=1e-5, rtol=0)

    # gradients agree too (the checkpointed chunks recompute in backward)
    g_logp, g_z = torch.randn(n, length - 1).to(device), torch.randn(n).to(device)
    gh, gw = torch.autograd.grad((logp * g_logp).sum() + (z * g_z).sum(), (hidden, head))
    nh, nw = torch.autograd.grad((naive_logp * g_logp).sum() + (naive_z * g_z).sum(), (hidden, head))
    torch.testing.assert_close(gh.float(), nh.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gw.float(), nw.float(), atol=1e-4, rtol=1e-4)


def test_logprobs_at_a_temperature_by_hand():
    """logits (0, ln 4) at T = 2 are (0, ln 2): pi_T = (1/3, 2/3). d log pi_T(1) / d logits =
    (onehot - pi_T) / T = (-1/6, 1/6); with h = 1 that is the head's gradient, and the hidden
    state's is W . that = ln 4 / 6."""
    hidden = T([[[1.0], [1.0]]], dtype=torch.float64).requires_grad_()  # [1, 2, 1]
    head = T([[0.0], [math.log(4.0)]], dtype=torch.float64).requires_grad_()  # [2, 1]
    ids = torch.tensor([[0, 1]])
    logp = token_logprobs(hidden, head, ids, temperature=2.0)  # [1, 1]
    assert logp.item() == pytest.approx(math.log(2 / 3), abs=1e-7)
    logp.sum().backward()
    close(head.grad[:, 0], [-1 / 6, 1 / 6])
    assert hidden.grad[0, 0, 0].item() == pytest.approx(math.log(4.0) / 6, abs=1e-6)
    assert hidden.grad[0, 1, 0].item() == 0.0  # the last position predicts nothing
    assert token_logprobs(hidden, head, ids).item() == pytest.approx(math.log(4 / 5), abs=1e-7)  # T = 1
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(hidden, head, ids, temperature=0.0)


@pytest.mark.parametrize("chunk", [2, 1024])
def test_logprobs_at_a_temperature_match_naive(chunk, device):
    """log_softmax(logits / T) and its gradients, eager blocks, T = 0.7, scored columns only."""
    n, length, h, v = 2, 6, 8, 30
    hidden, head, ids = random_case(3, n, length, h, v, device)
    mask = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]], device=device)
    logp = token_logprobs(hidden, head, ids, chunk_tokens=chunk, score_mask=mask, temperature=0.7)
    naive = (
        torch.log_softmax((hidden.float() @ head.float().T)[:, :-1] / 0.7, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    )
    torch.testing.assert_close(logp[mask], naive[mask], atol=1e-5, rtol=0)
    weights = torch.randn(n, length - 1).to(device)
    got = torch.autograd.grad((logp * weights).sum(), (hidden, head))
    want = torch.autograd.grad((naive * weights * mask).sum(), (hidden, head))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), atol=1e-5, rtol=1e-5)


def test_logprobs_score_only_the_masked_columns(device):
    """score_mask: the masked columns equal the full computation, the others are exactly 0,
    and the gradient is that of the masked log-probs alone."""
    torch.manual_seed(1)
    n, length, h, v = 2, 6, 8, 30
    hidden = torch.randn(n, length, h, dtype=torch.float64).to(device).requires_grad_()
    head = torch.randn(v, h, dtype=torch.float64).to(device).requires_grad_()
    ids = torch.randint(0, v, (n, length)).to(device)
    mask = torch.tensor(
        [[False, False, True, True, True], [False, True, True, False, False]], device=device
    )  # [N, L-1]
    full = token_logprobs(hidden, head, ids, chunk_tokens=2)
    part = token_logprobs(hidden, head, ids, chunk_tokens=2, score_mask=mask)
    torch.testing.assert_close(part[mask], full[mask], atol=1e-6, rtol=0)
    assert (part[~mask] == 0).all()
    weights = torch.randn(n, length - 1).to(device)
    grads = torch.autograd.grad((part * weights).sum(), (hidden, head))
    want = torch.autograd.grad((full * weights * mask).sum(), (hidden, head))
    for got, expected in zip(grads, want):
        torch.testing.assert_close(got.float(), expected.float(), atol=1e-5, rtol=1e-5)
    assert float(grads[0][0, 0].abs().sum()) == 0.0  # column 0 of row 0 is not scored: no gradient


# The compiled blocks: through aot_eager (dynamo's capture, AOT autograd's split, the graph's
# in-place accumulation) and once through inductor's fused C++ kernels on the CPU (about 10 s
# of compilation); with CREDO_TEST_DEVICE=cuda (gpucheck), inductor's GPU kernels.
@pytest.mark.parametrize(
    "backend", ["inductor"] if os.environ.get("CREDO_TEST_DEVICE") == "cuda" else ["aot_eager", "inductor"]
)
def test_compiled_logprob_blocks_match_the_eager_ones(backend, device):
    """logprobs.compile_logprob_blocks: the same log-probs and gradients as the eager chunked
    kernel (fp32, to 1e-5), over blocks of 4 rows (a shorter last block), all columns or a
    score mask, and no scored column at all; one compilation serves every block size."""
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    torch.manual_seed(2)
    n, length, h, v = 3, 9, 16, 40
    hidden = torch.randn(n, length, h).to(device).requires_grad_()
    head = torch.randn(v, h).to(device).requires_grad_()
    ids = torch.randint(0, v, (n, length)).to(device)
    blocks = logprobs.compile_logprob_blocks(backend, chunk_tokens=4)
    assert blocks.chunk_tokens == 4
    weights = torch.randn(n, length - 1).to(device)
    some = torch.zeros(n * (length - 1), dtype=torch.bool)
    some[torch.randperm(n * (length - 1))[:14]] = True  # 14 of 24 columns: blocks of 4, 4, 4, 2
    masks = [None, some.reshape(n, length - 1), torch.zeros(n, length - 1, dtype=torch.bool)]
    for mask in masks:
        eager = token_logprobs(hidden, head, ids, chunk_tokens=3, score_mask=mask, temperature=0.7)
        compiled = token_logprobs(hidden, head, ids, score_mask=mask, blocks=blocks, temperature=0.7)
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=0)
        if mask is not None:
            assert (compiled[~mask.to(device)] == 0).all()
        want = torch.autograd.grad((eager * weights).sum(), (hidden, head), allow_unused=True)
        got = torch.autograd.grad((compiled * weights).sum(), (hidden, head), allow_unused=True)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 2  # forward and backward blocks compiled
    token_logprobs(hidden[:, :7], head, ids[:, :7], blocks=blocks).sum().backward()  # 18 rows: blocks of 4 and 2
    assert counters["stats"]["unique_graphs"] == graphs  # no recompilation (T = 1 either)
    torch._dynamo.reset()


def naive_head_logprobs(hidden, head: logprobs.Head, targets, t: float):
    """log softmax(hidden @ W'.T / T)[targets] with W' the [V, H] copy of the head's weight with its
    reserved rows in place: the route that Head exists to avoid."""
    full = head.weight.float().index_copy(0, torch.tensor(head.ids), head.rows)
    return torch.log_softmax(hidden.float() @ full.T / t, dim=-1).gather(1, targets[:, None]).squeeze(1)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_a_head_with_reserved_rows_gives_the_log_probs_and_gradients_of_the_rows_in_place(backend):
    """A Head (the matrix, frozen, and trained reserved rows beside it): the log-probs of the naive
    [V, H] copy with the rows in place, and its gradients, to the rows ([K, H]) and the hidden states,
    to 1e-5; the matrix gets none. Targets include both reserved ids; eager blocks of 4 rows, or
    compiled ones of 5 (a shorter last block)."""
    torch._dynamo.reset()
    torch.manual_seed(3)
    m, h, v, ids = 13, 8, 50, (3, 7)
    weight = torch.randn(v, h)
    rows = torch.randn(len(ids), h).requires_grad_()
    hidden = torch.randn(m, h).requires_grad_()
    targets = torch.randint(0, v, (m,))
    targets[:2] = torch.tensor(ids)
    head, upstream = logprobs.Head(weight, ids, rows), torch.randn(m)
    blocks = logprobs.compile_logprob_blocks(backend, chunk_tokens=5) if backend else None
    got = logprobs.selected_logprobs(hidden, head, targets, chunk_tokens=4, blocks=blocks, temperature=0.7)
    want = naive_head_logprobs(hidden, head, targets, 0.7)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for g, w in zip(
        torch.autograd.grad((got * upstream).sum(), (hidden, rows)),
        torch.autograd.grad((want * upstream).sum(), (hidden, rows)),
    ):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert not weight.requires_grad
    torch._dynamo.reset()


def test_head_logits_upcast_a_bf16_head_in_blocks_and_take_the_reserved_rows(monkeypatch):
    """Head.logits of a bf16 matrix (VOCAB_BLOCK = 7 rows here: 50 = 7 x 7 + 1) is fp32 and equals
    hidden @ W'.T with W' the fp32 copy with the rows in place, values and gradients to 1e-5
    relative; rows_of reads a trained row for a reserved id and the matrix's row (upcast) otherwise."""
    monkeypatch.setattr(logprobs, "VOCAB_BLOCK", 7)
    torch.manual_seed(4)
    weight = torch.randn(50, 8).bfloat16()
    rows = torch.randn(2, 8).requires_grad_()
    hidden = torch.randn(5, 8).requires_grad_()
    head = logprobs.Head(weight, (3, 7), rows)
    got = head.logits(hidden)
    full = weight.float().index_copy(0, torch.tensor([3, 7]), rows)
    want = hidden @ full.T
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    upstream = torch.randn(5, 50)
    for g, w in zip(
        torch.autograd.grad((got * upstream).sum(), (hidden, rows)),
        torch.autograd.grad((want * upstream).sum(), (hidden, rows)),
    ):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    picked = head.rows_of([7, 1])
    assert torch.equal(picked[0], rows[1]) and torch.equal(picked[1], weight[1].float())
    with pytest.raises(ValueError, match="trains an fp32 head only; this torch.bfloat16 head requires grad"):
        logprobs.Head(weight.clone().requires_grad_()).logits(hidden)
