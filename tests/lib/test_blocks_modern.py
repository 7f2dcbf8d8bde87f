"""Modern tweaks: RMSNorm, SwiGLU, mixture of experts, RoPE, grouped-query attention, the KV cache."""

import math

import pytest
import torch
from attnbook import attention, blocks, costs, measure, models, positional
from hypothesis import given, settings
from hypothesis import strategies as st


def _gpt(**changes):
    config = models.TransformerConfig(vocab_size=17, block_size=12, n_layers=2, n_heads=4, d_model=16, **changes)
    torch.manual_seed(0)
    return models.GPT(config).eval()


@given(st.integers(1, 4), st.integers(1, 24), st.floats(1e-6, 1e-2))
@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
def test_rmsnorm_equals_torch(batch, d_model, eps):
    x = torch.randn(batch, 3, d_model, dtype=torch.float64) * 3
    ours = blocks.RMSNorm(d_model, eps=eps).double()
    ref = torch.nn.RMSNorm(d_model, eps=eps).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x))


def test_rmsnorm_is_registered_and_checks_width():
    assert isinstance(blocks.make_norm("rmsnorm", 8), blocks.RMSNorm)
    with pytest.raises(ValueError, match="d_model=8"):
        blocks.RMSNorm(8)(torch.randn(2, 5))


def test_swiglu_formula_and_parameter_count():
    torch.manual_seed(1)
    ffn = blocks.make_mlp("swiglu", 12, 32, bias=False)
    x = torch.randn(2, 5, 12)
    expected = (torch.nn.functional.silu(x @ ffn.W_1.weight.T) * (x @ ffn.W_2.weight.T)) @ ffn.W_3.weight.T
    torch.testing.assert_close(ffn(x), expected)
    D = 48
    relu = sum(p.numel() for p in blocks.make_mlp("relu", D, 4 * D, bias=False).parameters())
    swiglu = sum(p.numel() for p in blocks.make_mlp("swiglu", D, 8 * D // 3, bias=False).parameters())
    assert relu == swiglu == 8 * D * D


def test_moe_top_k_larger_than_experts_is_an_error():
    with pytest.raises(ValueError, match="top_k must be at most n_experts.*top_k=5 and n_experts=4"):
        blocks.MixtureOfExperts(8, 16, n_experts=4, top_k=5)
    with pytest.raises(ValueError, match="top_k must be at most n_experts"):
        blocks.register_moe(2, 3)


def test_moe_equals_its_routing_by_hand():
    torch.manual_seed(2)
    moe = blocks.MixtureOfExperts(8, 16, n_experts=4, top_k=2)
    x = torch.randn(3, 5, 8)
    y = moe(x)
    tokens = x.reshape(-1, 8)
    probs = torch.softmax(moe.router(tokens), -1)
    expected = torch.zeros_like(tokens)
    for n in range(tokens.shape[0]):
        top = probs[n].topk(2)
        for p, e in zip(top.values, top.indices):
            expected[n] += p * moe.experts[int(e)](tokens[n])
    torch.testing.assert_close(y, expected.reshape(3, 5, 8))
    assert int(moe.last_counts.sum()) == 15 * 2
    f = torch.bincount(probs.topk(2).indices.flatten(), minlength=4).double() / 30
    assert moe.last_aux_loss.item() == pytest.approx(4 * (f * probs.mean(0).double()).sum().item(), rel=1e-5)


def test_moe_aux_loss_is_one_when_balanced_and_e_when_collapsed():
    moe = blocks.MixtureOfExperts(4, 8, n_experts=4, top_k=1)
    with torch.no_grad():
        moe.router.weight.zero_()
    moe(torch.randn(10, 4))  # uniform probabilities; topk ties go to one expert
    assert moe.last_aux_loss.item() == pytest.approx(1.0)  # P_e = 1/4: E * sum f_e / E = 1
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = 100.0
    moe(torch.ones(10, 4))
    assert moe.last_aux_loss.item() == pytest.approx(4.0, rel=1e-3)
    assert moe.last_counts.tolist() == [10, 0, 0, 0]


def test_moe_in_a_gpt_and_aux_loss_has_gradient():
    name = blocks.register_moe(4, 2, expert="swiglu")
    model = _gpt(mlp=name, d_ff=8).train()
    idx = torch.randint(17, (2, 6))
    loss = model.loss(idx, idx) + 0.01 * blocks.moe_aux_loss(model)
    loss.backward()
    assert model.blocks[0].ffn.router.weight.grad.abs().sum() > 0
    assert blocks.moe_aux_loss(torch.nn.Linear(2, 2)).item() == 0.0


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 20))
@settings(max_examples=min(25, settings.default.max_examples), deadline=None)
def test_rope_keeps_norms_and_depends_on_relative_position(m, n, shift):
    g = torch.Generator().manual_seed(m * 100 + n)
    q, k = torch.randn(2, 8, generator=g, dtype=torch.float64)

    def rot(x, pos):
        return positional.apply_rope(x[None, None], offset=pos)[0, 0]

    torch.testing.assert_close(rot(q, m).norm(), q.norm())
    torch.testing.assert_close(rot(q, m) @ rot(k, n), rot(q, m + shift) @ rot(k, n + shift))


def test_rope_offset_matches_a_longer_sequence_and_checks_width():
    x = torch.randn(2, 3, 10, 8)
    torch.testing.assert_close(positional.apply_rope(x)[..., 4:, :], positional.apply_rope(x[..., 4:, :], offset=4))
    with pytest.raises(ValueError, match="divisible by 2"):
        positional.apply_rope(torch.randn(3, 5))


def test_gqa_equals_multi_head_when_groups_equal_heads():
    torch.manual_seed(3)
    mha = attention.MultiHeadAttention(16, 4)
    gqa = attention.GroupedQueryAttention(16, 4, 4)
    gqa.load_state_dict(mha.state_dict())
    x = torch.randn(2, 7, 16)
    mask = attention.padding_mask([7, 4])
    torch.testing.assert_close(gqa(x, mask=mask), mha(x, mask=mask))
    torch.testing.assert_close(gqa(x, is_causal=True), mha(x, is_causal=True))
    torch.testing.assert_close(
        gqa(x, is_causal=True, return_weights=True)[1], mha(x, is_causal=True, return_weights=True)[1]
    )


def test_gqa_shares_keys_within_a_group_and_saves_parameters():
    torch.manual_seed(4)
    gqa = attention.GroupedQueryAttention(16, 4, 2)
    assert gqa.W_k.weight.shape == (8, 16)
    # the explicit version: repeat each key/value head for its 2 query heads
    x = torch.randn(1, 5, 16)
    q = gqa.W_q(x).view(1, 5, 4, 4).transpose(1, 2)
    k = gqa.W_k(x).view(1, 5, 2, 4).transpose(1, 2).repeat_interleave(2, 1)
    v = gqa.W_v(x).view(1, 5, 2, 4).transpose(1, 2).repeat_interleave(2, 1)
    heads = attention.scaled_dot_product_attention(q, k, v, attention.causal_mask(5))
    torch.testing.assert_close(gqa(x, is_causal=True), gqa.W_o(heads.transpose(1, 2).reshape(1, 5, 16)))


def test_gqa_heads_not_divisible_by_kv_heads_is_an_error():
    with pytest.raises(ValueError, match="n_heads must be divisible by n_kv_heads.*n_heads=4 and n_kv_heads=3"):
        attention.GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="n_heads must be divisible by n_kv_heads"):
        models.TransformerConfig(vocab_size=5, n_heads=4, d_model=16, n_kv_heads=3)


def test_kv_cache_wrong_shape_is_an_error():
    gqa = attention.GroupedQueryAttention(16, 4, 2)
    cache = attention.KVCache()
    cache.k, cache.v = torch.zeros(1, 4, 3, 4), torch.zeros(1, 4, 3, 4)  # 4 heads where 2 are expected
    with pytest.raises(ValueError, match=r"cache.k must have shape \(B, H_kv, T_past, Dh\) = \(1, 2, 3, 4\)"):
        gqa(torch.randn(1, 1, 16), is_causal=True, cache=cache)
    cache.k, cache.v = torch.zeros(2, 2, 3, 4), torch.zeros(2, 2, 3, 4)  # batch 2 where 1 is given
    with pytest.raises(ValueError, match="cache.k must have shape"):
        gqa(torch.randn(1, 1, 16), is_causal=True, cache=cache)
    with pytest.raises(TypeError, match="cache must be an attnbook.attention.KVCache"):
        gqa(torch.randn(1, 1, 16), cache={"k": None})
    model = _gpt(positional="rope")
    with pytest.raises(ValueError, match="caches must be a list of 2 KVCache"):
        model(torch.zeros(1, 2, dtype=torch.long), caches=[attention.KVCache()])


@pytest.mark.parametrize(
    "changes",
    [dict(positional="rope"), dict(n_kv_heads=2), dict(n_kv_heads=1, positional="rope", norm="rmsnorm", mlp="swiglu")],
)
def test_cached_logits_and_greedy_tokens_equal_uncached(changes):
    model = _gpt(**changes)
    idx = torch.randint(17, (2, 7))
    caches = model.new_caches()
    parts = [model(idx[:, :4], caches=caches), model(idx[:, 4:5], caches=caches), model(idx[:, 5:], caches=caches)]
    torch.testing.assert_close(torch.cat(parts, dim=1), model(idx), atol=1e-5, rtol=1e-4)
    assert caches[0].length == 7
    prompt = idx[:, :3]
    # 20 new tokens: longer than block_size=12, so the cache is refilled once the context is full
    assert torch.equal(
        model.generate(prompt, 20, temperature=0), model.generate(prompt, 20, temperature=0, use_cache=True)
    )


def test_every_model_takes_a_cache_that_fits_the_block():
    model = _gpt()  # multi-head attention is grouped-query attention with n_kv_heads = n_heads: it takes a cache
    prompt = torch.randint(17, (2, 3))
    assert torch.equal(
        model.generate(prompt, 5, temperature=0), model.generate(prompt, 5, temperature=0, use_cache=True)
    )
    model = _gpt(positional="rope")
    caches = model.new_caches()
    model(torch.zeros(1, 10, dtype=torch.long), caches=caches)
    with pytest.raises(ValueError, match="more than block_size=12"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=caches)


def test_modern_gpt_trains_one_batch():
    model = _gpt(positional="rope", norm="rmsnorm", mlp="swiglu", n_kv_heads=2).train()
    torch.manual_seed(5)
    idx = torch.randint(17, (4, 12))
    first = model.loss(idx[:, :-1], idx[:, 1:])
    assert abs(first.item() - math.log(17)) < 0.5
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = model.loss(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first.item()


# --- QK normalisation and activation checkpointing (chapter: scaling and practice) -----------------------


def test_qk_norm_normalises_each_heads_queries_and_keys():
    torch.manual_seed(0)
    B, T, D, H = 2, 7, 24, 3
    attn = attention.GroupedQueryAttention(D, H, qk_norm=True, bias=False)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(B, T, D) * 5
    out, w = attn(x, is_causal=True, return_weights=True)
    Dh = D // H
    q = attn.W_q(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
    k = attn.W_k(x).view(B, T, H, Dh).transpose(1, 2)
    v = attn.W_v(x).view(B, T, H, Dh).transpose(1, 2)
    q = torch.nn.functional.layer_norm(q, (Dh,), attn.q_norm.weight)
    k = torch.nn.functional.layer_norm(k, (Dh,), attn.k_norm.weight)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(Dh)).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
    )
    expected = torch.softmax(scores, -1)  # (B, H, T, T)
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(out, attn.W_o((expected @ v).transpose(1, 2).reshape(B, T, D)))
    torch.testing.assert_close(attn(x, is_causal=True), out)  # the fused path agrees
    # the logits are bounded by sqrt(Dh) times the gains, however large the weights grow
    with torch.no_grad():
        attn.W_q.weight.mul_(100)
    _, w_big = attn(x, is_causal=True, return_weights=True)
    torch.testing.assert_close(w_big, w)  # a LayerNorm does not see the scale of its input


def test_qk_norm_in_a_gpt_config():
    config = models.TransformerConfig(vocab_size=11, block_size=8, n_layers=2, n_heads=2, d_model=16, qk_norm=True)
    model = models.GPT(config)
    assert all(block.self_attn.qk_norm for block in model.blocks)
    assert (
        measure.count_parameters(model)
        == measure.count_parameters(models.GPT(config.replace(qk_norm=False))) + 2 * 2 * 2 * 8
    )  # per layer: two LayerNorms of width Dh = 8, gain and bias
    ids = torch.randint(0, 11, (3, 8))
    logits, weights = model(ids, return_weights=True)
    torch.testing.assert_close(model(ids), logits)
    assert not hasattr(models.GPT(config.replace(qk_norm=False)).blocks[0].self_attn, "q_norm")


def test_checkpointing_changes_memory_not_results():
    torch.manual_seed(0)
    config = models.TransformerConfig(vocab_size=13, block_size=16, n_layers=3, n_heads=2, d_model=32, bias=False)
    model = models.GPT(config)
    ids, targets = torch.randint(0, 13, (4, 16)), torch.randint(0, 13, (4, 16))
    grads = []
    for checkpoint in (False, True):
        model.zero_grad()
        models.lm_loss(model(ids, checkpoint=checkpoint), targets).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    params = list(model.parameters())
    plain = measure.saved_tensor_bytes(lambda: model(ids), exclude=params)
    checkpointed = measure.saved_tensor_bytes(lambda: model(ids, checkpoint=True), exclude=params)
    per_layer = costs.activation_bytes(config, 4, 16)
    assert plain - checkpointed > 2.5 * per_layer  # three blocks' activations are no longer kept
    with torch.no_grad():
        torch.testing.assert_close(model(ids, checkpoint=True), model(ids))
