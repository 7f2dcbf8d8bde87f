"""Checkers of the lab: right pieces pass, the usual mistakes get their hint, stubs are 'not attempted'."""

import math

import pytest
import torch
import torch.nn.functional as F
from attnbook.exercises import ExerciseFailed
from attnbook.exercises import lab_mini_gpt as ex
from torch import nn


class Attention(nn.Module):
    """A right answer, with switches for the usual mistakes."""

    mistake = None

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.W_q, self.W_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.W_v, self.W_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        H, Dh = self.n_heads, D // self.n_heads
        split = (
            (lambda t: t.view(B, H, T, Dh))
            if self.mistake == "view"
            else (lambda t: t.view(B, T, H, Dh).transpose(1, 2))
        )
        q, k, v = split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x))
        scale = {"unscaled": 1.0, "sqrt_d_model": 1 / math.sqrt(D)}.get(self.mistake, 1 / math.sqrt(Dh))
        s = q @ k.transpose(-2, -1) * scale
        ones = torch.ones(T, T, dtype=torch.bool)
        if self.mistake != "no_mask":
            s = s.masked_fill(~(ones.triu() if self.mistake == "upside_down" else ones.tril()), float("-inf"))
        w = torch.softmax(s, dim=-2 if self.mistake == "axis" else -1)
        out = (w @ v).transpose(1, 2).reshape(B, T, D)
        return out if self.mistake == "no_projection" else self.W_o(out)


def with_mistake(name):
    return type(f"Attention_{name}", (Attention,), {"mistake": name})


class Stub(nn.Module):
    def __init__(self, *args):
        super().__init__()
        raise NotImplementedError


def test_causal_self_attention_checker():
    assert ex.check_causal_self_attention(Attention)
    assert not ex.check_causal_self_attention(Stub)
    hints = {
        "no_mask": "mask is missing",
        "upside_down": "upside down",
        "unscaled": "not scaled",
        "sqrt_d_model": "divided by sqrt\\(d_model\\)",
        "axis": "wrong axis",
        "view": "mixes positions",
        "no_projection": "apply W_o",
    }
    for mistake, hint in hints.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_causal_self_attention(with_mistake(mistake))

    class Named(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)

    with pytest.raises(ExerciseFailed, match="needs an attribute `W_q`"):
        ex.check_causal_self_attention(Named)


class Block(nn.Module):
    mistake = None

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm_1, self.attn = nn.LayerNorm(d_model), Attention(d_model, n_heads)
        self.norm_2 = nn.LayerNorm(d_model)
        self.W_1, self.W_2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def ffn(self, x):
        return self.W_2((F.gelu if self.mistake == "gelu" else F.relu)(self.W_1(x)))

    def forward(self, x):
        if self.mistake == "post":
            x = self.norm_1(x + self.attn(x))
            return self.norm_2(x + self.ffn(x))
        if self.mistake == "swapped":
            x = x + self.attn(self.norm_2(x))
            return x + self.ffn(self.norm_1(x))
        x = (0 if self.mistake == "no_attn_residual" else x) + self.attn(self.norm_1(x))
        return (0 if self.mistake == "no_residual" else x) + self.ffn(self.norm_2(x))


def test_block_checker():
    assert ex.check_block(Block)
    assert not ex.check_block(Stub)
    hints = {
        "post": "post-norm",
        "no_residual": "a residual connection is missing",
        "no_attn_residual": "attention's residual",
        "swapped": "norms are swapped",
        "gelu": "wrong non-linearity",
    }
    for mistake, hint in hints.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_block(type(f"Block_{mistake}", (Block,), {"mistake": mistake}))


class MiniGPT(nn.Module):
    mistake = None

    def __init__(self, vocab_size, block_size, d_model, n_heads, n_layers):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab_size, d_model), nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok_emb(idx)
        if self.mistake != "no_positions":
            x = x + self.pos_emb(torch.arange(T if self.mistake != "block_size" else self.pos_emb.num_embeddings))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(x if self.mistake == "no_final_norm" else self.norm_f(x))


def test_mini_gpt_checker():
    assert ex.check_mini_gpt(MiniGPT)
    assert not ex.check_mini_gpt(Stub)
    hints = {
        "no_positions": "position embeddings are not added",
        "no_final_norm": "final LayerNorm",
        "block_size": "raised RuntimeError",
    }
    for mistake, hint in hints.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_mini_gpt(type(f"GPT_{mistake}", (MiniGPT,), {"mistake": mistake}))

    class Untied(MiniGPT):
        def __init__(self, *args):
            super().__init__(*args)
            self.lm_head = nn.Linear(self.tok_emb.embedding_dim, self.tok_emb.num_embeddings, bias=False)

    with pytest.raises(ExerciseFailed, match="must be tied"):
        ex.check_mini_gpt(Untied)

    class HeadWithBias(MiniGPT):
        def __init__(self, *args):
            super().__init__(*args)
            self.lm_head = nn.Linear(self.tok_emb.embedding_dim, self.tok_emb.num_embeddings)
            self.lm_head.weight = self.tok_emb.weight

    with pytest.raises(ExerciseFailed, match="bias=False"):
        ex.check_mini_gpt(HeadWithBias)


def test_attention_with_shared_projections_fails():
    """W_k = W_q (one layer under two names) computes keys equal to the queries: a different function, which a
    comparison on copied weights alone would not see, since the reference would get the shared weights twice."""

    class SharedQK(Attention):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.W_k = self.W_q

    with pytest.raises(ExerciseFailed, match="`W_k` shares its weights with `W_q`"):
        ex.check_causal_self_attention(SharedQK)

    class SharedNorms(Block):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.norm_2 = self.norm_1

    with pytest.raises(ExerciseFailed, match="`norm_2` shares its weights with `norm_1`"):
        ex.check_block(SharedNorms)

    class SharedInBlock(Block):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.attn.W_v = self.attn.W_o

    with pytest.raises(ExerciseFailed, match="shares its weights"):
        ex.check_block(SharedInBlock)


@pytest.mark.parametrize("width", [2, 3, 8])
def test_block_and_model_want_the_feed_forward_width_of_the_task(width):
    class Wide(Block):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.W_1, self.W_2 = nn.Linear(d_model, width * d_model), nn.Linear(width * d_model, d_model)

    with pytest.raises(ExerciseFailed, match="`W_1` must map 16 features to 64"):
        ex.check_block(Wide)

    class WideGPT(MiniGPT):
        def __init__(self, vocab_size, block_size, d_model, n_heads, n_layers):
            super().__init__(vocab_size, block_size, d_model, n_heads, n_layers)
            self.blocks = nn.ModuleList(Wide(d_model, n_heads) for _ in range(n_layers))

    with pytest.raises(ExerciseFailed, match="`W_1` must map"):
        ex.check_mini_gpt(WideGPT)


def initialised(cls, init):
    """``cls`` whose ``__init__`` ends with ``init(self)``: a learner's own (degenerate) initialisation."""

    def __init__(self, *args):
        cls.__init__(self, *args)
        with torch.no_grad():
            init(self)

    return type(f"{cls.__name__}_initialised", (cls,), {"__init__": __init__})


def zero(*layers):
    for layer in layers:
        layer.weight.zero_()
        if getattr(layer, "bias", None) is not None:
            layer.bias.zero_()


def identity(layer):
    layer.weight.copy_(torch.eye(layer.weight.shape[0]))
    layer.bias.zero_()


class NonCausalBlock(Block):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.attn = with_mistake("no_mask")(d_model, n_heads)


# A wrong forward with an initialisation that makes it agree with the right one on the learner's own weights
# (zero output projection, zero queries and keys, an identity projection, a zero position table, a zero
# token embedding tied to the output layer, one Block repeated): the checkers give the learner's layers
# random weights of their own, so these fail, with the usual mistake's hint where there is one.
DEGENERATE = {
    "attention without mask, W_o = 0": (
        "check_causal_self_attention",
        initialised(with_mistake("no_mask"), lambda m: zero(m.W_o)),
        "mask is missing",
    ),
    "attention without mask, W_v = 0": (
        "check_causal_self_attention",
        initialised(with_mistake("no_mask"), lambda m: zero(m.W_v)),
        "mask is missing",
    ),
    "unscaled attention, W_q = W_k = 0": (
        "check_causal_self_attention",
        initialised(with_mistake("unscaled"), lambda m: zero(m.W_q, m.W_k)),
        "not scaled",
    ),
    "attention without W_o, W_o = identity": (
        "check_causal_self_attention",
        initialised(with_mistake("no_projection"), lambda m: identity(m.W_o)),
        "apply W_o",
    ),
    "block with GELU, W_2 = 0": (
        "check_block",
        initialised(type("Block_gelu", (Block,), {"mistake": "gelu"}), lambda m: zero(m.W_2)),
        "wrong non-linearity",
    ),
    "block with non-causal attention, attn.W_o = 0": (
        "check_block",
        initialised(NonCausalBlock, lambda m: zero(m.attn.W_o)),
        "not causal",
    ),
    "GPT without positions, pos_emb = 0": (
        "check_mini_gpt",
        initialised(type("GPT_no_positions", (MiniGPT,), {"mistake": "no_positions"}), lambda m: zero(m.pos_emb)),
        "position embeddings are not added",
    ),
    "GPT without positions or final norm, tok_emb = lm_head = 0": (
        "check_mini_gpt",
        initialised(type("GPT_no_final_norm", (MiniGPT,), {"mistake": "no_final_norm"}), lambda m: zero(m.tok_emb)),
        "final LayerNorm",
    ),
}


@pytest.mark.parametrize("name", DEGENERATE)
def test_checkers_see_through_the_learners_initialisation(name):
    checker, answer, hint = DEGENERATE[name]
    with pytest.raises(ExerciseFailed, match=hint):
        getattr(ex, checker)(answer)  # looked up now, so that conftest's replaying checker is the one run


def test_mini_gpt_checker_sees_skipped_blocks_and_one_repeated_block():
    class NoBlocks(MiniGPT):
        def forward(self, idx):
            x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
            return self.lm_head(self.norm_f(x))

    # with W_o = W_2 = 0 (and zero biases) every block is the identity, so skipping them looked right
    silent = lambda m: [zero(b.attn.W_o, b.W_2) for b in m.blocks]  # noqa: E731
    with pytest.raises(ExerciseFailed, match="on test case 1, values differ"):
        ex.check_mini_gpt(initialised(NoBlocks, silent))

    class Repeated(MiniGPT):  # nn.ModuleList([Block(...)] * n_layers): one Block, used n_layers times
        def __init__(self, vocab_size, block_size, d_model, n_heads, n_layers):
            super().__init__(vocab_size, block_size, d_model, n_heads, n_layers)
            self.blocks = nn.ModuleList([Block(d_model, n_heads)] * n_layers)

    with pytest.raises(ExerciseFailed, match="the same Block"):
        ex.check_mini_gpt(Repeated)


def test_checkers_leave_the_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    assert ex.check_causal_self_attention(Attention) and ex.check_block(Block) and ex.check_mini_gpt(MiniGPT)
    torch.testing.assert_close(torch.rand(3), expected)


def probs(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits / temperature, dim=-1)


def test_next_token_probs_checker():
    assert ex.check_next_token_probs(probs)
    assert not ex.check_next_token_probs(lambda *a: (_ for _ in ()).throw(NotImplementedError))
    wrong = {
        "multiplied by the temperature": lambda z, t, k: probs(z * t * t, t, k),
        "top_k is ignored": lambda z, t, k: probs(z, t),
        "without renormalising": lambda z, t, k: (
            probs(z, t) if k is None else probs(z, t).masked_fill(z < torch.topk(z, k, -1).values[..., -1:], 0.0)
        ),
    }
    for hint, fn in wrong.items():
        with pytest.raises(ExerciseFailed, match=hint):
            ex.check_next_token_probs(fn)


def generate(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None, generator=None, crop=True):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -block_size:] if crop else idx)[:, -1]
        nxt = torch.multinomial(probs(logits, temperature, top_k), 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def test_generate_checker():
    assert ex.check_generate(generate)

    def stub(*args, **kwargs):
        raise NotImplementedError

    assert not ex.check_generate(stub)
    with pytest.raises(ExerciseFailed, match="feed the model only the last block_size tokens") as info:
        ex.check_generate(lambda *a, **k: generate(*a, **k, crop=False))
    assert "at the line `logits = model(" in info.value.hint  # the learner's line, not the checker's
    with pytest.raises(ExerciseFailed, match="only the new tokens"):
        ex.check_generate(lambda m, idx, n, T, **k: generate(m, idx, n, T, **k)[:, idx.shape[1] :])


def test_generate_checker_samples_with_the_temperature_top_k_and_generator():
    def variant(*, greedy=False, temperature=None, top_k="given", use_generator=True):
        @torch.no_grad()
        def gen(model, idx, max_new_tokens, block_size, temperature_=1.0, top_k_=None, generator=None):
            t = temperature_ if temperature is None else temperature
            k = top_k_ if top_k == "given" else top_k
            for _ in range(max_new_tokens):
                logits = model(idx[:, -block_size:])[:, -1, :]
                if greedy:
                    new = logits.argmax(-1, keepdim=True)
                else:
                    probs = ex._probs(logits, t, k)
                    new = torch.multinomial(probs, 1, generator=generator if use_generator else None)
                idx = torch.cat([idx, new], dim=1)
            return idx

        return lambda model, idx, n, T, temperature=1.0, top_k=None, generator=None: gen(
            model, idx, n, T, temperature, top_k, generator
        )

    assert ex.check_generate(variant())
    with pytest.raises(ExerciseFailed, match="always takes the most likely token"):
        ex.check_generate(variant(greedy=True))
    with pytest.raises(ExerciseFailed, match="temperature is ignored"):
        ex.check_generate(variant(temperature=1.0))
    with pytest.raises(ExerciseFailed, match="top_k is ignored"):
        ex.check_generate(variant(top_k=None))
    with pytest.raises(ExerciseFailed):  # the global random state: other draws than the generator's
        ex.check_generate(variant(use_generator=False))
