"""attnbook.decoding: greedy decoding and beam search against brute force and each other, the score they
report, translation of unknown words and empty input, and clear errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from attnbook import data, decoding, seq2seq
from hypothesis import given, settings
from hypothesis import strategies as st

# one_thread: an autouse fixture, picked up where it is imported
from seq2seq_helpers import DEVICE, make_model, one_thread, random_src  # noqa: F401

# --- decoders against brute force and each other -------------------------------------------------------


def brute_force_best(model, src, max_len):
    """The most probable finished output with at most max_len steps, by enumerating every sequence."""
    V = model.decoder.vocab_size
    others = [t for t in range(V) if t != model.eos_id]
    best = (-math.inf, None)
    for n in range(max_len):
        for tokens in itertools.product(others, repeat=n):
            score = decoding.score_sequence(model, src, list(tokens))
            best = max(best, (score, list(tokens)))
    return best


@settings(max_examples=min(15, settings.default.max_examples), deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.booleans())
def test_beam_width_one_is_greedy(seed, T, attention):
    model = make_model(attention, seed=seed % 1000)
    src = random_src(1, T, seed=seed)[0]
    greedy = decoding.greedy_decode(model, src, max_len=8)[0]
    beam = decoding.beam_search(model, src, beam_width=1, max_len=8)
    assert beam.tokens == greedy.tokens and beam.finished == greedy.finished
    assert beam.score == pytest.approx(greedy.score, abs=1e-9)
    if attention:
        torch.testing.assert_close(beam.weights, greedy.weights)


@pytest.mark.parametrize("seed", range(4))
def test_exhaustive_beam_finds_the_most_probable_output(seed):
    V, max_len = 5, 3  # tokens <pad> <unk> <bos> <eos> and one word: 4 ** 2 + 4 + 1 outputs to enumerate
    model = make_model(V_tgt=V, seed=seed)
    with torch.no_grad():
        model.decoder.W_out.bias[model.eos_id] -= 1.0  # make outputs longer than one step plausible
    src = random_src(1, 4, seed=seed)[0]
    best_score, best_tokens = brute_force_best(model, src, max_len)
    beam = decoding.beam_search(model, src, beam_width=V**max_len, max_len=max_len)
    assert beam.finished and beam.tokens == best_tokens
    assert beam.score == pytest.approx(best_score, abs=1e-9)
    greedy = decoding.greedy_decode(model, src, max_len=max_len)[0]
    if greedy.finished:
        assert beam.score >= greedy.score - 1e-12


@settings(max_examples=min(10, settings.default.max_examples), deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 4))
def test_decoders_report_the_models_score_of_their_output(seed, width):
    model = make_model(seed=seed % 1000)
    src = random_src(1, 5, seed=seed)[0]
    for result in (
        decoding.greedy_decode(model, src, max_len=6)[0],
        decoding.beam_search(model, src, beam_width=width, max_len=6),
    ):
        recomputed = decoding.score_sequence(model, src, result.tokens, finished=result.finished)
        assert result.score == pytest.approx(recomputed, abs=1e-9)
        assert result.weights.shape == (len(result.tokens) + result.finished, 5)


def test_a_wider_beam_can_score_worse_than_greedy():
    # tokens: <pad> 0, <bos> 1, <eos> 2, A 3, B 4; the probabilities of the next token after each prefix
    table = {
        (): [0, 0, 0, 0.5005, 0.4995],  # A and B almost equally likely: greedy takes A
        (3,): [0, 0, 0.3, 0.4, 0.3],  # after A nothing is likely: A A has 0.2
        (3, 3): [0, 0, 1, 0, 0],  # A A <eos>: 0.2 in all, the most probable output
        (3, 4): [0, 0, 1, 0, 0],
        (4,): [0, 0, 0, 0.5, 0.5],  # B A and B B have 0.25 each, more than A A ...
        (4, 3): [0, 0, 0.6, 0, 0.4],  # ... but they end with 0.6 only: 0.15 in all
        (4, 4): [0, 0, 0.6, 0.4, 0],
    }
    model, src = decoding.PrefixTable(table), torch.tensor([5, 6])
    greedy = decoding.greedy_decode(model, src, max_len=4)[0]
    assert greedy.tokens == [3, 3] and greedy.finished
    assert greedy.score == pytest.approx(math.log(0.5005 * 0.4))
    wide = decoding.beam_search(model, src, beam_width=2, max_len=4)
    assert wide.finished and wide.score < greedy.score  # the beam dropped A A for B A and B B, worse in the end
    assert wide.score == pytest.approx(math.log(0.4995 * 0.5 * 0.6))
    exhaustive = decoding.beam_search(model, src, beam_width=25, max_len=4)
    assert exhaustive.tokens == [3, 3] and exhaustive.score == pytest.approx(greedy.score)
    with pytest.raises(ValueError, match="probabilities summing to 1"):
        decoding.PrefixTable({(): [0.5, 0.6, 0.0]})


def test_greedy_batch_equals_one_by_one_and_stops_at_max_len():
    model = make_model()
    src, lengths = random_src(3, 6, seed=11), [6, 2, 4]
    batch = decoding.greedy_decode(model, src, torch.tensor(lengths), max_len=5)
    for b, n in enumerate(lengths):
        alone = decoding.greedy_decode(model, src[b, :n], max_len=5)[0]
        assert batch[b].tokens == alone.tokens and batch[b].finished == alone.finished
        assert batch[b].score == pytest.approx(alone.score, abs=1e-9)
        torch.testing.assert_close(batch[b].weights, alone.weights)
        assert len(alone.tokens) + alone.finished <= 5


def test_decoding_an_empty_input_gives_an_empty_output():
    model = make_model()
    empty = torch.zeros(0, dtype=torch.long, device=DEVICE)
    for result in (
        decoding.greedy_decode(model, empty, max_len=5)[0],
        decoding.beam_search(model, empty, beam_width=3, max_len=5),
    ):
        assert result.tokens == [] and result.score == 0.0 and not result.finished
        assert result.weights.shape == (0, 0)
    batch = decoding.greedy_decode(model, random_src(2, 3), torch.tensor([3, 0]), max_len=4)
    assert batch[1].tokens == [] and batch[1].weights.shape == (0, 0)
    assert decoding.greedy_decode(model, random_src(1, 3), max_len=0)[0].tokens == []


def test_translate_maps_unknown_words_and_handles_empty_input():
    src_vocab, tgt_vocab = data.Vocab(["the", "cat", "sat"]), data.Vocab(["le", "chat"])
    model = seq2seq.Seq2Seq(len(src_vocab), len(tgt_vocab), d_embed=4, d_hidden=4).to(DEVICE)
    seen, out, weights = decoding.translate(model, ["the", "zebra", "sat"], src_vocab, tgt_vocab, max_len=4)
    assert seen == ["the", "<unk>", "sat"]
    assert all(t in tgt_vocab.itos for t in out) and len(out) <= 4
    assert weights.shape[1] == 3 and torch.isfinite(weights).all()
    for width in (1, 3):
        seen, out, weights = decoding.translate(model, [], src_vocab, tgt_vocab, beam_width=width)
        assert seen == [] and out == [] and weights.numel() == 0
    with pytest.raises(TypeError, match="tokenize it first"):
        decoding.translate(model, "the cat", src_vocab, tgt_vocab)


def test_bad_input_errors():
    model = make_model()
    src = random_src(2, 4)
    with pytest.raises(ValueError, match="beam_search decodes one sentence"):
        decoding.beam_search(model, src, beam_width=2, max_len=3)
    with pytest.raises(ValueError, match="beam_width must be an integer >= 1"):
        decoding.beam_search(model, src[0], beam_width=0, max_len=3)
    with pytest.raises(ValueError, match="max_len must be an integer >= 0"):
        decoding.greedy_decode(model, src, max_len=-1)
    with pytest.raises(TypeError, match="model must be a Seq2Seq"):
        decoding.greedy_decode(torch.nn.Linear(2, 2), src, max_len=3)
    with pytest.raises(ValueError, match=r"tokens must be ids in \[0, 8\)"):
        decoding.score_sequence(model, src[0], [4, 8])
