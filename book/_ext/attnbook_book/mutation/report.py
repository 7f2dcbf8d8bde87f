"""Running every exercise (in parallel, with a cache) and writing the score: JSON and a Markdown table.

The cache holds one file per exercise, keyed by the hashes of its solution cell, its checker module, the
checking helpers, this package's code and PyTorch's version: a checker or solution that changes is analysed
again, the others are read back. A sample (``sample=N``) keeps, in every exercise, the N mutants whose ids
hash lowest (the same N every run while the code is unchanged) and every usual mistake.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
from collections import defaultdict
from pathlib import Path

import torch

from . import run, solutions

PACKAGE = Path(__file__).parent


def code_digest() -> str:
    h = hashlib.sha256(torch.__version__.encode())
    for path in sorted(PACKAGE.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


def _key(exercise: solutions.Exercise, sample: int | None) -> str:
    return hashlib.sha256(f"{exercise.digest()}{code_digest()}{sample}".encode()).hexdigest()[:20]


def _task(args):
    exercise, sample = args
    start = time.perf_counter()
    result = run.analyse(exercise, sample=sample)
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def analyse_all(exercises, *, cache: Path | None, jobs: int = 2, sample: int | None = None) -> list[dict]:
    """Every exercise's analysis, from the cache where its key matches."""
    results: dict[str, dict] = {}
    todo = []
    for exercise in exercises:
        file = cache / f"{exercise.chapter}--{exercise.checker}.json" if cache else None
        key = _key(exercise, sample)
        if file and file.exists():
            stored = json.loads(file.read_text())
            if stored.get("key") == key:
                results[exercise.key] = stored
                continue
        todo.append(exercise)
    todo.sort(key=lambda e: e.kind != "class")  # the slow ones first
    context = multiprocessing.get_context("fork")
    with context.Pool(max(1, jobs), maxtasksperchild=4) as pool:
        for exercise, result in zip(todo, pool.imap(_task, [(e, sample) for e in todo])):
            result["key"] = _key(exercise, sample)
            results[exercise.key] = result
            if cache:
                cache.mkdir(parents=True, exist_ok=True)
                (cache / f"{exercise.chapter}--{exercise.checker}.json").write_text(json.dumps(result))
    return [results[e.key] for e in exercises]


def summary(result: dict) -> dict:
    """One exercise's counts, its surviving killable mutants and its findings."""
    mutants = [m for m in result["mutants"] if "invalid" not in m]
    killable = [m for m in mutants if m.get("difference")]
    rejected = [m for m in killable if m.get("checker") == "rejected"]
    return {
        "exercise": result["exercise"],
        "chapter": result["chapter"],
        "checker": result["checker"],
        "kind": result["kind"],
        "solution": result.get("solution"),
        "inputs": result.get("inputs"),
        "made": len(mutants),
        "invalid": len(result["mutants"]) - len(mutants),
        "equivalent": len(mutants) - len(killable),
        "killable": len(killable),
        "rejected": len(rejected),
        "rejected_named": sum(bool(m.get("named")) for m in rejected),
        "seconds": result.get("seconds"),
        "error": result.get("error"),
        "solution_vs_checker_reference": result.get("solution_vs_checker_reference"),
        "survivors": [
            {k: m.get(k) for k in ("id", "description", "difference", "checker", "hint")}
            for m in killable
            if m.get("checker") != "rejected"
        ],
        "unnamed_rejections": [m["id"] for m in rejected if not m.get("named")],
    }


def _score(rows) -> dict:
    keys = ("made", "invalid", "equivalent", "killable", "rejected", "rejected_named")
    total = {k: sum(r[k] for r in rows) for k in keys}
    total["score"] = round(100 * total["rejected"] / total["killable"], 1) if total["killable"] else 100.0
    total["named_share"] = round(100 * total["rejected_named"] / total["rejected"], 1) if total["rejected"] else 0.0
    total["survivors"] = total["killable"] - total["rejected"]
    return total


def report(results: list[dict], seconds: float, sample: int | None) -> dict:
    rows = [summary(r) for r in results]
    chapters = defaultdict(list)
    for row in rows:
        chapters[row["chapter"][:2]].append(row)
    return {
        "sample": sample,
        "seconds": round(seconds, 1),
        "total": _score(rows),
        "chapters": {c: _score(rs) | {"exercises": len(rs)} for c, rs in sorted(chapters.items())},
        "exercises": rows,
        "mutants": {r["exercise"]: r["mutants"] for r in results},
    }


def markdown(data: dict) -> str:
    lines = [
        "| chapter | exercises | mutants | equivalent | killable | rejected | score | hint names the mistake |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for chapter, c in list(data["chapters"].items()) + [("all", data["total"] | {"exercises": len(data["exercises"])})]:
        lines.append(
            f"| {chapter} | {c['exercises']} | {c['made']} | {c['equivalent']} | {c['killable']} | {c['rejected']} "
            f"| {c['score']:.1f}% | {c['named_share']:.0f}% |"
        )
    lines += ["", "Surviving killable mutants:", ""]
    for row in data["exercises"]:
        for s in row["survivors"]:
            lines.append(f"- `{row['exercise']}` {s['description']}: {s['difference'][:120]}")
        if row["solution_vs_checker_reference"]:
            lines.append(
                f"- `{row['exercise']}` the solution differs from the checker's reference: "
                f"{row['solution_vs_checker_reference'][:160]}"
            )
    return "\n".join(lines) + "\n"
