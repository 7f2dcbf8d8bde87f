"""The chat template and the loss mask: the layout of a turn, the targets instruction tuning trains on, new
tokens that leave the old logits alone, answer log-probabilities against a loop, batched answers against
one-at-a-time generation."""

import pytest
import torch
from attnbook import chat, data, models


@pytest.fixture(scope="module")
def tokenizer():
    return chat.ChatTokenizer(data.CharTokenizer("abc :"))


def test_a_turn_is_user_text_end_assistant_answer_end(tokenizer):
    ids, mask = chat.render(tokenizer, "ab", "c")
    a, b, c = tokenizer.encode("abc")
    assert ids == [tokenizer.user, a, b, tokenizer.end, tokenizer.assistant, c, tokenizer.end]
    assert mask == [False] * 5 + [True, True]  # the answer and its closing <|end|>
    assert tokenizer.decode(ids) == "<|user|>ab<|end|><|assistant|>c<|end|>"
    prompt, prompt_mask = chat.render(tokenizer, "ab")
    assert prompt == ids[:5] and not any(prompt_mask)
    bare, bare_mask = chat.render(tokenizer, "ab", "c", template=False)
    assert tokenizer.decode(bare) == "ab c" and bare_mask == [False] * 3 + [True]
    assert (tokenizer.user, tokenizer.assistant, tokenizer.end) == (5, 6, 7) and tokenizer.vocab_size == 8


def test_typed_text_cannot_produce_the_templates_tokens(tokenizer):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.encode("<|end|>")


def test_sft_targets_are_the_answer_only_and_padding_is_ignored(tokenizer):
    examples = [chat.render(tokenizer, "ab", "c"), chat.render(tokenizer, "a", "c")]
    x, y = chat.sft_batch(examples, pad=tokenizer.end)
    assert x.shape == y.shape == (2, 6)
    ids0 = torch.tensor(examples[0][0])
    assert torch.equal(x[0], ids0[:-1])
    assert y[0].tolist() == [-100] * 4 + ids0[5:].tolist()  # predicting c and <|end|> only
    assert y[1].tolist() == [-100] * 3 + [
        *tokenizer.encode("c"),
        tokenizer.end,
        -100,
    ]  # the second example is shorter: padded
    _, y_all = chat.sft_batch(examples, mask_prompt=False, pad=tokenizer.end)
    assert torch.equal(y_all[0], ids0[1:]) and y_all[1, -1] == -100  # every token but the padding


def test_added_tokens_leave_the_old_logits_unchanged():
    torch.manual_seed(0)
    config = models.TransformerConfig(vocab_size=9, block_size=8, n_layers=1, n_heads=2, d_model=16)
    model = models.GPT(config).eval()
    bigger = chat.add_tokens(model).eval()
    assert bigger.config.vocab_size == 12 and bigger.lm_head.weight is bigger.embed.token.weight
    ids = torch.randint(0, 9, (2, 6))
    torch.testing.assert_close(bigger(ids)[..., :9], model(ids))
    E = bigger.embed.token.weight
    torch.testing.assert_close(E[9:], model.embed.token.weight.mean(0).expand(3, -1))
    assert model.config.vocab_size == 9  # the original is not changed


def test_sequence_logprobs_sum_the_answer_tokens_and_ignore_padding():
    torch.manual_seed(1)
    config = models.TransformerConfig(vocab_size=7, block_size=10, n_layers=1, n_heads=2, d_model=8)
    model = models.GPT(config).eval()
    ids, mask = chat.pad_answers([[1, 2], [3, 4, 5]], [[6, 1, 6], [2]], pad=0)
    assert mask.tolist() == [[False, False, True, True, True], [False, False, False, True, False]]
    got = chat.sequence_logprobs(model, ids, mask)
    for b, (prompt, reply) in enumerate([([1, 2], [6, 1, 6]), ([3, 4, 5], [2])]):
        seq = torch.tensor([prompt + reply])
        logp = torch.log_softmax(model(seq), -1)[0]
        expected = sum(logp[len(prompt) + k - 1, tok] for k, tok in enumerate(reply))
        torch.testing.assert_close(got[b], expected)


def test_batched_answers_equal_one_at_a_time_greedy_generation():
    torch.manual_seed(2)
    tokenizer = chat.ChatTokenizer(data.CharTokenizer("abcd "))
    config = models.TransformerConfig(vocab_size=tokenizer.vocab_size, block_size=24, n_layers=1, n_heads=2, d_model=16)
    model = models.GPT(config).eval()
    with torch.no_grad():  # make <|end|> likely after a few tokens so that some answers stop
        model.lm_head.weight[tokenizer.end] *= 3
    prompts = ["ab", "dc", "abcd", "a", "ba"]
    answers = chat.answer(model, tokenizer, prompts, max_new_tokens=6, keep_end=True)
    for prompt, got in zip(prompts, answers):
        ids = torch.tensor([chat.render(tokenizer, prompt)[0]])
        out = model.generate(ids, 6, temperature=0.0)[0, ids.shape[1] :].tolist()
        expected = out[: out.index(tokenizer.end) + 1] if tokenizer.end in out else out
        assert got == expected
    plain = chat.answer(model, tokenizer, prompts, max_new_tokens=6)
    assert all(tokenizer.end not in a for a in plain)
    assert chat.exact_match(tokenizer, plain, [tokenizer.decode(a) for a in plain]).tolist() == [1.0] * 5
