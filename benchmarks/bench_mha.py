"""Benchmark: the fast path of attnbook's MultiHeadAttention against torch.nn.MultiheadAttention on the CPU.

Both modules get the same weights (checked: the outputs agree) and the same input; each measurement is a
forward and a backward pass (``out.sum().backward()``) in training mode, self-attention, for several
(B, T, D) with H = D / 64 heads (at least 4). Two masks: none, and causal (ours with ``is_causal=True``;
PyTorch's with the equivalent boolean ``attn_mask`` and the ``is_causal`` hint). PyTorch's module runs
with ``need_weights=False``, its own fast path.

The machine may be shared, so the two are timed in interleaved rounds: in every round each runs
``--inner`` times back to back (the order alternating between rounds), and the round gives the ratio
ours / PyTorch's. The reported ratio is the median over the rounds of these paired ratios, with the
25% and 75% quantiles; the load average before and after is recorded too.

Target (issue of chapters 05-07): the fast path is not slower, ratio <= 1.0, for every size.

Writes benchmarks/results/mha.json and its section of benchmarks/README.md (between the markers
``<!-- bench_mha:start -->`` and ``<!-- bench_mha:end -->``, appended if missing). With ``--tag T`` the
results go to mha_T.json and a section of their own (e.g. ``--threads 1 --tag 1thread``).

    .venv/bin/python benchmarks/bench_mha.py                     # the full run (a few minutes)
    .venv/bin/python benchmarks/bench_mha.py --rounds 5 --no-readme  # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from _common import cpu_name, loadavg, write_section  # noqa: E402  (benchmarks/_common.py)
from attnbook import attention
from torch import nn

HERE = Path(__file__).resolve().parent
SIZES = [(64, 32, 64), (32, 64, 128), (16, 128, 256), (8, 256, 256), (8, 256, 512), (4, 512, 512), (2, 1024, 256)]


def make_pair(d_model: int, n_heads: int, seed: int):
    """Our module and PyTorch's with the same weights, both in training mode (dropout 0)."""
    torch.manual_seed(seed)
    ours = attention.MultiHeadAttention(d_model, n_heads)
    theirs = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)
    return ours.train(), theirs.train()


def step_functions(ours, theirs, x, causal: bool):
    T = x.shape[1]
    blocked = ~attention.causal_mask(T)  # PyTorch's module: True = may NOT attend

    def run_ours():
        return ours(x, is_causal=causal)

    def run_theirs():
        if causal:
            return theirs(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)[0]
        return theirs(x, x, x, need_weights=False)[0]

    return run_ours, run_theirs


def timed(fn, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn().sum().backward()
    return (time.perf_counter() - start) / inner


def quantile(values, q):
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def measure_one(B: int, T: int, D: int, causal: bool, args) -> dict:
    H = max(4, D // 64)
    ours, theirs = make_pair(D, H, seed=B * T + D)
    x = torch.randn(B, T, D, requires_grad=True)
    run_ours, run_theirs = step_functions(ours, theirs, x, causal)
    with torch.no_grad():
        torch.testing.assert_close(run_ours(), run_theirs(), atol=1e-4, rtol=1e-4)
    inner = args.inner or max(1, int(2_000_000 // (B * T * D)))  # about the same work per round
    for _ in range(2):  # warm-up
        timed(run_ours, 1)
        timed(run_theirs, 1)
    load_before = loadavg()
    ours_t, theirs_t, ratios = [], [], []
    for r in range(args.rounds):
        if r % 2 == 0:
            a = timed(run_ours, inner)
            b = timed(run_theirs, inner)
        else:
            b = timed(run_theirs, inner)
            a = timed(run_ours, inner)
        ours_t.append(a)
        theirs_t.append(b)
        ratios.append(a / b)
    return {
        "B": B,
        "T": T,
        "D": D,
        "H": H,
        "mask": "causal" if causal else "none",
        "inner": inner,
        "ours_ms": round(statistics.median(ours_t) * 1e3, 3),
        "torch_ms": round(statistics.median(theirs_t) * 1e3, 3),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_q25": round(quantile(ratios, 0.25), 3),
        "ratio_q75": round(quantile(ratios, 0.75), 3),
        "load_before": load_before,
        "load_after": loadavg(),
    }


def readme_section(result: dict, tag: str | None) -> str:
    name = "bench_mha" + (f"_{tag}" if tag else "")
    rows = result["rows"]
    worst = max(r["ratio"] for r in rows)
    lines = [
        f"<!-- {name}:start -->",
        "## Multi-head attention: the library's fast path against `torch.nn.MultiheadAttention`"
        + (f" ({tag})" if tag else ""),
        "",
        "Forward + backward in training mode, self-attention, H = max(4, D / 64) heads, float32 on the CPU; "
        "`benchmarks/bench_mha.py`. Ratio = time of `attnbook.attention.MultiHeadAttention` (fast path) / time "
        "of `torch.nn.MultiheadAttention(need_weights=False)`, the median of paired ratios over "
        f"{result['rounds']} interleaved rounds (25%-75% range in brackets). Target: ratio <= 1.0.",
        "",
        f"Measured {result['date']} on {result['cpu']} ({result['threads']} threads, torch {result['torch']}); "
        f"load average {result['load_start']} at the start, {result['load_end']} at the end.",
        "",
        "| B | T | D | H | mask | ours (ms) | torch (ms) | ratio |",
        "|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['B']} | {r['T']} | {r['D']} | {r['H']} | {r['mask']} | {r['ours_ms']:.2f} | "
            f"{r['torch_ms']:.2f} | {r['ratio']:.2f} [{r['ratio_q25']:.2f}-{r['ratio_q75']:.2f}] |"
        )
    verdict = "met" if worst <= 1.0 else "NOT met"
    lines += ["", f"Largest ratio: {worst:.2f} (target {verdict}).", f"<!-- {name}:end -->"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds per size (default 21)")
    parser.add_argument("--inner", type=int, default=0, help="runs per round (default: by size)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--sizes", type=str, nargs="*", default=None, help="sizes as B,T,D (default: a fixed list)")
    parser.add_argument("--tag", type=str, default=None, help="suffix for the JSON file and the README section")
    parser.add_argument("--no-readme", action="store_true", help="do not touch benchmarks/README.md")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = SIZES if not args.sizes else [tuple(int(v) for v in s.split(",")) for s in args.sizes]
    result = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "rounds": args.rounds,
        "load_start": loadavg(),
        "rows": [],
    }
    for B, T, D in sizes:
        for causal in (False, True):
            row = measure_one(B, T, D, causal, args)
            result["rows"].append(row)
            print(
                f"B={B:3d} T={T:5d} D={D:4d} H={row['H']:2d} mask={row['mask']:6s} ours {row['ours_ms']:9.2f} ms  "
                f"torch {row['torch_ms']:9.2f} ms  ratio {row['ratio']:.3f} "
                f"[{row['ratio_q25']:.3f}, {row['ratio_q75']:.3f}]  load {row['load_before']}",
                flush=True,
            )
    result["load_end"] = loadavg()
    result["max_ratio"] = max(r["ratio"] for r in result["rows"])
    result["target_met"] = result["max_ratio"] <= 1.0
    out = HERE / "results" / f"mha{'_' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"wrote {out.relative_to(HERE.parent)}; largest ratio {result['max_ratio']:.3f} "
        f"(target <= 1.0 {'met' if result['target_met'] else 'NOT met'})"
    )
    if not args.no_readme:
        write_section("bench_mha" + (f"_{args.tag}" if args.tag else ""), readme_section(result, args.tag))
    return 0


if __name__ == "__main__":
    sys.exit(main())
