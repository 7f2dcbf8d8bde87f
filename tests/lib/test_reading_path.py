"""The library reads like its formulas: checking is a small share of the code learners read.

In the core modules, the lines that check input inside functions and methods that are not themselves
checkers are at most 8% of those functions' code lines (docstrings and comments do not count). Checking
lines are ``raise``, ``if ...: raise``, calls of a checker (``check``, ``check_*``, ``_check_*``) or of
anything in ``_checks``, and the decorator that names a function's checker (``@_checks.checked_by``).
Checks live in checker helpers, called once at the public boundary.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import attnbook
import pytest

LIB = Path(attnbook.__file__).resolve().parent
# the modules the chapters send learners to, and the modules split out of them
CORE = ["attention", "positional", "blocks", "models", "flash", "rnn", "seq2seq", "vit"]
SPLIT = ["positionwise", "gpt2", "decoding", "bptt", "vit_experiment"]
LIMIT = 0.08
# functions that check twice, and why
SECOND_CHECK = {
    ("decoding", "score_sequence"): "a decoder's vocabulary is known only from its first output",
}
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_CHECKER = re.compile(r"^_?check(_|$)")


def _code_lines(source: str, tree: ast.Module) -> set[int]:
    lines = {
        n
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type not in _SKIP
        for n in range(tok.start[0], tok.end[0] + 1)
    }
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines -= set(range(first.lineno, first.end_lineno + 1))
    return lines


def _is_check_call(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
    return bool(_CHECKER.match(name)) or base == "_checks"


def _span(node) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _check_lines(function) -> set[int]:
    lines = set()
    for decorator in function.decorator_list:
        if _is_check_call(decorator):
            lines |= _span(decorator)
    for node in ast.walk(function):
        if isinstance(node, ast.Raise) or (
            isinstance(node, ast.If) and not node.orelse and all(isinstance(s, ast.Raise) for s in node.body)
        ):
            lines |= _span(node)
        elif isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) and _is_check_call(node.value):
            lines |= _span(node)
    return lines


def _functions(tree: ast.Module):
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        yield from (m for m in members if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))


def check_share(source: str) -> tuple[int, int]:
    """(checking lines, code lines) inside the non-checker functions and methods of a module's source."""
    tree = ast.parse(source)
    code = _code_lines(source, tree)
    checks = total = 0
    for function in _functions(tree):
        if _CHECKER.match(function.name):
            continue
        lines = set().union(
            *(_span(d) for d in function.decorator_list), range(function.body[0].lineno, function.end_lineno + 1)
        )
        body = lines & code
        total += len(body)
        checks += len(_check_lines(function) & body)
    return checks, total


def test_the_measure_counts_checks_and_not_docstrings():
    source = '''
@_checks.checked_by(_check_f)
def f(x):
    """A docstring
    of two lines."""
    if x < 0:
        raise ValueError("x must be >= 0")
    _checks.tensor("x", x)
    y = checkpoint(x + 1)  # a comment; checkpoint is no checker
    return y


def _check_f(x):
    raise ValueError("not counted: a checker")
'''
    assert check_share(source) == (4, 6)


def _source(module: str) -> str:
    return (LIB / f"{module}.py").read_text(encoding="utf-8")


def test_checking_is_at_most_8_percent_of_the_core_modules():
    shares = {module: check_share(_source(module)) for module in CORE}
    checks, total = (sum(column) for column in zip(*shares.values()))
    assert total > 500, shares
    report = ", ".join(f"{m} {c / t:.1%}" for m, (c, t) in shares.items())
    assert checks <= LIMIT * total, f"{checks} of {total} code lines check input ({checks / total:.1%}): {report}"


def _checking_statements(function) -> list[str]:
    found = [ast.unparse(d) for d in function.decorator_list if _is_check_call(d)]
    for node in ast.walk(function):
        if isinstance(node, ast.Raise) or (
            isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) and _is_check_call(node.value)
        ):
            found.append(ast.unparse(node).splitlines()[0])
    return found


@pytest.mark.parametrize("module", CORE + SPLIT)
def test_a_function_makes_at_most_one_check(module):
    """One checker call (or one decorator naming it) per function: the rest of the body is the computation."""
    tree = ast.parse(_source(module))
    functions = [f for f in _functions(tree) if not _CHECKER.match(f.name)]
    assert functions, module
    several = {
        f"{f.name} (line {f.lineno})": found
        for f in functions
        if len(found := _checking_statements(f)) > 1 and (module, f.name) not in SECOND_CHECK
    }
    assert not several, f"{module}: functions that check more than once: {several}"


def test_the_count_of_checks_finds_a_second_one():
    function = ast.parse("""
@_checks.checked_by(_check_f)
def f(x):
    for t in x:
        check_step(t)
    return x
""").body[0]
    assert _checking_statements(function) == ["_checks.checked_by(_check_f)", "check_step(t)"]
