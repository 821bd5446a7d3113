"""packing.py: the micro-batch plan, the packed layout (doctests: shared prompts, where each row's
positions go) and sequence_attention's refusals. That a packed forward equals the padded one, outputs and
gradients, is tests/test_policy.py's (it needs the policy's forward)."""

import doctest

import pytest
import torch

from kernels import packing


def test_doctests():
    result = doctest.testmod(packing)
    assert result.attempted >= 9 and result.failed == 0


def test_a_rollout_longer_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="rollout 1 has 7 tokens, more than micro_batch_tokens = 6"):
        packing.micro_batches([5, 7], budget=6, group=1, packed=True)


def test_micro_batches_pack_whole_groups_up_to_the_budget():
    """Groups of 2, packed cost = their tokens: [3+3], [2+2], [9+1], [4+4]; budget 10."""
    lengths = [3, 3, 2, 2, 9, 1, 4, 4]
    plan = packing.micro_batches(lengths, budget=10, group=2, packed=True)
    assert plan == [[2, 3, 0, 1], [6, 7], [4, 5]]  # 4 + 6 = 10; 8; 10
    # padded, a micro-batch costs rows x longest: [2,2] 4, + [3,3] 4 x 3 = 12 > 10; [9,1] is 18 alone: split
    padded = packing.micro_batches(lengths, 10, 2, packed=False)
    assert padded == [[2, 3], [0, 1], [6, 7], [5], [4]]
    assert packing.pad_fraction(lengths, padded) == 0.0
    # groups play no part with group=1: rows by length 1, 2, 2, 3, 3, 4, 4, 9
    assert packing.micro_batches(lengths, budget=10, group=1, packed=True) == [[5, 2, 3, 0], [1, 6], [7], [4]]
    with pytest.raises(ValueError, match="8 rows are not whole groups of 3"):
        packing.micro_batches(lengths, 10, 3, packed=True)


def test_sequence_attention_refuses_a_padded_batch_with_segments():
    q = torch.zeros(2, 1, 4, 8)
    with pytest.raises(ValueError, match="one packed row without a mask; got a batch of 2 rows"):
        packing.sequence_attention(None, q, q, q, None, credo_segments=torch.tensor([[0, 2, 0, 0], [2, 4, 0, 0]]))


def test_sequence_attention_reads_its_segments_from_the_host():
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="must be a CPU tensor"):
        segments = torch.tensor([[0, 2, 0, 0], [2, 4, 0, 0]], device="meta")
        packing.sequence_attention(None, q, q, q, None, credo_segments=segments)


@pytest.mark.parametrize("segments", [[[0, 2, 0, 0], [3, 4, 0, 2]], [[0, 2, 0, 0], [2, 3, 0, 2]], [[1, 4, 0, 0]]])
def test_sequence_attention_refuses_segments_that_do_not_tile_the_row(segments):
    """A gap, a short cover and a late start: each would leave tokens unattended or misplaced."""
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="do not tile the row's 4 tokens"):
        packing.sequence_attention(None, q, q, q, None, credo_segments=torch.tensor(segments))


def test_a_completion_attends_to_its_prompt_and_causally_to_itself():
    """Exact case: a prompt of 2 tokens, a completion of 2 whose context is that prompt. Every
    query equals its key and all values are distinct one-hots, so with zero queries (equal
    scores) each output is the mean of the values it may see: the completion's first token
    sees 3 (prompt + itself), its second 4; the prompt's tokens 1 and 2."""
    query = torch.zeros(1, 1, 4, 4)
    value = torch.eye(4)[None, None]  # [1, 1, 4, 4]
    out, _ = packing.sequence_attention(
        None, query, query, value, None, credo_segments=torch.tensor([[0, 2, 0, 0], [2, 4, 0, 2]])
    )  # [1, 4, 1, 4]
    want = torch.tensor([[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 4, 1 / 4, 1 / 4, 1 / 4]])
    torch.testing.assert_close(out[0, :, 0], want)
