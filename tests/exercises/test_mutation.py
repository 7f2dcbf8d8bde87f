"""Mutation testing of the checkers: no wrong answer that behaves differently from the solution passes.

Every exercise's solution cell is mutated (attnbook_book.mutation); the mutants that behave differently from
the solution somewhere on the oracle's inputs (killable) must all be rejected by the exercise's checker. The
few still accepted are listed in ``mutation_survivors.json``: a killable mutant that gets through and is not
listed fails the test, and so does a listed one that no longer gets through (remove it from the list), so the
list only shrinks. The whole analysis runs once per session (about a minute on two processes), cached in
``_build/cache/mutation`` per exercise (solution, checker module, checking helpers, this machinery), and
writes ``_build/reports/mutation.json`` and ``mutation.md``; ``make test-mutation`` runs it without the cache.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

mutation = pytest.importorskip("attnbook_book.mutation", reason="the book's build tools are not installed")
from attnbook_book.mutation import oracle, report, run, solutions  # noqa: E402
from attnbook_book.mutation.operators import mutants  # noqa: E402
from attnbook_book.mutation.specs import SPECS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KNOWN = Path(__file__).with_name("mutation_survivors.json")


@pytest.fixture(scope="module")
def analysis() -> dict:
    exercises = solutions.exercises()
    start = time.perf_counter()
    results = report.analyse_all(exercises, cache=ROOT / "_build" / "cache" / "mutation", jobs=2)
    data = report.report(results, time.perf_counter() - start, None)
    out = ROOT / "_build" / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation.json").write_text(json.dumps(data, indent=1))
    (out / "mutation.md").write_text(report.markdown(data))
    return data


def _survivors(data: dict) -> dict[str, set[str]]:
    return {row["exercise"]: {s["id"] for s in row["survivors"]} for row in data["exercises"]}


def test_every_exercise_has_a_declaration_and_its_solution_passes_its_checker(analysis):
    assert len(analysis["exercises"]) == len(solutions.exercises()) >= 69
    for row in analysis["exercises"]:
        assert row["error"] is None, f"{row['exercise']}: {row['error']}"
        assert row["solution"] == "passed", row["exercise"]
        assert row["killable"] > 0 and row["inputs"] > 0, row["exercise"]


def test_no_checker_lets_a_new_killable_mutant_through(analysis):
    known = {k: set(v) for k, v in json.loads(KNOWN.read_text()).items()}
    new = {
        row["exercise"]: [
            f"{s['description']} ({s['difference']})"
            for s in row["survivors"]
            if s["id"] not in known.get(row["exercise"], set())
        ]
        for row in analysis["exercises"]
    }
    new = {k: v for k, v in new.items() if v}
    assert not new, "checkers accept wrong answers that behave differently from the solution:\n" + json.dumps(
        new, indent=1
    )


def test_the_list_of_known_survivors_only_shrinks(analysis):
    known = json.loads(KNOWN.read_text())
    current = _survivors(analysis)
    gone = {k: sorted(set(v) - current.get(k, set())) for k, v in known.items()}
    gone = {k: v for k, v in gone.items() if v}
    assert not gone, "now rejected (or no longer made): remove them from mutation_survivors.json\n" + json.dumps(
        gone, indent=1
    )


def test_solutions_agree_with_their_checkers_references_on_every_input(analysis):
    differ = {r["exercise"]: r["solution_vs_checker_reference"] for r in analysis["exercises"]}
    assert not {k: v for k, v in differ.items() if v}


def test_the_reviewed_wrong_answers_are_among_the_mutants_and_rejected_with_their_hint(analysis):
    by_id = {e: {m["id"]: m for m in ms} for e, ms in analysis["mutants"].items()}
    softmax = by_id["04_queries_keys_values:check_softmax_temperature"]
    global_max = softmax["batch:3:12:z.max(dim=-1, keepdim=True).values -> z.max()"]
    assert global_max["difference"] and "one maximum for the whole tensor" in global_max["hint"]
    row_min = softmax["function:3:12:z.max(dim=-1, keepdim=True) -> z.min(dim=-1, keepdim=True)"]
    assert row_min["checker"] == "rejected" and "minimum" in row_min["hint"]
    head = by_id["16_what_attention_learns:check_without_head"]
    no_copy = head["drop:3:10:W_o.clone() -> W_o"]
    assert "changes its argument" in no_copy["difference"] and "in place" in no_copy["hint"]
    safe = by_id["06_masking:check_safe_masked_softmax"]
    detached = next(m for i, m in safe.items() if i.startswith("grad:") and i.endswith(".detach()"))
    assert detached["checker"] == "rejected" and "no gradient" in detached["hint"]


def test_every_checker_has_a_declaration():
    names = {e.checker for e in solutions.exercises()}
    assert names <= set(SPECS), sorted(names - set(SPECS))


def test_operators_make_the_usual_slips():
    source = "def f(x, y):\n    return torch.softmax(x / y, dim=-1).sum(dim=-1, keepdim=True)\n"
    made = {m.id.split(":")[0] + ":" + m.id.split(" -> ")[-1] for m in mutants(source, "function")}
    assert "arith:x * y" in made  # an operator
    assert "term:x" in made  # a dropped scale
    assert "dim:torch.softmax(x / y, dim=-2)" in made  # another axis
    assert "drop:x / y" in made  # a dropped softmax
    assert any(m.startswith("dtype:") for m in made) and any(m.startswith("grad:") for m in made)
    assert "swap:swapped" in made  # the parameters swapped


def test_the_oracle_sees_values_dtypes_in_place_changes_and_gradients():
    import torch

    x = torch.randn(2, 3, dtype=torch.float64)
    ref = oracle.outcome(lambda t: torch.softmax(t, -1), (x,), True)
    assert oracle.difference(oracle.outcome(lambda t: torch.softmax(t, -1), (x,), True), ref) is None
    assert "dtype" in oracle.difference(oracle.outcome(lambda t: torch.softmax(t, -1).float(), (x,), True), ref)
    assert "in place" in oracle.difference(oracle.outcome(lambda t: torch.softmax(t.mul_(2) / 2, -1), (x,), True), ref)
    assert "gradient" in oracle.difference(oracle.outcome(lambda t: torch.softmax(t, -1).detach(), (x,), True), ref)
    assert "values differ" in oracle.difference(oracle.outcome(lambda t: torch.softmax(t, 0), (x,), True), ref)
    assert run.named("the mask is ignored: ...") and not run.named("on test case 2, values differ (largest 1).")
