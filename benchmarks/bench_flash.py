"""Benchmark: naive against tiled (flash) attention on this machine: peak extra memory, time, accuracy.

For d = 64 and float32, N from 1,024 to 16,384 (one head, one sequence), it measures

- the peak extra memory of the forward pass (no gradients), with ``measure.peak_memory`` (on the CPU:
  the bytes held by the tensors the call creates, at their peak);
- the forward time (best and median of several runs after a warm-up, without the memory tracker);
- the largest absolute difference between the two outputs, and of each from a float64 reference;
- for N up to ``--backward-up-to``, the same for a forward and backward pass.

Targets (chapter 09's issue): at N = 8,192 the tiled version's peak extra memory is at most 5% of the
naive version's, and the outputs agree to 1e-5 (max absolute error) in float32.

Writes benchmarks/results/flash.json and its section of benchmarks/README.md (between the markers
``<!-- bench_flash:start -->`` and ``<!-- bench_flash:end -->``, appended if missing). With ``--tag T``
the results go to flash_T.json and a section of their own (e.g. ``--threads 1 --tag 1thread``).

    .venv/bin/python benchmarks/bench_flash.py                 # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_flash.py --sizes 1024 2048 --no-readme   # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch
from _common import cpu_name, loadavg, markers, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import attention, flash, measure

HERE = Path(__file__).resolve().parent
TARGET_N, TARGET_MEMORY, TARGET_ERROR = 8192, 0.05, 1e-5


def measure_one(n: int, d: int, args, device: torch.device) -> dict:
    g = torch.Generator(device="cpu").manual_seed(n)
    q, k, v = (torch.randn(n, d, generator=g).to(device) for _ in range(3))
    naive = lambda: attention.scaled_dot_product_attention(q, k, v)  # noqa: E731
    tiled = lambda: flash.flash_attention(q, k, v, block_q=args.block_q, block_k=args.block_k)  # noqa: E731
    row = {"N": n, "d": d, "load_before": loadavg()}
    with torch.no_grad():
        for name, fn in (("naive", naive), ("tiled", tiled)):
            row[f"{name}_peak_bytes"] = measure.peak_memory(fn, device=device)
            timing = measure.time_fn(fn, repeats=args.repeats, warmup=1, device=device)
            row[f"{name}_seconds_best"], row[f"{name}_seconds_median"] = timing.best, timing.median
        out_naive, out_tiled = naive(), tiled()
        reference = flash.flash_attention(q.double(), k.double(), v.double(), block_q=512, block_k=512)
    row["max_abs_error_tiled_vs_naive"] = (out_tiled - out_naive).abs().max().item()
    row["max_abs_error_naive_vs_float64"] = (out_naive.double() - reference).abs().max().item()
    row["max_abs_error_tiled_vs_float64"] = (out_tiled.double() - reference).abs().max().item()
    row["memory_ratio"] = row["tiled_peak_bytes"] / row["naive_peak_bytes"]
    row["time_ratio"] = row["tiled_seconds_best"] / row["naive_seconds_best"]
    if n <= args.backward_up_to:
        grad = torch.randn(n, d, generator=g).to(device)
        for name, fn in (
            ("naive", attention.scaled_dot_product_attention),
            ("tiled", lambda q, k, v: flash.flash_attention(q, k, v, block_q=args.block_q, block_k=args.block_k)),
        ):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            step = lambda: torch.autograd.grad(fn(*leaves), leaves, grad)  # noqa: E731
            row[f"{name}_train_peak_bytes"] = measure.peak_memory(step, device=device)
            row[f"{name}_train_seconds_best"] = measure.time_fn(
                step, repeats=max(1, args.repeats - 1), warmup=1, device=device
            ).best
        row["train_memory_ratio"] = row["tiled_train_peak_bytes"] / row["naive_train_peak_bytes"]
        row["train_time_ratio"] = row["tiled_train_seconds_best"] / row["naive_train_seconds_best"]
    row["load_after"] = loadavg()
    return row


def table(result: dict) -> str:
    env = result["environment"]
    start, end = markers("bench_flash" + (f"_{result['tag']}" if result["tag"] else ""))
    title = "## Flash attention (`bench_flash.py`" + (f" `--tag {result['tag']}`" if result["tag"] else "") + ")"
    lines = [
        start,
        title,
        "",
        "Naive attention (`attention.scaled_dot_product_attention`) against the tiled version "
        f"(`flash.flash_attention`, tiles of {result['block_q']} x {result['block_k']}), one head, d = "
        f"{result['d']}, float32, forward pass without gradients. Memory: the peak extra bytes held by the "
        "tensors each call creates (`measure.peak_memory`). Time: best of "
        f"{result['repeats']} runs. Error: largest absolute difference between the two outputs.",
        "",
        f"Run on {env['date']}: {env['cpu']} ({env['cores']} cores), {env['threads']} PyTorch "
        f"thread{'s' if env['threads'] != 1 else ''}, PyTorch {env['torch']}, device {env['device']}; load "
        f"average (1, 5, 15 min) {env['load_before']} before and {env['load_after']} after. The machine is "
        "shared, so the times are noisy and pessimistic." + (f" {env['note']}" if env.get("note") else ""),
        "",
        "| N | naive memory | tiled memory | tiled / naive | naive time (s) | tiled time (s) | time ratio "
        "| max abs error |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['N']:,} | {measure.format_bytes(r['naive_peak_bytes'])} "
            f"| {measure.format_bytes(r['tiled_peak_bytes'])} "
            f"| {r['memory_ratio']:.2%} | {r['naive_seconds_best']:.3f} | {r['tiled_seconds_best']:.3f} "
            f"| {r['time_ratio']:.2f} | {r['max_abs_error_tiled_vs_naive']:.1e} |"
        )
    train = [r for r in result["rows"] if "train_memory_ratio" in r]
    if train:
        lines += [
            "",
            "Forward and backward pass (gradients for q, k and v):",
            "",
            "| N | naive memory | tiled memory | tiled / naive | naive time (s) | tiled time (s) | time ratio |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in train:
            lines.append(
                f"| {r['N']:,} | {measure.format_bytes(r['naive_train_peak_bytes'])} "
                f"| {measure.format_bytes(r['tiled_train_peak_bytes'])} | {r['train_memory_ratio']:.2%} "
                f"| {r['naive_train_seconds_best']:.3f} | {r['tiled_train_seconds_best']:.3f} "
                f"| {r['train_time_ratio']:.2f} |"
            )
    t = result["targets"]
    if t:
        lines += [
            "",
            f"Targets at N = {TARGET_N:,}: tiled memory at most {TARGET_MEMORY:.0%} of naive: "
            f"**{t['memory_ratio']:.2%}, {'met' if t['memory_met'] else 'NOT met'}**; max absolute error at "
            f"most {TARGET_ERROR:g}: **{t['max_abs_error']:.1e}, {'met' if t['error_met'] else 'NOT met'}**.",
        ]
    lines.append(end)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block-q", type=int, default=256)
    parser.add_argument("--block-k", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backward-up-to", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tag", default=None, help="a name for this run: results/flash_TAG.json, its own section")
    parser.add_argument("--output", type=Path, default=None, help="default: benchmarks/results/flash[_TAG].json")
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="do not update the README table")
    parser.add_argument("--note", default="", help="a sentence about the run, printed under the table's header")
    parser.add_argument(
        "--readme-only",
        action="store_true",
        help="rewrite the README section from the existing JSON results, without measuring",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.output is None:
        args.output = HERE / "results" / ("flash" + (f"_{args.tag}" if args.tag else "") + ".json")
    if args.readme_only:
        result = json.loads(args.output.read_text())
        if args.note:
            result["environment"]["note"] = args.note
            args.output.write_text(json.dumps(result, indent=2) + "\n")
        tag = result.get("tag")
        write_section("bench_flash" + (f"_{tag}" if tag else ""), table(result), args.readme)
        print(f"updated {args.readme} from {args.output}")
        return 0
    environment = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "load_before": loadavg(),
        "note": args.note,
    }
    rows = []
    for n in args.sizes:
        rows.append(measure_one(n, args.d, args, device))
        r = rows[-1]
        print(
            f"N = {n:6d}: memory {measure.format_bytes(r['naive_peak_bytes'])} naive, "
            f"{measure.format_bytes(r['tiled_peak_bytes'])} tiled ({r['memory_ratio']:.2%}); time "
            f"{r['naive_seconds_best']:.3f} s naive, {r['tiled_seconds_best']:.3f} s tiled "
            f"(x{r['time_ratio']:.2f}); max abs error {r['max_abs_error_tiled_vs_naive']:.1e}; load {r['load_after']}",
            flush=True,
        )
    environment["load_after"] = loadavg()
    targets = {}
    at = next((r for r in rows if r["N"] == TARGET_N), None)
    if at is not None:
        targets = {
            "N": TARGET_N,
            "memory_ratio": at["memory_ratio"],
            "memory_met": at["memory_ratio"] <= TARGET_MEMORY,
            "max_abs_error": at["max_abs_error_tiled_vs_naive"],
            "error_met": at["max_abs_error_tiled_vs_naive"] <= TARGET_ERROR,
        }
    result = {
        "benchmark": "flash",
        "tag": args.tag,
        "d": args.d,
        "dtype": "float32",
        "block_q": args.block_q,
        "block_k": args.block_k,
        "repeats": args.repeats,
        "environment": environment,
        "rows": rows,
        "targets": targets,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    if not args.no_readme:
        write_section("bench_flash" + (f"_{args.tag}" if args.tag else ""), table(result), args.readme)
        print(f"updated {args.readme}")
    if targets and not (targets["memory_met"] and targets["error_met"]):
        print("a target was not met", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
