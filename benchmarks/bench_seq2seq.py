"""Benchmark: the bottleneck experiment of chapter 03 at full size, digit strings of 5 to 50 digits.

Two encoder-decoders (``attnbook.seq2seq.Seq2Seq``) with the same sizes, one with Bahdanau attention and
one with a fixed context, learn to reverse random digit strings. Both get the same batches and the same
number of steps; every ``--eval-every`` steps, exact-match and per-digit accuracy of greedy decoding are
measured on 1,000 new strings, per length bucket. The chapter runs a small version of this (4 to 20
digits, a few hundred steps) to stay within its time budget; this script shows what longer training
gives on longer strings, the miniature version of Bahdanau et al.'s Figure 2.

Batches mix lengths within a window of 5 around a random centre, so little compute goes into padding.

Writes benchmarks/results/seq2seq.json and its section of benchmarks/README.md (between the markers
``<!-- bench_seq2seq:start -->`` and ``<!-- bench_seq2seq:end -->``, appended if missing).

    .venv/bin/python benchmarks/bench_seq2seq.py                       # the full run (about an hour on 1 CPU thread)
    .venv/bin/python benchmarks/bench_seq2seq.py --steps 300 --max-len 20 --no-readme   # a quick look
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import data, decoding, seq2seq, train

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "seq2seq.json"
README = HERE / "README.md"
START, END = "<!-- bench_seq2seq:start -->", "<!-- bench_seq2seq:end -->"


def buckets_for(min_len: int, max_len: int, width: int) -> list[tuple[int, int]]:
    out = []
    lo = min_len
    while lo <= max_len:
        hi = min(lo + width - 1, max_len)
        if max_len - hi < width // 2:  # fold a short last bucket into this one
            hi = max_len
        out.append((lo, hi))
        lo = hi + 1
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min-len", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--bucket", type=int, default=10, help="width of the length buckets")
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--d-hidden", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = train.pick_device()
    digits = data.Vocab(list("0123456789"))
    buckets = buckets_for(args.min_len, args.max_len, args.bucket)
    test = data.digit_pairs(args.n_test, args.min_len, args.max_len, task="reverse", seed=10**6 + args.seed)

    def encode(pairs):
        return [(digits.encode(list(s)), digits.encode(list(t))) for s, t in pairs]

    def batches(seed):
        rng = random.Random(seed)

        def batch(step):
            centre = rng.randint(args.min_len, args.max_len)
            lo, hi = max(args.min_len, centre - 2), min(args.max_len, centre + 2)
            pairs = data.digit_pairs(args.batch, lo, hi, task="reverse", seed=rng.randrange(10**9))
            return seq2seq.make_batch(encode(pairs), device=device)

        return batch

    def evaluate(model):
        exact, per_digit = collections.defaultdict(list), collections.defaultdict(list)
        for start in range(0, len(test), 250):
            chunk = test[start : start + 250]
            b = seq2seq.make_batch(encode(chunk), device=device)
            outs = decoding.greedy_decode(model, b.src, b.src_lengths, max_len=args.max_len + 2)
            for (source, target), out in zip(chunk, outs):
                guess = "".join(digits.decode(out.tokens))
                key = next(f"{lo}-{hi}" for lo, hi in buckets if lo <= len(source) <= hi)
                exact[key].append(guess == target)
                per_digit[key].append(sum(g == t for g, t in zip(guess, target)) / len(target))
        return {
            k: {
                "exact": sum(exact[k]) / len(exact[k]),
                "per_digit": sum(per_digit[k]) / len(per_digit[k]),
                "n": len(exact[k]),
            }
            for k in (f"{lo}-{hi}" for lo, hi in buckets)
        }

    load_before = loadavg()
    runs = {}
    for name, use_attention in (("attention", True), ("fixed context", False)):
        train.seed_everything(args.seed)
        model = seq2seq.Seq2Seq(
            len(digits), len(digits), d_embed=32, d_hidden=args.d_hidden, attention=use_attention
        ).to(device)
        checkpoints = []

        def record(m):  # fit calls this every eval_every steps and after the last one
            result = evaluate(m)
            checkpoints.append({"step": min((len(checkpoints) + 1) * args.eval_every, args.steps), "buckets": result})
            print(
                f"  {name}, step {checkpoints[-1]['step']}: exact "
                + " ".join(f"{k} {v['exact']:.2f}" for k, v in result.items()),
                flush=True,
            )
            return {f"exact {k}": v["exact"] for k, v in result.items()}

        cpu = time.process_time()
        history = train.fit(
            model,
            batches(args.seed + 1),
            seq2seq.sequence_loss,
            steps=args.steps,
            lr=args.lr,
            grad_clip=1.0,
            schedule=lambda s: 0.1 + 0.45 * (1 + math.cos(math.pi * s / args.steps)),
            evaluate=record,
            eval_every=args.eval_every,
            desc=name,
        )
        runs[name] = {
            "checkpoints": checkpoints,
            "seconds": history.seconds,
            "cpu_seconds": time.process_time() - cpu,
            "diverged": history.diverged,
            "final_loss": sum(history.loss[-50:]) / 50,
            "parameters": sum(p.numel() for p in model.parameters()),
        }

    result = {
        "config": vars(args),
        "buckets": [f"{lo}-{hi}" for lo, hi in buckets],
        "runs": runs,
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "device": str(device),
            "python": sys.version.split()[0],
        },
        "load_before": load_before,
        "load_after": loadavg(),
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    table = readme_section(result)
    print(table)
    if not args.no_readme:
        write_section("bench_seq2seq", table)
    return 0


def readme_section(result) -> str:
    cfg, runs = result["config"], result["runs"]
    final = {name: run["checkpoints"][-1]["buckets"] for name, run in runs.items()}
    lines = [
        START,
        "## The bottleneck, at full size (`bench_seq2seq.py`)",
        "",
        f"Reversing random digit strings of {cfg['min_len']} to {cfg['max_len']} digits (chapter 03, experiment 1, "
        f"at full size): two `seq2seq.Seq2Seq` models with d_hidden = {cfg['d_hidden']}, one with Bahdanau attention "
        f"and one with a fixed context, trained on the same {cfg['steps']} batches of {cfg['batch']} strings "
        f"(AdamW, learning rate {cfg['lr']} with a cosine decay to a tenth), then greedy decoding of "
        f"{cfg['n_test']} new strings. Exact match: every digit right; per digit: the share of positions right.",
        "",
        f"Run on {result['date']}: {result['machine']['cpu']} ({result['machine']['cores']} cores), "
        f"{cfg['threads']} PyTorch thread(s), PyTorch {result['machine']['torch']}, "
        f"device {result['machine']['device']}; "
        f"load average {result['load_before']} before and {result['load_after']} after (the machine is shared: "
        "the times are pessimistic). Training time: "
        + ", ".join(
            f"{name} {run['seconds'] / 60:.0f} min ({run['cpu_seconds'] / 60:.0f} min of CPU)"
            for name, run in runs.items()
        )
        + ".",
        "",
        "| length | exact, attention | exact, fixed context | per digit, attention | per digit, fixed context |",
        "|---|---:|---:|---:|---:|",
    ]
    for bucket in result["buckets"]:
        a, f = final["attention"][bucket], final["fixed context"][bucket]
        lines.append(
            f"| {bucket} | {a['exact']:.1%} | {f['exact']:.1%} | {a['per_digit']:.1%} | {f['per_digit']:.1%} |"
        )
    lines += [
        "",
        "Exact match of the attention model on the longest bucket during training: "
        + ", ".join(
            f"step {c['step']}: {c['buckets'][result['buckets'][-1]]['exact']:.1%}"
            for c in runs["attention"]["checkpoints"]
        )
        + ".",
        END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
