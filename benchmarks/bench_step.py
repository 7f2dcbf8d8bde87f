"""Benchmark: one training step of the lab's GPT on the CPU, this library against another revision of it.

A step is what ``train_lm`` does: the loss of a batch, the backward pass, gradient clipping and AdamW, at the
size of the book's recipe (``train_lm.RECIPES["book"]``: 2 layers, width 96, 24 windows of 64 characters),
with one compute thread. The library of the revision ``--against`` (from ``git archive``) is imported next to
this one, under another name; both models start from the same seed and see the same batches, and their steps
alternate (the order swapping every step), so that the load of a shared machine falls on both alike. The
result is the median of the paired ratios (this / that), with the 25% and 75% quantiles, and each one's
median time.

Writes benchmarks/results/step.json and its section of benchmarks/README.md (``--no-readme``: neither).

    .venv/bin/python benchmarks/bench_step.py --against main              # a few minutes
    .venv/bin/python benchmarks/bench_step.py --against HEAD~3 --steps 100 --no-readme
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def load_revision(revision: str, where: Path) -> str:
    """Unpack lib/attnbook of ``revision`` into ``where`` as the package ``attnbook_<hash>``; return its name."""
    commit = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True)
    name = f"attnbook_{commit.stdout.strip()}"
    archive = subprocess.run(["git", "archive", revision, "lib/attnbook"], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    (where / "lib" / "attnbook").rename(where / name)
    return name


def setup(package: str, seed: int):
    """The lab's GPT of ``package`` and its AdamW, from ``seed``."""
    models = importlib.import_module(f"{package}.models")
    recipe = importlib.import_module(f"{package}.train_lm").RECIPES["book"]
    torch.manual_seed(seed)
    model = models.GPT(recipe.model_config(65))
    return model, torch.optim.AdamW(model.parameters(), lr=recipe.lr), recipe


def step(model, optimizer, x, y) -> float:
    start = time.perf_counter()
    loss = model.loss(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        other = load_revision(args.against, Path(tmp))
        runs = {"this": setup("attnbook", 0), args.against: setup(other, 0)}
        recipe = runs["this"][2]
        g = torch.Generator().manual_seed(0)
        batches = [torch.randint(65, (recipe.batch_size, recipe.block_size + 1), generator=g) for _ in range(32)]
        times = {name: [] for name in runs}
        for i in range(args.warmup + args.steps):
            batch = batches[i % len(batches)]
            for name in list(runs)[:: 1 if i % 2 else -1]:
                dt = step(*runs[name][:2], batch[:, :-1], batch[:, 1:])
                if i >= args.warmup:
                    times[name].append(dt)
    ratios = [a / b for a, b in zip(times["this"], times[args.against])]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    result = {
        "against": args.against,
        "steps": args.steps,
        "recipe": {k: getattr(recipe, k) for k in ("n_layers", "n_heads", "d_model", "block_size", "batch_size")},
        "median_ms": {name: 1e3 * statistics.median(t) for name, t in times.items()},
        "ratio": statistics.median(ratios),
        "ratio_quartiles": [q1, q3],
        "machine": f"{cpu_name()}, 1 thread, torch {torch.__version__}",
        "loadavg": [load_before, loadavg()],
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(result, indent=1))
    if args.no_readme:
        return
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "step.json").write_text(json.dumps(result, indent=1) + "\n")
    ms = result["median_ms"]
    write_section(
        "bench_step",
        "<!-- bench_step:start -->\n## A training step of the lab's GPT against another revision (`bench_step.py`)\n\n"
        f"The book's recipe ({recipe.n_layers} layers, width {recipe.d_model}, {recipe.batch_size} windows of "
        f"{recipe.block_size}), forward, backward, clipping and AdamW, one thread; the steps of this library and "
        f"of `{args.against}` alternate, {args.steps} each. Run on {result['date']}: {result['machine']}; load "
        f"average {load_before} before and {result['loadavg'][1]} after.\n\n"
        f"| this (ms) | {args.against} (ms) | ratio, median of pairs [25%-75%] |\n|---:|---:|---:|\n"
        f"| {ms['this']:.2f} | {ms[args.against]:.2f} | {result['ratio']:.3f} [{q1:.3f}-{q3:.3f}] |\n"
        "<!-- bench_step:end -->",
    )


if __name__ == "__main__":
    main()
