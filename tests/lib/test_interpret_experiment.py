"""attnbook.interpret_experiment: the probes are held out (drawn from a stream no training run reads), their
twins have distinct letters, the measurements are the chapter's scores, and a short run records them."""

from __future__ import annotations

import math

import pytest
import torch
from attnbook import interpret
from attnbook import interpret_experiment as experiment

RECIPE = experiment.RECIPE


def test_probes_are_drawn_from_a_stream_no_training_run_reads():
    probes = experiment.probes()
    again = experiment.probes()
    assert list(probes) == RECIPE["probe_halves"]
    for M, (ids, distinct) in probes.items():
        assert ids.shape == distinct.shape == (RECIPE["probe_size"], 2 * M)
        assert torch.equal(ids, again[M][0]) and torch.equal(distinct, again[M][1])
        assert torch.equal(ids[:, :M], ids[:, M:]) and torch.equal(distinct[:, :M], distinct[:, M:])
        assert all(len(set(row[:M].tolist())) == M for row in distinct)
    # a run of seed s draws its batches from torch.Generator().manual_seed(s), s below the probes' seed: the
    # first batches of the chapter's and the benchmark's seeds share no stretch of ten letters with the probes
    # (with the probes drawn from seed 1, the first batch of seed 1 was the probes shifted by one draw)
    probe_text = "".join(chr(97 + i) for ids, _ in probes.values() for i in ids.flatten().tolist())
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        low, high = RECIPE["halves"]
        for _ in range(20):
            half = int(torch.randint(low, high + 1, (1,), generator=g))
            batch = interpret.repeated_tokens(RECIPE["batch_size"], half, 26, generator=g)
            for row in batch:
                assert "".join(chr(97 + i) for i in row[:10].tolist()) not in probe_text
    with pytest.raises(ValueError, match="seed must be below the probes' seed 1000"):
        experiment.train(2, RECIPE["probe_seed"])


def test_measure_gives_the_chapters_scores():
    torch.manual_seed(0)
    config = interpret.AttentionOnlyConfig(26, 47, n_layers=2, n_heads=2, d_model=16)
    model = interpret.AttentionOnly(config).eval()
    probes = {M: pair for M, pair in experiment.probes().items() if M in (8, 12)}
    got = experiment.measure(model, probes)
    assert set(got) == {"first half", "repeat"} | {f"prefix L{l}H{h}" for l in (1, 2) for h in (1, 2)} | {
        "previous L1H1",
        "previous L1H2",
    }
    with torch.no_grad():
        expected_first, expected_prefix = 0.0, 0.0
        for ids, distinct in probes.values():
            expected_first += interpret.repeat_losses(model(ids), ids)[0].item() / 2
            weights = model(distinct, return_weights=True)[1]
            expected_prefix += interpret.prefix_matching_score(weights[1])[0].item() / 2
    assert got["first half"] == pytest.approx(expected_first)
    assert got["prefix L2H1"] == pytest.approx(expected_prefix)


def test_a_short_run_records_every_measurement_and_is_reproducible():
    recipe = {**RECIPE, "steps": 4, "eval_every": 2, "d_model": 8, "probe_size": 4}
    model, steps, curves, seconds = experiment.train(2, 0, recipe, quiet=True)
    assert steps == [0, 2, 4] and seconds > 0
    assert all(len(v) == 3 for v in curves.values())
    assert abs(curves["first half"][0] - math.log(26)) < 0.5  # at initialisation, about a uniform guess
    _, _, again, _ = experiment.train(2, 0, recipe, quiet=True)
    assert again == curves
    assert experiment.phase_change_step([0, 25, 50], [3.0, 1.7, 1.0], 26) == 50
    assert experiment.phase_change_step([0, 25], [3.0, 2.0], 26) is None
