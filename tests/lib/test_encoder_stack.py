"""attnbook.blocks.EncoderStack and masked_mean: a transformer over any tokens, equivariant to their order."""

import pytest
import torch
from attnbook.attention import padding_mask
from attnbook.blocks import EncoderBlock, EncoderStack, masked_mean


def test_stack_equals_its_blocks_then_the_final_norm():
    torch.manual_seed(0)
    stack = EncoderStack(16, 4, 3).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = padding_mask([5, 3]).expand(2, 5, 5)
    bias = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    h = x
    for block in stack.blocks:
        assert isinstance(block, EncoderBlock) and block.norm_position == "pre"
        h = block(h, mask, score_bias=bias)
    torch.testing.assert_close(stack(x, mask, score_bias=bias), stack.norm_f(h))
    out, weights = stack(x, mask, score_bias=bias, return_weights=True)
    torch.testing.assert_close(out, stack.norm_f(h))
    assert len(weights) == 3 and weights[0].shape == (2, 4, 5, 5)
    assert torch.equal(weights[2][1, :, :, 3:], torch.zeros(4, 5, 2, dtype=torch.float64))  # padding unseen
    assert isinstance(EncoderStack(16, 4, 2, norm_position="post").norm_f, torch.nn.Identity)


def test_stack_is_permutation_equivariant():
    torch.manual_seed(1)
    stack = EncoderStack(8, 2, 2).double().eval()
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    bias = torch.randn(3, 7, 7, dtype=torch.float64)
    perm = torch.randperm(7)
    out = stack(x, score_bias=bias)
    torch.testing.assert_close(stack(x[:, perm], score_bias=bias[:, perm][:, :, perm]), out[:, perm])


def test_masked_mean():
    x = torch.arange(12.0).view(2, 3, 2)
    keep = torch.tensor([[True, False, True], [False, False, False]])
    torch.testing.assert_close(masked_mean(x, keep), torch.tensor([[2.0, 3.0], [0.0, 0.0]]))
    torch.testing.assert_close(masked_mean(x), x.mean(1))
    with pytest.raises(ValueError, match=r"keep must have shape \(B, T\) = \(2, 3\), got \(2, 2\)"):
        masked_mean(x, keep[:, :2])
