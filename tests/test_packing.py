"""packing.py: the packed layout (doctests: shared prompts, where each row's positions go) and
sequence_attention's refusals. That a packed forward equals the padded one, outputs and
gradients, is tests/test_policy.py's (it needs the policy's forward)."""

import doctest

import pytest
import torch

from kernels import packing


def test_doctests():
    result = doctest.testmod(packing)
    assert result.attempted >= 5 and result.failed == 0


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
