"""What the tests of attnbook.seq2seq and attnbook.decoding share: small models, random sources, one thread."""

import pytest
import torch
from attnbook import seq2seq, train

DEVICE = train.pick_device()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These models are tiny: one CPU thread is as fast, and much faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_model(attention=True, *, V_src=9, V_tgt=8, d_embed=6, d_hidden=5, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = seq2seq.Seq2Seq(V_src, V_tgt, d_embed=d_embed, d_hidden=d_hidden, d_attn=7, attention=attention)
    return model.to(DEVICE, dtype).eval()


def random_src(B, T, V=9, seed=0, low=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, V, (B, T), generator=g).to(DEVICE)
