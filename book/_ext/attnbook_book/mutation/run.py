"""Run the mutation analysis of one exercise: mutants, the oracle's verdict on each, the checker's.

For every mutant of the solution (:mod:`.operators`) and every usual mistake the checker lists: the oracle
(:mod:`.oracle`) says whether it behaves like the solution on the battery (:mod:`.inputs`, :mod:`.specs`);
if it does not (*killable*), the checker is run on it and must reject it, and its hint should name a mistake
rather than only say where the values differ. The solution itself is compared with the checker's own
reference on the battery too: a solution that differs from the library on inputs the checker never tries
is a finding. Each mutant runs under a time limit.
"""

from __future__ import annotations

import contextlib
import re
import signal
import warnings
from typing import Any

import torch
from attnbook.exercises import ExerciseFailed

from . import oracle, solutions
from .operators import Mutant, mutants
from .specs import SPECS

LIMIT_S = 20  # one mutant: the oracle and the checker together
_GENERIC = re.compile(
    r"^(on test case \d+(, .*| your function raised [^.]*(\(at the line `.*`\))?\.)"
    r"|[-+\d.e]+ is too (large|small)\.|expected .*)$",
    re.S,
)


class _TimeLimit(Exception):
    pass


@contextlib.contextmanager
def _limit(seconds: int):
    def stop(signum, frame):
        raise _TimeLimit

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def named(hint: str) -> bool:
    """Whether a hint names a mistake, rather than only saying which case failed and how."""
    return not _GENERIC.match(hint.strip())


def verdict(check, answer) -> tuple[str, str]:
    """("passed" | "rejected" | "not attempted" | "crashed", the hint or message)."""
    try:
        result = check(answer)
    except ExerciseFailed as failed:
        return "rejected", failed.hint
    except _TimeLimit:
        raise
    except Exception as error:  # noqa: BLE001 - a checker that crashes instead of rejecting is a finding
        return "crashed", f"{type(error).__name__}: {error}"[:300]
    return ("passed" if result.passed else "not attempted"), result.message


def capture(exercise: solutions.Exercise, answer) -> dict:
    """Run the checker on ``answer`` and catch what it hands to check_function/check_number."""
    module = __import__(f"attnbook.exercises.{exercise.module}", fromlist=["_"])
    seen: dict[str, Any] = {}
    real = {name: getattr(module, name, None) for name in ("check_function", "check_number")}

    def spy_function(fn, **kwargs):
        seen.setdefault("function", []).append((fn, kwargs))
        return real["check_function"](fn, **kwargs)

    def spy_number(value, **kwargs):
        seen.setdefault("number", []).append((value, kwargs))
        return real["check_number"](value, **kwargs)

    for name, spy in (("check_function", spy_function), ("check_number", spy_number)):
        if real[name] is not None:
            setattr(module, name, spy)
    try:
        seen["verdict"] = verdict(exercise.check(), answer)
    finally:
        for name, fn in real.items():
            if fn is not None:
                setattr(module, name, fn)
    return seen


def _mistakes(captured: dict, answer) -> list[tuple[Mutant, Any]]:
    out = []
    for fn, kwargs in captured.get("function", []):
        if fn is answer:
            for i, m in enumerate(kwargs.get("mistakes", ())):
                out.append(
                    (Mutant(f"mistake:{i}:{m.hint[:50]}", "mistake", f"usual mistake: {m.hint[:70]}", ""), m.wrong)
                )
    for _, kwargs in captured.get("number", []):
        for i, (hint, value) in enumerate(kwargs.get("mistakes", ())):
            out.append((Mutant(f"mistake:{i}:{hint[:50]}", "mistake", f"usual mistake: {hint[:70]}", ""), value))
    return out


def _sampled(candidates, sample: int | None):
    """The first ``sample`` generated mutants in the order of their ids' hashes, and every usual mistake."""
    if sample is None:
        return candidates
    import hashlib

    generated = [c for c in candidates if c[0].operator != "mistake"]
    keep = {c[0].id for c in sorted(generated, key=lambda c: hashlib.sha256(c[0].id.encode()).hexdigest())[:sample]}
    return [c for c in candidates if c[0].operator == "mistake" or c[0].id in keep]


def analyse(exercise: solutions.Exercise, limit_s: int = LIMIT_S, sample: int | None = None) -> dict:
    """The whole analysis of one exercise, as plain data for the report."""
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    spec = SPECS.get(exercise.checker)
    report: dict[str, Any] = {
        "exercise": exercise.key,
        "chapter": exercise.chapter,
        "checker": exercise.checker,
        "kind": exercise.kind,
        "mutants": [],
    }
    if spec is None:
        report["error"] = "no declaration of the answer's inputs in specs.py"
        return report
    reference = solutions.load(exercise)
    captured = capture(exercise, reference)
    report["solution"] = captured["verdict"][0]
    compare = _comparer(exercise, spec, reference)
    report["inputs"] = compare.count
    report["solution_vs_checker_reference"] = _against_checker_reference(exercise, spec, reference, captured)
    candidates = [(m, None) for m in mutants(exercise.source, exercise.kind)] + _mistakes(captured, reference)
    check = exercise.check()
    for mutant, given in _sampled(candidates, sample):
        entry = {"id": mutant.id, "operator": mutant.operator, "description": mutant.description}
        try:
            with _limit(limit_s):
                answer = given if mutant.operator == "mistake" else solutions.load(exercise, mutant.source, "<mutant>")
                diff = compare(answer)
                entry["difference"] = diff
                if diff is not None:
                    entry["checker"], entry["hint"] = verdict(check, answer)
                    entry["named"] = entry["checker"] == "rejected" and named(entry["hint"])
        except _TimeLimit:
            entry["difference"], entry["checker"], entry["hint"] = "time limit", "time limit", ""
        except Exception as error:  # noqa: BLE001 - a mutant whose cell does not even run is not counted
            entry["invalid"] = f"{type(error).__name__}: {error}"[:200]
        report["mutants"].append(entry)
    return report


def _comparer(exercise, spec, reference):
    """A function answer -> how it differs from the solution on the battery (None: nowhere)."""
    if exercise.kind == "number":

        def compare(answer):
            return oracle.number_difference(answer, reference, spec.tol)

        compare.count = 1
        return compare
    if exercise.kind == "class":
        inputs = {init: spec.inputs(init) for init in spec.init}

        def compare(answer):
            for init, items in inputs.items():
                diff = oracle.module_difference(answer, reference, init, items)
                if diff:
                    return f"{init}: {diff}"
            return None

        compare.count = sum(len(v) for v in inputs.values())
        return compare
    inputs = spec.inputs()
    expected = [(item, oracle.outcome(reference, item.args, spec.grad)) for item in inputs]
    expected = [(item, out) for item, out in expected if "error" not in out]

    def compare(answer):
        for item, out in expected:
            diff = oracle.difference(oracle.outcome(answer, item.args, spec.grad), out)
            if diff:
                return f"{item.label}: {diff}"
        return None

    compare.count = len(expected)
    return compare


def _against_checker_reference(exercise, spec, solution, captured) -> str | None:
    """Where the solution differs from the reference its checker compares with, on the battery."""
    calls = [kw for fn, kw in captured.get("function", []) if fn is solution]
    if exercise.kind != "function" or not calls:
        return None
    library = calls[0]["reference"]
    for item in spec.inputs():
        expected = oracle.outcome(library, item.args, grad=False)
        if "error" in expected:
            continue
        got = oracle.outcome(solution, item.args, grad=False)
        diff = oracle.difference(got, expected)
        if diff:
            return f"{item.label}: {diff}"
    return None
