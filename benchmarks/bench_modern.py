"""Benchmark: the modern tweaks of chapter 11 on the chapter's character-level Shakespeare model, trained longer.

Three parts:

1. ``train``: the chapter's model (width 64, 4 heads, 2 layers, context 64, batches of 16, AdamW at 1e-3
   with 50 warmup steps) trained for ``--steps`` steps in each variant, for every seed: the reference
   (pre-norm LayerNorm, ReLU MLP with F = 4D, learned positions), one tweak at a time (RMSNorm, SwiGLU with
   F = 8D/3, RoPE, 4 top-1 experts with the balancing loss), and the two recipes of the chapter's last
   section (2017: post-norm, ReLU, learned positions; modern: pre-norm RMSNorm, SwiGLU, RoPE). Validation
   loss (nats per character) on the whole validation split, every character predicted once.
2. ``norm``: median time of forward + backward of ``torch.nn.LayerNorm`` and ``torch.nn.RMSNorm`` on
   (16, 64, D) inputs, for several widths D (one thread).
3. ``cache``: tokens per second of greedy generation with and without the KV cache, for several lengths.

Writes benchmarks/results/modern.json and its section of benchmarks/README.md (between the markers
``<!-- bench_modern:start -->`` and ``<!-- bench_modern:end -->``, appended if missing).

    .venv/bin/python benchmarks/bench_modern.py                    # 2 seeds, 600 steps, everything
    .venv/bin/python benchmarks/bench_modern.py --steps 200 --seeds 0 --no-readme   # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import blocks, data, measure, models, train

HERE = Path(__file__).resolve().parent
CTX, BATCH, LR, WARMUP = 64, 16, 1e-3, 50
REFERENCE = dict(
    block_size=CTX,
    n_layers=2,
    n_heads=4,
    d_model=64,
    d_ff=256,
    mlp="relu",
    norm="layernorm",
    norm_position="pre",
    positional="learned",
)
F_SWIGLU = round(8 * 64 / 3)


def variants() -> dict[str, dict]:
    moe = blocks.register_moe(4, 1)
    return {
        "reference (pre-norm LN, ReLU, learned)": {},
        "RMSNorm": dict(norm="rmsnorm"),
        "SwiGLU, F = 8D/3": dict(mlp="swiglu", d_ff=F_SWIGLU),
        "RoPE": dict(positional="rope"),
        "MoE, 4 experts top-1, balancing loss": dict(mlp=moe),
        "2017: post-norm, ReLU, learned": dict(norm_position="post"),
        "modern: pre-norm RMSNorm, SwiGLU, RoPE": dict(norm="rmsnorm", mlp="swiglu", d_ff=F_SWIGLU, positional="rope"),
    }


def train_variant(splits, changes: dict, seed: int, steps: int) -> dict:
    train.seed_everything(seed)
    model = models.GPT(models.TransformerConfig(vocab_size=splits.tokenizer.vocab_size, **{**REFERENCE, **changes}))
    gen = torch.Generator().manual_seed(seed)
    aux = 0.01 if str(changes.get("mlp", "")).startswith("moe") else 0.0

    def loss_fn(m, batch):
        loss = m.loss(*batch)
        return loss + aux * blocks.moe_aux_loss(m) if aux else loss

    cpu = time.process_time()
    history = train.fit(
        model,
        lambda s: data.lm_batch(splits.train, BATCH, CTX, generator=gen),
        loss_fn,
        steps=steps,
        lr=LR,
        schedule=lambda s: min(1.0, (s + 1) / WARMUP),
        desc="training",
    )
    seconds = time.process_time() - cpu
    val = models.evaluate_lm(model, splits.val)
    return {
        "val_loss": val,
        "cpu_seconds": seconds,
        "parameters": measure.count_parameters(model),
        "diverged": history.diverged,
    }


def part_train(seeds, steps) -> dict:
    splits = data.load_shakespeare()
    out = {}
    for name, changes in variants().items():
        out[name] = [train_variant(splits, changes, seed, steps) for seed in seeds]
    return out


def part_norm(widths=(64, 256, 512, 1024, 4096)) -> dict:
    out = {}
    for D in widths:
        x = torch.randn(16, 64, D, requires_grad=True)
        times = {}
        for name, layer in (("LayerNorm", torch.nn.LayerNorm(D)), ("RMSNorm", torch.nn.RMSNorm(D, eps=1e-5))):
            times[name] = measure.time_fn(lambda: layer(x).sum().backward(), repeats=30, warmup=3).median
        out[str(D)] = times
    return out


def part_cache(lengths=(32, 64, 128, 248)) -> dict:
    train.seed_everything(0)
    model = models.GPT(
        models.TransformerConfig(vocab_size=65, **{**REFERENCE, "block_size": 256, "positional": "rope"})
    ).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    out = {}
    for n in lengths:
        row = {}
        for use_cache in (False, True):
            t = measure.time_fn(
                lambda: model.generate(prompt, n, temperature=0, use_cache=use_cache), repeats=3, warmup=1
            ).median
            row["with cache" if use_cache else "without cache"] = n / t
        out[str(n)] = row
    return out


def section(results: dict) -> str:
    start, end = markers("bench_modern")
    meta = results["meta"]
    lines = [
        start,
        "## Modern tweaks (`bench_modern.py`)",
        "",
        f"Chapter 11's character-level Shakespeare model (width 64, 2 layers, 4 heads, context {CTX}, batch "
        f"{BATCH}, AdamW {LR:g} with {WARMUP} warmup steps), {meta['steps']} steps, seeds {meta['seeds']}; "
        f"validation loss in nats per character on the whole validation split. "
        f"{meta['cpu']}, {meta['threads']} thread(s), load average {meta['loadavg']}, {meta['date']}.",
        "",
    ]
    if "train" in results:
        lines += [
            "| variant | parameters | validation loss (mean) | per seed | CPU s per run |",
            "|---|---|---|---|---|",
        ]
        for name, runs in results["train"].items():
            losses = [r["val_loss"] for r in runs]
            lines.append(
                f"| {name} | {runs[0]['parameters']:,} | {statistics.mean(losses):.3f} | "
                f"{', '.join(f'{v:.3f}' for v in losses)} | {statistics.mean(r['cpu_seconds'] for r in runs):.0f} |"
            )
        lines += [
            "",
            "For reference, Shazeer (2020), Table 1: SwiGLU 1.944 vs ReLU 1.997 log-perplexity after 65,536 "
            "steps of a T5-base-sized model.",
            "",
        ]
    if "norm" in results:
        lines += ["| width D | LayerNorm (ms) | RMSNorm (ms) | RMSNorm / LayerNorm |", "|---|---|---|---|"]
        for D, t in results["norm"].items():
            lines.append(
                f"| {D} | {t['LayerNorm'] * 1e3:.3f} | {t['RMSNorm'] * 1e3:.3f} | {t['RMSNorm'] / t['LayerNorm']:.2f} |"
            )
        lines += [
            "",
            "Forward + backward of `torch.nn.LayerNorm` and `torch.nn.RMSNorm` on (16, 64, D) float32 "
            "inputs; Zhang and Sennrich (2019) report 7% to 64% less running time for whole models.",
            "",
        ]
    if "cache" in results:
        lines += [
            "| generated tokens | without cache (tokens/s) | with cache (tokens/s) | speed-up |",
            "|---|---|---|---|",
        ]
        for n, r in results["cache"].items():
            lines.append(
                f"| {n} | {r['without cache']:.0f} | {r['with cache']:.0f} | "
                f"{r['with cache'] / r['without cache']:.1f} |"
            )
        lines += [
            "",
            "Greedy generation from one token with the chapter's model (RoPE, block size 256), untrained.",
            "",
        ]
    lines.append(end)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--parts", nargs="+", default=["train", "norm", "cache"], choices=["train", "norm", "cache"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {
        "meta": {
            "seeds": args.seeds,
            "steps": args.steps,
            "cpu": cpu_name(),
            "threads": args.threads,
            "loadavg": loadavg(),
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
        }
    }
    if "train" in args.parts:
        results["train"] = part_train(args.seeds, args.steps)
    if "norm" in args.parts:
        results["norm"] = part_norm()
    if "cache" in args.parts:
        results["cache"] = part_cache()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "modern.json").write_text(json.dumps(results, indent=2) + "\n")
    text = section(results)
    print(text)
    if not args.no_readme:
        write_section("bench_modern", text)


if __name__ == "__main__":
    main()
