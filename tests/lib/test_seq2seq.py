"""attnbook.seq2seq: encoder, decoders with and without Bahdanau attention, batches and the loss; the input
checked once by Seq2Seq."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import decoding, seq2seq, train
from attnbook.attention import AdditiveAttention, AdditiveScore

# one_thread: an autouse fixture, picked up where it is imported
from seq2seq_helpers import DEVICE, make_model, one_thread, random_src  # noqa: F401
from torch import nn

# --- additive attention with precomputed keys (the part of attention.py the decoder relies on) -------------


def test_additive_score_with_projected_keys_equals_plain_call():
    score = AdditiveScore(d_query=3, d_key=5, d_attn=4).double()
    q, k = torch.randn(2, 6, 3, dtype=torch.float64), torch.randn(2, 7, 5, dtype=torch.float64)
    torch.testing.assert_close(score(q, k, projected_keys=score.project_keys(k)), score(q, k))
    attention = AdditiveAttention(3, 5, 4).double()
    v = torch.randn(2, 7, 2, dtype=torch.float64)
    keys = attention.score.project_keys(k)
    torch.testing.assert_close(attention(q, k, v, projected_keys=keys), attention(q, k, v))
    with pytest.raises(ValueError, match="projected_keys must have shape"):
        score(q, k, projected_keys=keys[..., :2])
    with pytest.raises(ValueError, match="keys must have width d_key=5"):
        score.project_keys(torch.randn(2, 7, 4))


# --- encoder -------------------------------------------------------------------------------------------


def test_encoder_annotations_are_forward_and_backward_states():
    model = make_model()
    enc = model.encoder
    src = random_src(1, 6)
    H, summary = enc(src, torch.tensor([6]))  # (1, 6, 10), (1, 10)
    x = enc.embed(src)  # (1, 6, E)
    rnn = enc.rnn
    fwd = nn.GRU(x.shape[-1], 5, batch_first=True).to(DEVICE, torch.float64)
    bwd = nn.GRU(x.shape[-1], 5, batch_first=True).to(DEVICE, torch.float64)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(fwd, f"{name}_l0").data.copy_(getattr(rnn, f"{name}_l0"))
        getattr(bwd, f"{name}_l0").data.copy_(getattr(rnn, f"{name}_l0_reverse"))
    h_fwd, _ = fwd(x)  # (1, 6, 5)
    h_bwd, _ = bwd(x.flip(1))  # reads the sentence from the end
    h_bwd = h_bwd.flip(1)  # (1, 6, 5), position i has read x_i ... x_T
    torch.testing.assert_close(H, torch.cat([h_fwd, h_bwd], dim=-1))
    torch.testing.assert_close(summary, torch.cat([h_fwd[:, -1], h_bwd[:, 0]], dim=-1))


def test_padded_batch_equals_each_sentence_alone():
    model = make_model()
    lengths = [5, 2, 7, 1]
    src = random_src(4, 7, seed=3)
    for b, n in enumerate(lengths):
        src[b, n:] = 0  # padding
    tgt_in = random_src(4, 4, V=8, seed=4)
    logits, weights = model(src, torch.tensor(lengths), tgt_in, return_weights=True)  # (4, 4, V), (4, 4, 7)
    for b, n in enumerate(lengths):
        alone, w_alone = model(src[b : b + 1, :n], torch.tensor([n]), tgt_in[b : b + 1], return_weights=True)
        torch.testing.assert_close(logits[b : b + 1], alone)
        torch.testing.assert_close(weights[b : b + 1, :, :n], w_alone)
        assert torch.all(weights[b, :, n:] == 0)  # padding gets exactly zero weight


def test_empty_source_gives_zero_annotations_and_no_nan():
    model = make_model()
    src = torch.zeros(2, 0, dtype=torch.long, device=DEVICE)
    H, summary = model.encoder(src, torch.tensor([0, 0]))
    assert H.shape == (2, 0, 10) and torch.all(summary == 0)
    logits = model(src, torch.tensor([0, 0]), random_src(2, 3, V=8))
    assert torch.isfinite(logits).all()
    src = random_src(2, 4)
    logits, w = model(src, torch.tensor([4, 0]), random_src(2, 3, V=8), return_weights=True)
    assert torch.isfinite(logits).all() and torch.all(w[1] == 0)  # nothing to attend to: zero weights


# --- the decoder step ----------------------------------------------------------------------------------


def test_attention_step_is_bahdanaus_formula():
    model = make_model()
    dec = model.decoder
    src = random_src(3, 6, seed=5)
    memory = model.encode(src, torch.tensor([6, 4, 2]))
    s_prev = torch.randn(3, 5, dtype=torch.float64, device=DEVICE)
    y_prev = torch.tensor([4, 5, 6], device=DEVICE)
    logits, s, a = dec.step(y_prev, s_prev, memory)
    W_1, W_2, v = dec.attention.score.W_1.weight, dec.attention.score.W_2.weight, dec.attention.score.v.weight[0]
    H = memory.annotations  # (3, 6, 10)
    e = torch.tanh((s_prev @ W_1.T).unsqueeze(1) + H @ W_2.T) @ v  # (3, 6): e_{t,i} = v^T tanh(W_1 s + W_2 h_i)
    e = e.masked_fill(
        torch.arange(6, device=DEVICE) >= torch.tensor([6, 4, 2], device=DEVICE).unsqueeze(1), float("-inf")
    )
    a_ref = torch.softmax(e, dim=-1)  # (3, 6)
    c = (a_ref.unsqueeze(-1) * H).sum(1)  # (3, 10): c_t = sum_i a_{t,i} h_i
    emb = dec.embed(y_prev)
    s_ref = dec.cell(torch.cat([emb, c], -1), s_prev)
    torch.testing.assert_close(a, a_ref)
    torch.testing.assert_close(s, s_ref)
    torch.testing.assert_close(logits, dec.W_out(torch.cat([s_ref, c, emb], -1)))
    assert torch.all(a[:, :2] > 0) and torch.all(a < 1)
    torch.testing.assert_close(a.sum(-1), torch.ones(3, dtype=torch.float64, device=DEVICE))


def test_without_attention_the_context_is_the_same_at_every_step():
    model = make_model(attention=False)
    memory = model.encode(random_src(2, 5), None)
    for _ in range(3):
        c, w = model.decoder.context(torch.randn(2, 5, dtype=torch.float64, device=DEVICE), memory)
        assert w is None
        torch.testing.assert_close(c, memory.summary)
    with pytest.raises(ValueError, match="needs a model with attention"):
        model(random_src(2, 5), None, random_src(2, 3, V=8), return_weights=True)


@pytest.mark.parametrize("attention", [True, False])
def test_teacher_forcing_equals_step_by_step(attention):
    model = make_model(attention)
    src, lengths = random_src(3, 5, seed=8), torch.tensor([5, 3, 4])
    tgt_in = random_src(3, 6, V=8, seed=9)
    logits = model(src, lengths, tgt_in)  # (3, 6, V)
    memory = model.encode(src, lengths)
    s = model.start(memory)
    for t in range(6):
        step_logits, s, _ = model.step(tgt_in[:, t], s, memory)
        torch.testing.assert_close(logits[:, t], step_logits)


def test_gradients_reach_every_parameter_without_alignment_supervision():
    model = make_model().train()
    batch = seq2seq.make_batch([([4, 5, 6], [4, 5]), ([7, 8], [6, 7, 4])], device=DEVICE)
    seq2seq.sequence_loss(model, batch).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name  # W_1, W_2 and v learn from the loss alone


def test_loss_at_init_is_near_log_vocabulary_and_one_batch_can_be_overfit():
    torch.manual_seed(0)
    V = 12
    model = seq2seq.Seq2Seq(V, V, d_embed=16, d_hidden=16).to(DEVICE)
    pairs = [([4 + i % 8, 5 + i % 7, 4 + (i * 3) % 8], [4 + (i * 5) % 8, 6 + i % 6]) for i in range(8)]
    batch = seq2seq.make_batch(pairs, device=DEVICE)
    with torch.no_grad():
        initial = seq2seq.sequence_loss(model, batch).item()
    assert abs(initial - math.log(V)) < 0.5
    history = train.fit(model, lambda step: batch, seq2seq.sequence_loss, steps=80, lr=2e-2)
    assert history.loss[-1] < 0.05
    decoded = decoding.greedy_decode(model, batch.src, batch.src_lengths, max_len=6)
    assert [d.tokens for d in decoded] == [t for _, t in pairs]


def test_make_batch_shifts_targets_for_teacher_forcing():
    batch = seq2seq.make_batch([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])], pad_id=0, bos_id=2, eos_id=3)
    assert batch.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch.src_lengths.tolist() == [3, 1]
    assert batch.tgt_in.tolist() == [[2, 8, 9, 0], [2, 8, 9, 10]]
    assert batch.tgt_out.tolist() == [[8, 9, 3, 0], [8, 9, 10, 3]]
    with pytest.raises(ValueError, match="pairs is empty"):
        seq2seq.make_batch([])


def test_bad_input_errors():
    model = make_model()
    src = random_src(2, 4)
    with pytest.raises(ValueError, match=r"src must hold token ids in \[0, 9\)"):
        model(src + 20, None, random_src(2, 3, V=8))
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        model(src.double(), None, random_src(2, 3, V=8))
    with pytest.raises(ValueError, match=r"src must have 2 dimensions"):
        model.encode(src[0])
    with pytest.raises(ValueError, match=r"src_lengths must lie in \[0, 4\]"):
        model(src, torch.tensor([5, 2]), random_src(2, 3, V=8))
    with pytest.raises(ValueError, match=r"src_lengths must hold one integer length per sequence, shape \(2,\)"):
        model(src, torch.tensor([4]), random_src(2, 3, V=8))
    with pytest.raises(ValueError, match="same batch size"):
        model(src, None, random_src(3, 3, V=8))
    with pytest.raises(ValueError, match=r"tgt_in must hold token ids in \[0, \d+\)"):
        model(src, None, random_src(2, 3, V=8) + 10)
    with pytest.raises(ValueError, match="eos_id=9 is outside the target vocabulary"):
        seq2seq.Seq2Seq(5, 8, eos_id=9)
    with pytest.raises(ValueError, match="d_hidden must be an integer >= 1"):
        seq2seq.Seq2Seq(5, 8, d_hidden=0)


def test_translation_explorer_draws_outputs_with_an_end_row_and_empty_input():
    import ipywidgets
    from attnbook import widgets

    def fake_translate(text):
        words = text.split()
        if not words:
            return [], [], torch.zeros(0, 0)
        w = torch.softmax(torch.randn(len(words) + 1, len(words)), dim=-1)  # one row more: the <eos> step
        return words, [w.upper() for w in words], w

    box = widgets.translation_explorer(fake_translate, "the cat sat")
    text = next(c for c in box.children if isinstance(c, ipywidgets.Text))
    picture = next(c for c in box.children if isinstance(c, ipywidgets.HTML) and c.value.startswith("<img"))
    assert (
        picture.value.startswith('<img src="data:image/png;base64,') and 'alt="Heatmap: THE CAT SAT.' in picture.value
    )
    first = picture.value
    text.value = ""  # an empty input draws a placeholder, not an error
    assert picture.value.startswith('<img src="data:image/png;base64,') and picture.value != first


def test_a_batch_is_checked_once_at_the_model_boundary(monkeypatch):
    """Seq2Seq checks src, its lengths and tgt_in once; the encoder and decoder inside run unchecked."""
    calls = []
    check_lengths = seq2seq._check_lengths
    monkeypatch.setattr(seq2seq, "_check_lengths", lambda *args: calls.append(args[0]) or check_lengths(*args))
    model = make_model()
    model(random_src(2, 4), torch.tensor([4, 2]), random_src(2, 3, V=8))
    assert calls == ["src_lengths"]
    model.encode(random_src(2, 4))
    assert calls == ["src_lengths", "src_lengths"]
