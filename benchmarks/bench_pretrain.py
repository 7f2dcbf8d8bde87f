"""Benchmark: pretraining then fine-tuning (chapter 13) at a larger scale than the chapter runs.

The task is the chapter's: is a string a real word of Tiny Shakespeare (4 to 10 letters) or the same
letters shuffled? The encoder is the chapter's (2 layers, width 64, 4 heads, letters as tokens), pretrained
with masked language modelling on the words of the training text (the first 90%), one word at a time.

Two pretrainings: the chapter's (300 steps) and a longer one (``--pretrain-steps``, 1,200 by default). Then,
for each number of labelled examples and each seed (which examples, the head's initialisation, the batch
order), classifiers trained with the chapter's fine-tuning recipe (AdamW, batches of 32, a cosine schedule,
max(100, 3 passes over the examples) steps):

- ``from scratch``: the same encoder with fresh weights, everything trained (lr 1e-3);
- ``pretrained (300 steps), full``: the chapter's pretraining, everything trained (lr 1e-3);
- ``pretrained, full``: the longer pretraining, everything trained (lr 1e-3);
- ``pretrained, LoRA``: the longer pretraining frozen, LoRA with r = 4 on W_q and W_v, and the head (lr 1e-2);
- ``pretrained, head only``: the longer pretraining frozen, only the head trained (lr 1e-2).

Accuracy on the chapter's 2,000 held-out test strings. Writes benchmarks/results/pretrain.json and its
section of benchmarks/README.md (between ``<!-- bench_pretrain:start -->`` and ``<!-- bench_pretrain:end -->``).

    nice -n 10 .venv/bin/python benchmarks/bench_pretrain.py          # everything (about 25 min on a busy 2-core CPU)
    .venv/bin/python benchmarks/bench_pretrain.py --seeds 0 --sizes 50 --pretrain-steps 300 --no-readme  # a quick look
    .venv/bin/python benchmarks/bench_pretrain.py --from-json          # rewrite the README section only
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, summary, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import bpe, data, lora, measure, models, pretrain, train

HERE = Path(__file__).resolve().parent
ENCODER = dict(block_size=16, n_layers=2, n_heads=4, d_model=64, norm_position="pre")
PRETRAIN = dict(batch_size=256, lr=3e-3)
CHAPTER_STEPS = 300
N_TEST = 2000
METHODS = {  # name -> (which pretraining, how to adapt, learning rate)
    "from scratch": (None, "full", 1e-3),
    "pretrained (300 steps), full": ("short", "full", 1e-3),
    "pretrained, full": ("long", "full", 1e-3),
    "pretrained, LoRA": ("long", "lora", 1e-2),
    "pretrained, head only": ("long", "head", 1e-2),
}


def finetune_steps(n: int) -> int:
    """The chapter's 100 steps, or 3 passes over the labelled examples when that is more."""
    return max(100, round(3 * n / 32))


def run_pretraining(config, unlabelled, steps, pad, mask, device) -> tuple[pretrain.MaskedLM, dict]:
    torch.manual_seed(0)
    model = pretrain.MaskedLM(config).to(device)
    cpu, wall = time.process_time(), time.perf_counter()
    history = pretrain.fit_mlm(
        model, unlabelled, pad_id=pad, mask_id=mask, steps=steps, desc=f"pretraining ({steps} steps)", **PRETRAIN
    )
    info = {
        "steps": steps,
        "seconds": time.perf_counter() - wall,
        "cpu_seconds": time.process_time() - cpu,
        "final_loss": statistics.mean(history.loss[-50:]),
    }
    print(json.dumps(info), flush=True)
    return model, info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000, 3000])
    parser.add_argument("--pretrain-steps", type=int, default=1200)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "pretrain.json")
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="do not update the README table")
    parser.add_argument("--from-json", action="store_true", help="rewrite the README section from the JSON only")
    args = parser.parse_args(argv)
    if args.from_json:
        write_section("bench_pretrain", table(json.loads(args.out.read_text())), args.readme)
        return 0

    device = train.pick_device()
    env = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(device),
        "load_before": loadavg(),
    }
    started = time.perf_counter()
    text = data.fetch("tinyshakespeare").read_text(encoding="utf-8")
    train_text = text[: int(len(text) * 0.9)]
    chars = bpe.BPETokenizer([], specials=["[PAD]", "[MASK]"])
    pad, mask = chars.token_to_id["[PAD]"], chars.token_to_id["[MASK]"]
    texts, labels = data.shuffled_word_task(data.words_of(text, min_len=4, max_len=10), seed=0)
    ids, lengths = pretrain.pad([chars.encode(t) for t in texts], pad)
    labels = torch.tensor(labels)
    test = ids[:N_TEST], lengths[:N_TEST], labels[:N_TEST]
    pool = ids[N_TEST:], lengths[N_TEST:], labels[N_TEST:]
    sizes = [n for n in args.sizes if n <= len(pool[0])]
    config = models.TransformerConfig(vocab_size=chars.vocab_size, **ENCODER)
    unlabelled = [chars.encode(w) for w in data.words_of(train_text)]

    needed = {METHODS[m][0] for m in args.methods} - {None}
    encoders, pretraining = {}, {}
    for which, steps in (("short", CHAPTER_STEPS), ("long", args.pretrain_steps)):
        if which in needed:
            model, pretraining[which] = run_pretraining(config, unlabelled, steps, pad, mask, device)
            encoders[which] = model.encoder

    runs = []
    for n in sizes:
        for method in args.methods:
            which, how, lr = METHODS[method]
            for seed in args.seeds:
                torch.manual_seed(seed)
                encoder = pretrain.MaskedLM(config).encoder if which is None else copy.deepcopy(encoders[which])
                model = pretrain.SequenceClassifier(encoder, 2).to(device)
                if how in ("head", "lora"):
                    lora.freeze(model.encoder)
                if how == "lora":
                    lora.add_lora(model.encoder, ("W_q", "W_v"), r=4)
                chosen = torch.randperm(len(pool[0]), generator=torch.Generator().manual_seed(seed))[:n]
                cpu = time.process_time()
                pretrain.fit_classifier(
                    model,
                    *(t[chosen] for t in pool),
                    steps=finetune_steps(n),
                    batch_size=32,
                    lr=lr,
                    warmup=10,
                    seed=seed,
                )
                row = {
                    "method": method,
                    "n_labels": n,
                    "seed": seed,
                    "accuracy": pretrain.accuracy(model, *test),
                    "trainable": measure.count_parameters(model, trainable_only=True),
                    "steps": finetune_steps(n),
                    "cpu_seconds": time.process_time() - cpu,
                }
                runs.append(row)
                print(json.dumps(row), flush=True)
    env["load_after"] = loadavg()
    env["wall_seconds"] = time.perf_counter() - started
    result = {
        "date": env["date"],
        "seeds": args.seeds,
        "sizes": sizes,
        "n_test": N_TEST,
        "n_examples": len(texts),
        "encoder": ENCODER,
        "pretrain_settings": PRETRAIN,
        "pretrain": pretraining.get("long"),
        "pretrain_short": pretraining.get("short"),
        "environment": env,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    if not args.no_readme:
        write_section("bench_pretrain", table(result), args.readme)
    print(table(result))
    return 0


def table(result: dict) -> str:
    env = result["environment"]
    start, end = markers("bench_pretrain")
    methods = list(dict.fromkeys(r["method"] for r in result["runs"]))
    trainable = {m: next(r["trainable"] for r in result["runs"] if r["method"] == m) for m in methods}
    lines = [
        start,
        "## Pretraining then fine-tuning (`bench_pretrain.py`)",
        "",
        f"Chapter 13's task (real word of Tiny Shakespeare, or its letters shuffled?) with {result['n_examples']:,} "
        f"strings, {result['n_test']:,} held out for testing; the chapter's encoder ({result['encoder']['n_layers']} "
        f"layers, width {result['encoder']['d_model']}, letters as tokens). Test accuracy, the mean over seeds "
        f"{', '.join(map(str, result['seeds']))} with the lowest and highest value in brackets. Fine-tuning: "
        "max(100, 3 passes) steps of 32 examples.",
        "",
    ]
    for key, name in (("pretrain_short", "the chapter's pretraining"), ("pretrain", "the longer pretraining")):
        p = result.get(key)
        if p:
            lines.append(
                f"- {name}: {p['steps']:,} steps of {result['pretrain_settings']['batch_size']} words, "
                f"{p['cpu_seconds']:.0f} CPU seconds ({p['seconds']:.0f} s of wall time), final masked-LM "
                f"loss {p['final_loss']:.2f} nats per chosen letter;"
            )
    lines += [
        "",
        f"Run on {env['date']}: {env['cpu']} ({env['cores']} cores), {env['threads']} PyTorch thread"
        f"{'s' if env['threads'] != 1 else ''}, PyTorch {env['torch']}, device {env['device']}; load average "
        f"(1, 5, 15 min) {env['load_before']} before and {env['load_after']} after; {env['wall_seconds'] / 60:.0f} "
        "minutes in all. The machine is shared, so wall-clock times are pessimistic.",
        "",
        "| labelled examples | " + " | ".join(f"{m} ({trainable[m]:,} trained)" for m in methods) + " |",
        "|---:|" + "---:|" * len(methods),
    ]
    for n in result["sizes"]:
        cells = [
            summary([r["accuracy"] for r in result["runs"] if r["method"] == m and r["n_labels"] == n]) for m in methods
        ]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lines.append(end)
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
