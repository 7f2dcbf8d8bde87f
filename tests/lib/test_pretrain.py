"""Masked language modelling (BERT's 80/10/10 rule, exactly and statistically), the MLM model and fine-tuning."""

import math
import subprocess
import sys

import pytest
import torch
from attnbook import bpe, data, models, pretrain
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

PAD, MASK = 0, 1


def small_config(V=50, **changes):
    return models.TransformerConfig(
        vocab_size=V, block_size=16, n_layers=2, n_heads=2, d_model=16, norm_position="pre", **changes
    )


def test_mlm_mask_equals_huggingface_collator_on_seeded_draws():
    tok = bpe.BPETokenizer([], specials=["[PAD]", "[MASK]"])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok.to_hf(), pad_token="[PAD]", mask_token="[MASK]")
    assert len(hf_tok) == tok.vocab_size and hf_tok.mask_token_id == MASK
    collator = DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15)
    g0 = torch.Generator().manual_seed(0)
    ids = torch.randint(2, tok.vocab_size, (16, 40), generator=g0)
    ids[:, 30:] = PAD
    for seed in range(5):
        collator.generator = torch.Generator().manual_seed(seed)
        theirs = collator.torch_mask_tokens(ids.clone(), special_tokens_mask=ids == PAD)
        ours = pretrain.mlm_mask(
            ids,
            mask_id=MASK,
            vocab_size=tok.vocab_size,
            special_ids=[PAD],
            generator=torch.Generator().manual_seed(seed),
        )
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_mlm_mask_follows_the_80_10_10_rule_statistically():
    V, n = 1000, 400_000
    ids = torch.randint(2, V, (400, n // 400), generator=torch.Generator().manual_seed(1))
    ids[:, -10:] = PAD
    inputs, labels = pretrain.mlm_mask(
        ids, mask_id=MASK, vocab_size=V, special_ids=[PAD], generator=torch.Generator().manual_seed(2)
    )
    chosen = labels != pretrain.IGNORE_INDEX
    real = ids != PAD
    assert not (chosen & ~real).any(), "padding is never chosen"
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])

    def within(k, total, p):  # 5 standard deviations of a binomial count
        return abs(k - total * p) < 5 * math.sqrt(total * p * (1 - p))

    n_real, n_chosen = int(real.sum()), int(chosen.sum())
    masked = int((inputs[chosen] == MASK).sum())
    kept = int((inputs[chosen] == ids[chosen]).sum())
    assert within(n_chosen, n_real, 0.15)
    assert within(masked, n_chosen, 0.8)
    # kept: the 10% left alone, plus the random replacements that drew the same token (1 in V)
    assert within(kept, n_chosen, 0.1 + 0.1 / V)
    assert within(n_chosen - masked - kept, n_chosen, 0.1 * (1 - 1 / V))


def test_mlm_mask_edge_cases_and_errors():
    ids = torch.randint(2, 30, (4, 8))
    inputs, labels = pretrain.mlm_mask(ids, mask_id=MASK, vocab_size=30, p=0.0)
    assert torch.equal(inputs, ids) and (labels == pretrain.IGNORE_INDEX).all()
    inputs, labels = pretrain.mlm_mask(ids, mask_id=MASK, vocab_size=30, p=1.0, mask_prob=1.0, random_prob=0.0)
    assert (inputs == MASK).all() and torch.equal(labels, ids)
    with pytest.raises(ValueError, match="mask_prob \\+ random_prob must be at most 1"):
        pretrain.mlm_mask(ids, mask_id=MASK, vocab_size=30, mask_prob=0.8, random_prob=0.3)
    with pytest.raises(ValueError, match="p must be a probability"):
        pretrain.mlm_mask(ids, mask_id=MASK, vocab_size=30, p=1.5)
    with pytest.raises(TypeError, match="ids must hold integer token ids"):
        pretrain.mlm_mask(ids.float(), mask_id=MASK, vocab_size=30)


def test_masked_lm_loss_is_the_loss_over_chosen_positions_and_sees_both_sides():
    torch.manual_seed(0)
    model = pretrain.MaskedLM(small_config()).eval()
    ids = torch.randint(2, 50, (3, 10))
    inputs, labels = pretrain.mlm_mask(
        ids, mask_id=MASK, vocab_size=50, p=0.3, generator=torch.Generator().manual_seed(0)
    )
    lengths = torch.tensor([10, 7, 4])
    labels[1, 7:] = pretrain.IGNORE_INDEX
    labels[2, 4:] = pretrain.IGNORE_INDEX
    full = pretrain.mlm_loss(model(inputs, lengths), labels)
    torch.testing.assert_close(model.loss(inputs, labels, lengths), full)
    assert model.head.embedding.weight is model.encoder.embed.token.weight  # tied output layer
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1 - 2) % 48 + 2
    assert not torch.allclose(model(ids)[:, 0], model(changed)[:, 0])  # bidirectional: position 0 sees the last
    nothing = torch.full_like(labels, pretrain.IGNORE_INDEX)
    assert model.loss(inputs, nothing).item() == 0.0


def test_classifier_ignores_padding_and_head_only_training_leaves_the_encoder():
    torch.manual_seed(0)
    encoder = models.Encoder(small_config())
    clf = pretrain.SequenceClassifier(encoder, 3).eval()
    ids, lengths = pretrain.pad([[5, 6, 7], [8, 9]], PAD)
    longer = torch.cat([ids, torch.full((2, 4), PAD)], dim=1)
    torch.testing.assert_close(clf(ids, lengths), clf(longer, lengths))
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    for p in encoder.parameters():
        p.requires_grad_(False)
    x = torch.randint(2, 50, (64, 6))
    y = x[:, 0] % 2  # learnable from the first token
    pretrain.fit_classifier(clf, x, torch.full((64,), 6), y, steps=5, batch_size=16)
    assert all(torch.equal(before[k], v) for k, v in encoder.state_dict().items())


def test_fine_tuning_learns_and_pretraining_lowers_the_mlm_loss():
    torch.manual_seed(0)
    x = torch.randint(2, 50, (256, 6))
    y = (x[:, 2] > 25).long()
    clf = pretrain.SequenceClassifier(models.Encoder(small_config()), 2)
    pretrain.fit_classifier(clf, x, torch.full((256,), 6), y, steps=150, lr=3e-3)
    assert pretrain.accuracy(clf, x, torch.full((256,), 6), y) > 0.9
    corpus = [[2, 3, 4, 5, 6, 7]] * 50 + [[7, 6, 5, 4, 3, 2]] * 50  # two sentences: every masked token is predictable
    model = pretrain.MaskedLM(small_config())
    history = pretrain.fit_mlm(model, corpus, pad_id=PAD, mask_id=MASK, steps=150, batch_size=32, quiet=True)
    assert sum(history.loss[:10]) / 10 > 3.0 and sum(history.loss[-20:]) / 20 < 1.2


def test_shuffled_word_task_keeps_the_letters_and_only_changes_their_order():
    words = data.words_of("To be, or not to be: that is the question. Whether tis nobler in the mind", min_len=3)
    assert words[:4] == ["not", "that", "the", "question"]
    texts, labels = data.shuffled_word_task(words * 3, seed=1)
    assert len(texts) == len(set(words))  # each distinct word once
    assert sorted(sorted(t) for t in texts) == sorted(sorted(w) for w in set(words))
    for t, label in zip(texts, labels):
        assert (t in words) == (label == 0)
    assert 0 < sum(labels) < len(labels)


def test_pad_and_errors():
    ids, lengths = pretrain.pad([[3, 4, 5], [6]], PAD, max_len=2)
    assert ids.tolist() == [[3, 4], [6, PAD]] and lengths.tolist() == [2, 1]
    with pytest.raises(ValueError, match=r"sequences\[1\] must be a non-empty list of token ids"):
        pretrain.pad([[3], []], PAD)
    clf = pretrain.SequenceClassifier(models.Encoder(small_config()), 2)
    with pytest.raises(ValueError, match="one row per example"):
        pretrain.accuracy(
            clf, torch.zeros(3, 4, dtype=torch.long), torch.full((2,), 4), torch.zeros(3, dtype=torch.long)
        )
    with pytest.raises(TypeError, match="encoder must be an attnbook.models.Encoder"):
        pretrain.SequenceClassifier(torch.nn.Linear(2, 2), 2)


def test_the_library_imports_without_hugging_face():
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['tokenizers'] = None\n"
        "from attnbook import bpe, lora, models, pretrain\n"
        "tok = bpe.BPETokenizer.train('to be or not to be', 260)\n"
        "assert tok.decode(tok.encode('to be')) == 'to be'\n"
        "try:\n    tok.to_hf()\nexcept ImportError:\n    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_mlm_loss_with_nothing_to_predict_is_zero():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    with torch.no_grad():
        logits[0, 0, 0] = math.nan  # a position that is not predicted: inert
    loss = pretrain.mlm_loss(logits, torch.full((2, 3), pretrain.IGNORE_INDEX))
    assert loss.item() == 0.0
    loss.backward()
    assert (logits.grad == 0).all()
