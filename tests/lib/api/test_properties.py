"""The API properties (harness.py) run over every spec (specs_*.py), and every public entry point has one."""

import collections
import inspect
from types import SimpleNamespace

import pytest

# the specs register themselves in harness.SPECS when imported
import specs_attention  # noqa: F401
import specs_beyond  # noqa: F401
import specs_models  # noqa: F401
import specs_post  # noqa: F401
import specs_recurrent  # noqa: F401
import specs_tools  # noqa: F401
from harness import MODULES, SPECS, STATS, changes_of, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("name", sorted(SPECS))
def test_an_error_naming_the_argument_or_a_finite_result_equal_to_the_reference(name):
    @given(data=st.data())
    @settings(
        max_examples=min(SPECS[name].examples, settings.default.max_examples),  # the dev profile lowers it
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    def property_of_the_spec(data):
        sizes = SimpleNamespace(
            **{k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in SPECS[name].sizes.items()}
        )
        seed = data.draw(st.integers(0, 2**16), label="seed")
        change = data.draw(st.sampled_from(changes_of(name, sizes)), label="change")
        run_case(name, sizes, seed, change)

    property_of_the_spec()


# --- coverage and statistics --------------------------------------------------------------------------

EXCLUDED = {
    "attention.KVCache": "a container for keys and values, exercised through GroupedQueryAttention(cache=...) "
    "(test_blocks_modern, test_attention_conventions)",
    "flash.FlashAttentionFunction": "the autograd function behind flash_attention, exercised through it",
    "flash.FastMemory": "the counter of the IO model, exercised through standard_attention_io and flash_attention_io",
    "flash.IOCount": "the result type of the IO model",
    "vit_experiment.fit_classifier": "trains for a number of steps (test_vit); its inputs go through the checks of "
    "accuracy",
    "seq2seq.Memory": "the result type of Seq2Seq.encode, passed to seq2seq.Decoder here",
    "seq2seq.Batch": "the result type of make_batch, passed to sequence_loss here",
    "decoding.Translation": "the result type of greedy_decode and beam_search",
    "decoding.PrefixTable": "a hand-made table of probabilities for the decoding examples (test_decoding)",
    "measure.Timing": "the result type of time_fn",
    "measure.TensorMemoryTracker": "the context manager behind peak_memory, exercised through it",
    "costs.TransformerFlops": "the result type of transformer_flops",
    "graphs.GraphBatch": "the result type of two_ring_graphs",
    "graph_experiment.fit_graph_model": "trains for a number of steps (test_graph_experiment); its inputs go "
    "through the checks of accuracy",
    "data.Dataset": "the record of a data file in DATASETS, read by fetch",
    "data.DataNotAvailableError": "the error fetch raises when a file is nowhere (test_data)",
    "data.SentencePair": "the result type of load_eng_fra, passed to split_by_source here",
    "data.TextSplits": "the result type of load_shakespeare",
    "data.ImageSplits": "the result type of load_digits",
    "export.Exported": "the result type of to_onnx and tagger_to_onnx",
    "export.Prompt": "the result type of prompt_ids",
    "train_lm.Trainer": "one training run on Tiny Shakespeare (test_train_lm); its configuration is TrainConfig's, "
    "its checkpoints load_checkpoint's",
    "train_lm.train_run": "trains and writes a run's folder (test_train_lm), from a TrainConfig",
    "train_lm.main": "the command line (test_train_lm: flags, configuration files, torchrun)",
    "train_lm.CheckpointError": "the error of a refused checkpoint, raised here by load_checkpoint and load_model",
    "instructions.Instruction": "the record of one instruction (kind, prompt, answer), made by instructions",
}


def _public():
    """Every function and class in the ``__all__`` of the modules under test, by qualified name."""
    for module_name, module in MODULES.items():
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module_name}.{name}", obj


def test_every_public_entry_point_has_a_spec():
    public = dict(_public())
    covered = {id(s.target) for s in SPECS.values()}
    missing = sorted(n for n, obj in public.items() if id(obj) not in covered and n not in EXCLUDED)
    assert not missing, f"public entry points without a spec: {missing}"
    assert not set(EXCLUDED) - set(public), "EXCLUDED names something that is no longer public"
    assert not {n for n, obj in public.items() if id(obj) in covered} & set(EXCLUDED)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_spec_accepts_its_valid_call_and_refuses_a_list(name):
    """Deterministic anchors of the properties: the valid call at the smallest sizes gives a result, and the
    first tensor argument passed as a list (or the first argument changed its first way) gives an error."""
    sizes = SimpleNamespace(**{k: max(lo, min(hi, 2)) for k, (lo, hi) in SPECS[name].sizes.items()})
    if SPECS[name].valid_call_in is None:
        assert run_case(name, sizes, 0, None, count=False) == "result"
    _, args = SPECS[name].build(sizes)
    bad = next(
        ((k, "list") for k, a in args.items() if "list" in a.corruptions and not getattr(a, "list_ok", False)),
        next(((k, a.corruptions[0]) for k, a in args.items() if a.corruptions), None),
    )
    if bad is not None:
        outcome = run_case(name, sizes, 0, bad, count=False)
        assert outcome == "error" if bad[1] == "list" else outcome in ("error", "result")


def test_statistics(capsys):
    """How many cases the properties generated in this run (printed; every spec must have run)."""
    ran = {name for name, _ in STATS}
    if len(ran) < len(SPECS):
        pytest.skip("the statistics need the whole file")
    totals = collections.Counter()
    for (_, outcome), count in STATS.items():
        totals[outcome] += count
    entry_points = len({id(s.target) for s in SPECS.values()})
    with capsys.disabled():
        print(
            f"\nAPI properties: {entry_points} public entry points in {len(SPECS)} specs, "
            f"{sum(totals.values())} generated cases ({totals['error']} named errors, {totals['result']} results "
            f"equal to the reference)"
        )
