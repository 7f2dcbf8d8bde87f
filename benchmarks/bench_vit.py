"""Benchmark: the chapter-10 vision transformer on scikit-learn's digits, over several seeds.

Two parts, each repeated for every seed (the seed sets the initialisation and the batch order; the
train/test split is the chapter's, fixed):

1. ``recipe``: the chapter's tiny ViT (2 layers, width 64, 4 heads, MLP 128, 2 x 2 patches) trained on the
   1,437 training digits with the chapter's recipe, in four variants: class token with learned positions
   (the chapter's model), mean pooling, 2D sinusoidal positions, and no positions. Test accuracy and
   CPU seconds of training (process time: what a quiet machine would need on one core).
2. ``data``: test accuracy against the number of training images, for the ViT (learned and 2D sinusoidal
   positions) and the chapter's CNN (``vit_experiment.SmallCNN``, widths 32, 64, 80), on nested balanced subsets.
   The subsets get the chapter's recipe with 200 steps, or 45 passes over the subset when that is more
   (the chapter stops at 200 images, where 200 steps are 64 passes); the whole training set gets the
   full recipe (1,000 steps, about 45 passes).

Target (chapter 10's issue): at least 97% test accuracy for the chapter's ViT, in under 60 s of training.

Writes benchmarks/results/vit.json and its section of benchmarks/README.md (between the markers
``<!-- bench_vit:start -->`` and ``<!-- bench_vit:end -->``, appended if missing).

    .venv/bin/python benchmarks/bench_vit.py                      # 3 seeds, everything (long on a busy CPU)
    .venv/bin/python benchmarks/bench_vit.py --seeds 0 --parts recipe --no-readme   # a quick look
    .venv/bin/python benchmarks/bench_vit.py --from-json           # rewrite the README section only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, summary, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import data, measure, train, vit, vit_experiment

HERE = Path(__file__).resolve().parent
TINY = dict(image_size=8, patch_size=2, in_channels=1, n_classes=10, d_model=64, n_layers=2, n_heads=4, d_ff=128)
RECIPE = dict(steps=1000, batch_size=64, lr=2e-3, warmup=50, weight_decay=0.05)  # the chapter's main recipe
SUBSET_STEPS = 200  # the chapter's recipe for the subsets: the same, with fewer steps
CNN_WIDTHS = (32, 64, 80)
VARIANTS = {
    "class token, learned positions": {},
    "mean pooling, learned positions": {"pool": "mean"},
    "class token, 2D sinusoidal positions": {"positions": "sinusoidal2d"},
    "class token, no positions": {"positions": "none"},
}
TARGET_ACCURACY, TARGET_SECONDS = 0.97, 60.0


def run(model, x, y, digits, seed, **recipe) -> dict:
    cpu, wall = time.process_time(), time.perf_counter()
    vit_experiment.fit_classifier(model, x, y, seed=seed, **recipe)
    return {
        "accuracy": vit_experiment.accuracy(model, digits.x_test, digits.y_test),
        "train_accuracy": vit_experiment.accuracy(model, x, y),
        "cpu_seconds": time.process_time() - cpu,
        "wall_seconds": time.perf_counter() - wall,
    }


def part_recipe(digits, seeds, device, variants) -> list[dict]:
    rows = []
    for name, changes in VARIANTS.items():
        if name not in variants:
            continue
        for seed in seeds:
            train.seed_everything(seed)
            model = vit.ViT(vit.ViTConfig(**TINY, **changes)).to(device)
            row = {
                "variant": name,
                "seed": seed,
                **run(model, digits.x_train, digits.y_train, digits, seed, desc=f"{name}, seed {seed}", **RECIPE),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def subset_steps(n: int) -> int:
    """Steps for a subset of n images: at least SUBSET_STEPS and at least 45 passes (the main run's count)."""
    return max(SUBSET_STEPS, round(45 * n / RECIPE["batch_size"]))


def part_data(digits, seeds, sizes, device) -> list[dict]:
    models = {
        "ViT (learned positions)": lambda: vit.ViT(vit.ViTConfig(**TINY)),
        "ViT (2D sinusoidal positions)": lambda: vit.ViT(vit.ViTConfig(**TINY, positions="sinusoidal2d")),
        "CNN": lambda: vit_experiment.SmallCNN(1, 10, CNN_WIDTHS),
    }
    rows = []
    for n in sizes:
        idx = data.balanced_subset(digits.y_train, n)
        recipe = RECIPE if n == len(digits.y_train) else {**RECIPE, "steps": subset_steps(n)}
        for name, make in models.items():
            for seed in seeds:
                train.seed_everything(seed)
                model = make().to(device)
                row = {
                    "model": name,
                    "n": n,
                    "seed": seed,
                    "parameters": measure.count_parameters(model),
                    **run(
                        model,
                        digits.x_train[idx],
                        digits.y_train[idx],
                        digits,
                        seed,
                        desc=f"{name}, {n} images, seed {seed}",
                        **recipe,
                    ),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def table(result: dict) -> str:
    env = result["environment"]
    start, end = markers("bench_vit")
    seeds = result["seeds"]
    lines = [
        start,
        "## Vision transformer on digits (`bench_vit.py`)",
        "",
        f"The chapter's tiny ViT and CNN on scikit-learn's digits (1,437 training and 360 test images, the "
        f"chapter's split), seeds {', '.join(map(str, seeds))}: the mean over seeds, with the lowest and highest "
        "value in brackets. CPU seconds are process time, the time the training would take on one quiet core.",
        "",
        f"Run on {env['date']}: {env['cpu']} ({env['cores']} cores), {env['threads']} PyTorch thread"
        f"{'s' if env['threads'] != 1 else ''}, PyTorch {env['torch']}, device {env['device']}; load average "
        f"(1, 5, 15 min) {env['load_before']} before and {env['load_after']} after. The machine is shared, so "
        "wall-clock times are pessimistic.",
    ]
    rows = result.get("recipe", [])
    if rows:
        lines += [
            "",
            "Full training set, the chapter's recipe ("
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in result["recipe_settings"].items())
            + "):",
            "",
            "| variant | test accuracy | CPU seconds | wall seconds |",
            "|---|---:|---:|---:|",
        ]
        for name in VARIANTS:
            r = [x for x in rows if x["variant"] == name]
            if r:
                lines.append(
                    f"| {name} | {summary([x['accuracy'] for x in r])} "
                    f"| {statistics.mean(x['cpu_seconds'] for x in r):.1f} "
                    f"| {statistics.mean(x['wall_seconds'] for x in r):.1f} |"
                )
        main = [x for x in rows if x["variant"] == "class token, learned positions"]
        if main:
            worst = min(x["accuracy"] for x in main)
            slowest = max(x["cpu_seconds"] for x in main)
            met = worst >= TARGET_ACCURACY and slowest < TARGET_SECONDS
            lines += [
                "",
                f"Target: at least {TARGET_ACCURACY:.0%} test accuracy in under {TARGET_SECONDS:.0f} s: "
                f"lowest accuracy over the seeds **{worst:.1%}**, longest training **{slowest:.0f} CPU "
                f"seconds**: **{'met' if met else 'NOT met'}**.",
            ]
    rows = result.get("data", [])
    if rows:
        models = list(dict.fromkeys(x["model"] for x in rows))
        sizes = sorted({x["n"] for x in rows})
        params = {m: next(x["parameters"] for x in rows if x["model"] == m) for m in models}
        lines += [
            "",
            f"Test accuracy against the number of training images (max({result['subset_steps']}, 45 "
            "passes) steps on the subsets, the full recipe on the whole set; no augmentation):",
            "",
            "| training images | " + " | ".join(f"{m} ({params[m]:,} parameters)" for m in models) + " |",
            "|---:|" + "---:|" * len(models),
        ]
        for n in sizes:
            cells = [summary([x["accuracy"] for x in rows if x["model"] == m and x["n"] == n]) for m in models]
            lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lines.append(end)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parts", nargs="+", choices=["recipe", "data"], default=["recipe", "data"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100, 200, 400, 800, 1437])
    parser.add_argument(
        "--variants",
        type=int,
        nargs="+",
        default=list(range(len(VARIANTS))),
        help="which recipe variants to run, by number: "
        + ", ".join(f"{i} = {name}" for i, name in enumerate(VARIANTS)),
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "vit.json")
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="do not update the README table")
    parser.add_argument("--from-json", action="store_true", help="rewrite the README section from the JSON only")
    args = parser.parse_args(argv)

    if args.from_json:
        write_section("bench_vit", table(json.loads(args.out.read_text())), args.readme)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = train.pick_device()
    digits = data.load_digits()
    env = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(device),
        "load_before": loadavg(),
    }
    result = {"seeds": args.seeds, "recipe_settings": RECIPE, "subset_steps": SUBSET_STEPS, "environment": env}
    if "recipe" in args.parts:
        result["recipe"] = part_recipe(digits, args.seeds, device, [list(VARIANTS)[i] for i in args.variants])
    if "data" in args.parts:
        result["data"] = part_data(digits, args.seeds, [min(n, len(digits.y_train)) for n in args.sizes], device)
    env["load_after"] = loadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    if not args.no_readme:
        write_section("bench_vit", table(result))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
