"""The scaling grid: the lab's GPT at 7 sizes x 5 token budgets on Tiny Shakespeare (characters).

Every run trains the lab's model (``attnbook.train_lm``, the book's recipe: pre-norm, ReLU, no biases,
tied embeddings, learned positions, context 64) from scratch with its own warmup and cosine schedule,
sized to its own token budget, and reports the mean loss on the whole validation split. From the runs:

- loss against non-embedding parameters N at the largest budget, fitted with L = L_inf + (N_c / N)^alpha,
  and alpha's uncertainty by resampling the seeds (``attnbook.scaling``);
- loss against tokens, one curve per size;
- the compute-optimal size: at each compute budget C = 6 N D, each size's loss is interpolated between
  its runs, a parabola in ln N gives the best size N_opt(C), and N_opt ~ C^a is fitted.

How each run is set (the rule, the same for every size):

- batches of 16 windows of 64 characters, 1,024 tokens per step; the budgets are 2^17 to 2^21 tokens
  (128 to 2,048 steps; 2^21 is about 2.1 passes over the training text) for every size, and up to 2^24
  for the smaller sizes, as long as C = 6 N D stays under 2e12 FLOPs (for the isoFLOP profiles);
- peak learning rate lr(D) = 0.03 * (16 / D)^0.75 for width D (``scaling_grid.peak_lr``, fitted to short
  sweeps at widths 16, 32 and 96, listed in ``LR_SWEEPS`` and the README section), warmup over the first
  5% of the steps (at least 5), cosine decay to a tenth of the peak at the last step, AdamW (0.9, 0.99),
  weight decay 0.1, clipping at 1 (``scaling_grid.recipe``).

The runs are shared out over ``--workers`` processes of one thread each, the most expensive first. Each
finished run is appended to a JSON-lines file (``--runs``), so an interrupted grid continues where it
stopped when started again; the wall time reported is the sum over the invocations that trained. The
runs file of the committed results is in the repository: delete it to train the grid again.

    .venv/bin/python benchmarks/bench_scaling.py                       # the grid, 2 seeds, 2 workers
    .venv/bin/python benchmarks/bench_scaling.py --seeds 0 --seeds-largest 1   # seed 1 at 2^21 tokens only
    .venv/bin/python benchmarks/bench_scaling.py --smoke               # 3 tiny sizes, 2 short budgets
    .venv/bin/python benchmarks/bench_scaling.py --collect             # results and README from the runs file

Writes benchmarks/results/scaling.json and the section between the bench_scaling markers of
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import costs, measure, models, scaling, scaling_grid, train_lm

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scaling.json"
RUNS = HERE / "results" / "scaling_runs.jsonl"

# (n_layers, d_model, n_heads): widths and depths grow together, from 3 thousand to 440 thousand
# non-embedding parameters (2.15 decades).
SIZES = [(1, 16, 2), (1, 24, 2), (2, 24, 2), (2, 32, 4), (2, 48, 4), (3, 64, 4), (4, 96, 4)]
BUDGETS = [2**k for k in range(17, 22)]  # tokens, for every size: 131,072 to 2,097,152
# Longer runs for the smaller models, up to the compute of the second-largest model's longest run: at a
# fixed compute a small model trained on many tokens can beat a larger one trained on few, and the isoFLOP
# profiles need sizes on both sides of their minimum.
LONG_BUDGETS = [2**k for k in range(22, 25)]  # up to 16,777,216 tokens (about 17 passes over the text)
COMPUTE_CAP = 2.0e12  # FLOPs, C = 6 N D with N non-embedding
SEEDS = [0, 1]  # every budget: the bootstrap of L(N) resamples them
SEEDS_LARGEST: list[int] = []  # seeds for the largest budget only (a cheaper grid: --seeds 0 --seeds-largest 1)
BATCH, CONTEXT = 16, 64


def run_config(size: tuple[int, int, int], tokens: int, seed: int) -> train_lm.TrainConfig:
    return scaling_grid.recipe(*size, tokens, seed=seed, batch_size=BATCH, block_size=CONTEXT).replace(threads=1)


def budgets_for(size: tuple[int, int, int]) -> list[int]:
    """The token budgets of one size: every one of BUDGETS, and those of LONG_BUDGETS under COMPUTE_CAP."""
    n = size_info(size)["non_embedding"]
    return BUDGETS + [t for t in LONG_BUDGETS if 6 * n * t <= COMPUTE_CAP]


def size_info(size: tuple[int, int, int]) -> dict:
    config = run_config(size, BUDGETS[0], 0)
    model = models.GPT(config.model_config(65))
    flops = costs.transformer_flops(model)
    return {
        "n_layers": size[0],
        "d_model": size[1],
        "n_heads": size[2],
        "lr": scaling_grid.peak_lr(size[1]),
        "n_params": measure.count_parameters(model),
        "non_embedding": measure.count_parameters(model, non_embedding=True),
        "n": flops.n,
        "training_flops_per_token": flops.training,
        "six_n": flops.six_n,
    }


def cost(job: tuple) -> float:
    size, tokens, _ = job
    return tokens * (size_info(size)["training_flops_per_token"] + 2e5)  # + a fixed cost per token and step


def train_one(job: tuple) -> dict:
    """Train one (size, tokens, seed) run; evaluate on the whole validation split at powers of two and at the end."""
    size, tokens, seed = job
    torch.set_num_threads(1)
    config = run_config(size, tokens, seed)
    trainer = train_lm.Trainer(config, device="cpu")
    curve = []
    start = time.perf_counter()
    losses = []
    while trainer.step < config.steps:
        losses.append(trainer.train_step())
        s = trainer.step
        if (s >= 128 and s & (s - 1) == 0) or s == config.steps:
            curve.append({"step": s, "tokens": s * BATCH * CONTEXT, "val_loss": round(trainer.evaluate(), 5)})
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        "n_layers": size[0],
        "d_model": size[1],
        "n_heads": size[2],
        "tokens": tokens,
        "seed": seed,
        "steps": config.steps,
        "lr": config.lr,
        "warmup_steps": config.warmup_steps,
        "val_loss": curve[-1]["val_loss"],
        "train_loss": round(sum(tail) / len(tail), 5),
        "curve": curve,
        "train_seconds": round(trainer.train_seconds, 2),
        "seconds": round(time.perf_counter() - start, 2),
    }


def key(run: dict) -> tuple:
    return (run["n_layers"], run["d_model"], run["n_heads"], run["tokens"], run["seed"])


def analyse(result: dict) -> dict:
    """Fits of the grid's results: the law in N at the largest budget that every size has, and the
    compute-optimal sizes."""
    sizes = {(s["n_layers"], s["d_model"], s["n_heads"]): s for s in result["sizes"]}
    runs = result["runs"]
    seeds = sorted({r["seed"] for r in runs})
    budgets = sorted({r["tokens"] for r in runs})
    largest = max(t for t in budgets if all(any(key(r)[:4] == s + (t,) for r in runs) for s in sizes))
    by = {key(r): r["val_loss"] for r in runs}
    complete = [s for s in sizes if all(s + (largest, seed) in by for seed in seeds)]
    out = {"budget_for_n": largest, "seeds": seeds}
    if len(complete) >= 3:
        n = [sizes[s]["non_embedding"] for s in complete]
        loss = [[by[s + (largest, seed)] for seed in seeds] for s in complete]
        boot = scaling.bootstrap_scaling_law(n, loss, n_boot=1000, seed=0) if len(seeds) > 1 else None
        fit = boot.fit if boot else scaling.fit_scaling_law(n, [row[0] for row in loss])
        out["law_in_n"] = {
            "alpha": fit.alpha,
            "N_c": fit.x_c,
            "L_inf": fit.L_inf,
            "rmse": fit.rmse,
            "alpha_interval_90": boot.interval(0.9) if boot else None,
            "alpha_std": boot.std if boot else None,
        }
    # the compute-optimal frontier, on the mean over seeds of each (size, budget), with N counted without
    # the embeddings (as Kaplan et al.) and with them (as Hoffmann et al.)
    for count, suffix in (("non_embedding", ""), ("n_params", "_all_params")):
        cells = [
            (sizes[s][count], t, [by[s + (t, seed)] for seed in seeds if s + (t, seed) in by])
            for s in sizes
            for t in budgets
        ]
        cells = [(n, t, sum(v) / len(v)) for n, t, v in cells if v]
        if not cells:
            continue
        compute = [6 * n * t for n, t, _ in cells]
        grid = [min(compute) * (max(compute) / min(compute)) ** (i / 24) for i in range(25)]
        frontier = scaling.compute_optimal_frontier(
            [c[0] for c in cells], [c[1] for c in cells], [c[2] for c in cells], grid
        )
        out["frontier" + suffix] = [{"compute": f.compute, "n_opt": f.n_opt, "loss_opt": f.loss_opt} for f in frontier]
        if len(frontier) >= 3:
            a, coef = measure.fit_power_law([f.compute for f in frontier], [f.n_opt for f in frontier])
            out["n_opt_exponent" + suffix] = a
            out["n_opt_coefficient" + suffix] = coef
    return out


def markdown(result: dict) -> str:
    sizes = result["sizes"]
    budgets = sorted({r["tokens"] for r in result["runs"]})
    seeds = sorted({r["seed"] for r in result["runs"]})
    by = {key(r): r["val_loss"] for r in result["runs"]}
    head = "| model (layers x width) | non-embedding N | lr | " + " | ".join(f"{t:,} tokens" for t in budgets) + " |"
    rows = [head, "|---|---:|---:|" + "---:|" * len(budgets)]
    for s in sizes:
        cells = []
        for t in budgets:
            values = [
                by[k] for k in [(s["n_layers"], s["d_model"], s["n_heads"], t, seed) for seed in seeds] if k in by
            ]
            cells.append(f"{sum(values) / len(values):.3f}" if values else "")
        rows.append(
            f"| {s['n_layers']} x {s['d_model']} | {s['non_embedding']:,} | {s['lr']:.4f} | " + " | ".join(cells) + " |"
        )
    a = result["analysis"]
    counts = {t: len({r["seed"] for r in result["runs"] if r["tokens"] == t}) for t in budgets}
    lines = [
        "Validation loss (nats per character, whole validation split); each cell is a run trained to that "
        "many tokens with its own schedule, the mean over seeds "
        + ", ".join(map(str, seeds))
        + ("" if len(set(counts.values())) == 1 else " where they were trained")
        + ".",
        "",
        *rows,
        "",
    ]
    law = a.get("law_in_n")
    if law:
        interval = law["alpha_interval_90"]
        lines.append(
            f"Fit at {a['budget_for_n']:,} tokens: L(N) = {law['L_inf']:.3f} + "
            f"({law['N_c']:.3g} / N)^{law['alpha']:.3f}"
            + (
                f", alpha 90% bootstrap interval [{interval[0]:.3f}, {interval[1]:.3f}] (seeds resampled)"
                if interval
                else ""
            )
            + f"; rms error {law['rmse']:.4f}."
        )
    if "n_opt_exponent" in a:
        lines.append(
            f"Compute-optimal size: N_opt ~ C^{a['n_opt_exponent']:.2f} over "
            f"{len(a['frontier'])} budgets from {a['frontier'][0]['compute']:.2g} to "
            f"{a['frontier'][-1]['compute']:.2g} FLOPs (C = 6 N D, N non-embedding)"
            + (
                f"; with all parameters counted, N_opt ~ C^{a['n_opt_exponent_all_params']:.2f}"
                if "n_opt_exponent_all_params" in a
                else ""
            )
            + "."
        )
    m = result["machine"]
    lines += [
        "",
        f"Measured {result['date']} on {m['cpus']} CPUs ({m['processor']}), torch {m['torch']}, "
        f"{result['workers']} worker processes of 1 thread, niced; {len(result['runs'])} runs in "
        f"{result['wall_seconds'] / 60:.0f} min of wall time ({result.get('segments', 1)} invocation(s)); "
        f"load average {m['load_start']} at the start "
        f"and {m['load_end']} at the end (the machine is shared).",
        "",
        HISTORY,
        "",
        "Learning-rate rule lr(D) = 0.03 (16 / D)^0.75, from short sweeps (about a million tokens, one seed):",
        "",
        LR_SWEEPS,
    ]
    return "\n".join(lines) + "\n"


# How the committed results were produced (the machine was shared throughout).
HISTORY = """The committed grid ran in four invocations on 2026-11-23 (the load averages above are those of the
last one). The first trained seed 0 at 2^17 to 2^21 tokens for 47 minutes while the machine's load average
stayed near 10 (other work on the machine; the benchmark runs niced, so it got about a tenth of a
core per worker) and was stopped with 15 runs done; the second finished seed 0 and trained seed 1 at
2^21 tokens (13 minutes, load falling to 4); the third was stopped after a minute when the isoFLOP
profiles turned out not to bracket their minima (the smallest size won at every budget) and the longer
budgets for the small models were added; the fourth trained those and the rest of seed 1 (24 minutes,
load 3 to 6). Wall time is the sum of the four. How much the load mattered: the 4 x 96 model at 2^20
tokens took 854 s (seed 0, first invocation) and 59 s (seed 1, fourth)."""

# Short sweeps that set the rule (1,302 steps of 12 windows of 64 characters, about 1 M tokens, seed 1337,
# GELU instead of ReLU; one thread on the shared machine, 2026-11-23).
LR_SWEEPS = """| model | peak learning rate: validation loss | the rule gives |
|---|---|---|
| 1 x 16 | 0.003: 2.473, 0.006: 2.324, 0.012: 2.269, **0.024: 2.194**, 0.048: 2.211, 0.096: 2.291 | 0.030 |
| 2 x 32 | 0.006: 2.107, **0.012: 2.025**, 0.024: 2.044 | 0.018 |
| 4 x 96 | 0.002: 2.000, 0.004: 1.928, **0.008: 1.892**, 0.016: 1.927 | 0.0078 |
"""


def write_readme(result: dict) -> None:
    start, end = markers("bench_scaling")
    write_section(
        "bench_scaling", f"{start}\n## Scaling laws in miniature (`bench_scaling.py`)\n\n{markdown(result)}{end}"
    )


def read_runs(path: Path) -> tuple[dict, list[dict]]:
    """The finished runs of a runs file, by key, and its segments: one per invocation that trained, with the
    time it started and the time its last run finished (seconds since the epoch)."""
    done, segments = {}, []
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "segment_start" in record:
                segments.append({"start": record["segment_start"], "end": record.get("segment_end")})
            else:
                done[key(record)] = record
                if segments and "finished_at" in record:
                    segments[-1]["end"] = max(segments[-1]["end"] or 0, record["finished_at"])
    return done, segments


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help="seeds trained at every budget")
    parser.add_argument(
        "--seeds-largest",
        type=int,
        nargs="*",
        default=SEEDS_LARGEST,
        help="further seeds trained at the largest budget only (for the bootstrap of L(N))",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--runs", type=Path, default=RUNS, help="JSON lines of finished runs (to continue a grid)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: write the results and the README section from the runs file",
    )
    parser.add_argument("--smoke", action="store_true", help="2 tiny sizes, 2 short budgets, 1 seed: a quick check")
    args = parser.parse_args(argv)
    os.environ.setdefault("ATTNBOOK_PROGRESS", "0")
    global SIZES, BUDGETS, LONG_BUDGETS
    if args.smoke:
        SIZES, BUDGETS, LONG_BUDGETS = [(1, 16, 2), (1, 24, 2), (2, 24, 2)], [2**14, 2**15], [2**16]
        args.seeds, args.seeds_largest, args.no_readme = [0], [], True
        args.out = args.out.with_name("scaling_smoke.json")
        args.runs = args.runs.with_name("scaling_smoke_runs.jsonl")
    jobs = [(size, tokens, seed) for seed in args.seeds for size in SIZES for tokens in budgets_for(size)]
    jobs += [(size, BUDGETS[-1], seed) for seed in args.seeds_largest for size in SIZES]
    done, segments = read_runs(args.runs)
    todo = [j for j in jobs if (j[0] + (j[1], j[2])) not in done]
    todo.sort(key=lambda j: -cost(j))  # the most expensive first, so that the two workers finish together
    print(f"{len(jobs)} runs in the grid, {len(done)} already done, {len(todo)} to train", flush=True)
    load_start = loadavg()
    if todo and not args.collect:
        wall = time.perf_counter()
        args.runs.parent.mkdir(parents=True, exist_ok=True)
        with mp.get_context("spawn").Pool(args.workers) as pool, open(args.runs, "a") as log:
            log.write(json.dumps({"segment_start": time.time()}) + "\n")
            log.flush()
            for run in pool.imap_unordered(train_one, todo):
                run["finished_at"] = round(time.time(), 1)
                done[key(run)] = run
                log.write(json.dumps(run) + "\n")
                log.flush()
                print(
                    f"[{time.perf_counter() - wall:7.0f} s] {run['n_layers']}x{run['d_model']} {run['tokens']:>9,} "
                    f"tokens seed {run['seed']}: val {run['val_loss']:.4f} in {run['seconds']:.0f} s",
                    flush=True,
                )
        done, segments = read_runs(args.runs)
    wanted = {j[0] + (j[1], j[2]) for j in jobs}
    last = max((r.get("finished_at", 0) for r in done.values()), default=0) or time.time()
    result = {
        "benchmark": "bench_scaling",
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(last)),
        "wall_seconds": round(sum(s["end"] - s["start"] for s in segments if s["end"]), 1),
        "segments": len(segments),
        "workers": args.workers,
        "batch_size": BATCH,
        "block_size": CONTEXT,
        "lr_rule": "0.03 * (16 / d_model) ** 0.75",
        "warmup_rule": "max(5, steps // 20)",
        "sizes": [size_info(s) for s in SIZES],
        "runs": sorted((done[k] for k in done if k in wanted), key=key),
        "missing": len(wanted - set(done)),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": cpu_name(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "load_start": load_start,
            "load_end": loadavg(),
        },
        # --collect trains nothing: keep the conditions of the invocation that trained
        **({"machine": json.loads(args.out.read_text())["machine"]} if args.collect and args.out.exists() else {}),
    }
    result["analysis"] = analyse(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    if not args.no_readme:
        write_readme(result)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
