"""Benchmark: the graphs page's two-ring experiment (chapter 15.1) over several seeds.

The page's four models (2 layers, width 32, 4 heads; full attention with no structure, the adjacency mask,
full attention with 4 Laplacian eigenvectors, full attention with the distance bias), trained with the
page's recipe (300 steps of 64 graphs, AdamW at 3e-3 with 30 warmup steps and a cosine decay) on its 1,000
training graphs (two rings of 10, 12 or 14 nodes each, seed 0), and tested on its 400 test graphs (rings
of 11 or 13 nodes, sizes no training graph has, seed 1). The seed sets the initialisation and the batches;
the graphs are the page's, fixed. For the distance-bias model also the test accuracy once the "no path"
entry of every head is set to the mean of that head's entries for the distances that occur in the
graphs (the page's ablation). CPU seconds of training (process time: what a quiet machine would need on one core).

Writes benchmarks/results/graphs.json and its section of benchmarks/README.md (between the markers
``<!-- bench_graphs:start -->`` and ``<!-- bench_graphs:end -->``, appended if missing).

    .venv/bin/python benchmarks/bench_graphs.py                 # seeds 0 to 4
    .venv/bin/python benchmarks/bench_graphs.py --seeds 0 --no-readme
    .venv/bin/python benchmarks/bench_graphs.py --from-json     # rewrite the README section only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, summary, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import graph_experiment, graphs, train

HERE = Path(__file__).resolve().parent
SIZE = dict(d_model=32, n_heads=4, n_layers=2, k=4)
RECIPE = dict(steps=300, batch_size=64, lr=3e-3, warmup=30)
TRAIN_RINGS, TEST_RINGS = (10, 12, 14), (11, 13)
MODELS = {
    "full attention, no structure": ("full", "none"),
    "adjacency mask (GAT)": ("adjacency", "none"),
    "full + Laplacian eigenvectors": ("full", "laplacian"),
    "full + distance bias": ("full", "distance"),
}


def without_no_path(model, test, eig, dist, far: int) -> float:
    """Test accuracy with every head's "no path" entry set to the mean of its entries for the distances 0 to
    ``far`` (those that occur in the graphs); the table is restored afterwards."""
    table = model.distance_bias.table
    with torch.no_grad():
        saved = table[:, -1].clone()
        table[:, -1] = table[:, : far + 1].mean(dim=1)
        accuracy = graph_experiment.accuracy(model, test, eig, dist)
        table[:, -1] = saved
    return accuracy


def run(seeds, device) -> list[dict]:
    train_graphs = graphs.two_ring_graphs(1000, TRAIN_RINGS, seed=0)
    test_graphs = graphs.two_ring_graphs(400, TEST_RINGS, seed=1)
    train_in = graph_experiment.structural_inputs(train_graphs, SIZE["k"])
    test_in = graph_experiment.structural_inputs(test_graphs, SIZE["k"])
    far = int(max(train_in[1].max(), test_in[1].max()))  # the longest distance in the graphs
    rows = []
    for name, (mask, encoding) in MODELS.items():
        for seed in seeds:
            train.seed_everything(seed)
            model = graphs.GraphTransformer(mask, encoding, **SIZE).to(device)
            cpu = time.process_time()
            graph_experiment.fit_graph_model(
                model, train_graphs, *train_in, seed=seed, desc=f"{name}, seed {seed}", **RECIPE
            )
            row = {
                "model": name,
                "seed": seed,
                "accuracy": graph_experiment.accuracy(model, test_graphs, *test_in),
                "train_accuracy": graph_experiment.accuracy(model, train_graphs, *train_in),
                "cpu_seconds": time.process_time() - cpu,
            }
            if encoding == "distance":
                row["accuracy_without_no_path"] = without_no_path(model, test_graphs, *test_in, far)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def table(result: dict) -> str:
    start, end = markers("bench_graphs")
    env, rows = result["environment"], result["runs"]
    lines = [
        start,
        "## Graphs: are the two marks on the same ring? (`bench_graphs.py`)",
        "",
        f"The graphs page's four models and recipe ({RECIPE['steps']} steps), seeds {result['seeds']}; trained "
        f"on rings of {', '.join(map(str, TRAIN_RINGS))} nodes, tested on rings of "
        f"{', '.join(map(str, TEST_RINGS))} (sizes no training graph has). Accuracy: mean (lowest to highest). "
        f"{env['cpu']}, {env['threads']} thread(s), torch {env['torch']}, {env['date']}; load average "
        f"{env['load_before']} before and {env['load_after']} after.",
        "",
        "| model | test accuracy | training accuracy | CPU s per run |",
        "|---|---:|---:|---:|",
    ]
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        cpu = sum(r["cpu_seconds"] for r in mine) / len(mine)
        lines.append(
            f"| {name} | {summary([r['accuracy'] for r in mine])} | "
            f"{summary([r['train_accuracy'] for r in mine])} | {cpu:.1f} |"
        )
    ablated = [r["accuracy_without_no_path"] for r in rows if "accuracy_without_no_path" in r]
    lines += [
        "",
        f'The distance-bias model with every head\'s "no path" entry set to the mean of its entries for the '
        f"distances that occur in the graphs: {summary(ablated)} on the test graphs.",
        end,
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "graphs.json")
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="do not update the README section")
    parser.add_argument("--from-json", action="store_true", help="rewrite the README section from the JSON only")
    args = parser.parse_args(argv)

    if args.from_json:
        write_section("bench_graphs", table(json.loads(args.out.read_text())), args.readme)
        return 0
    torch.set_num_threads(args.threads)
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
    result = {
        "seeds": args.seeds,
        "size": SIZE,
        "recipe": RECIPE,
        "train_rings": TRAIN_RINGS,
        "test_rings": TEST_RINGS,
        "environment": env,
    }
    result["runs"] = run(args.seeds, device)
    env["load_after"] = loadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    if not args.no_readme:
        write_section("bench_graphs", table(result), args.readme)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
