"""Mutation operators on a solution's syntax tree: the small wrong changes a learner's code can carry.

Each operator looks at one node and proposes replacements. Generic ones (after the operators of mutmut and
cosmic-ray): arithmetic and comparison operators, constants, boolean operators, signs. Tensor-aware ones,
which those tools lack: ``dim``/``keepdim`` arguments, transposes and permutations, dropped calls (a
softmax, a ``tanh``, a ``masked_fill``, a ``clone``), dropped terms and factors (a scale, a bias, an epsilon),
swapped arguments and parameters, in-place variants (``x /= t``, ``masked_fill_``), shapes that only work for
a batch of one or a square input (``.shape[1]`` for ``.shape[-1]``, ``.T`` for ``.transpose(-2, -1)``,
``squeeze()``), dtypes (float64-only code, a float64 or float32 result, a detached result) and dropped
statements. A numeric answer's formula gets each term dropped or doubled and each constant changed.

:func:`mutants` applies every proposal, one at a time, to a fresh copy of the tree and keeps each distinct
program once; a mutant's id (operator, line, column, what changed) is stable while its line is unchanged.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Mutant", "mutants"]


@dataclass(frozen=True)
class Mutant:
    id: str  # e.g. "dim:4:39:dim=-1 -> dim=-2"
    operator: str
    description: str  # "line 4: `dim=-1` -> `dim=-2`"
    source: str


_ARITH = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult, ast.FloorDiv],
    ast.FloorDiv: [ast.Div],
    ast.Pow: [ast.Mult],
    ast.Mod: [ast.FloorDiv],
    ast.MatMult: [ast.Mult],
}
_COMPARE = {
    ast.Lt: [ast.LtE, ast.Gt],
    ast.LtE: [ast.Lt, ast.GtE],
    ast.Gt: [ast.GtE, ast.Lt],
    ast.GtE: [ast.Gt, ast.LtE],
    ast.Eq: [ast.NotEq],
    ast.NotEq: [ast.Eq],
}
_BITS = {ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
_DIM_METHODS = {
    "sum", "mean", "softmax", "log_softmax", "amax", "amin", "max", "min", "cumsum", "argmax", "argmin",
    "unsqueeze", "squeeze", "flatten", "norm", "var", "std", "logsumexp", "prod", "all", "any", "flip",
}  # fmt: skip
_DIM_SECOND = {"chunk", "cat", "stack", "topk", "split", "gather", "cumsum", "softmax", "log_softmax"}
_DROPPABLE = {
    "tanh", "sigmoid", "exp", "sqrt", "relu", "gelu", "silu", "elu", "abs", "log", "normalize", "softmax",
    "clone", "contiguous", "detach", "masked_fill", "to", "float", "double", "squeeze", "unsqueeze", "tril",
    "triu", "nan_to_num", "rsqrt", "sum", "mean", "expand", "flatten", "reshape", "view", "maximum",
    "minimum", "clamp", "ceil", "floor", "round", "log2", "exp2", "xlogy",
}  # fmt: skip
_SWAP = {
    "sigmoid": ["tanh"], "tanh": ["sigmoid"], "relu": ["gelu"], "gelu": ["relu"], "silu": ["relu", "sigmoid"],
    "maximum": ["minimum"], "minimum": ["maximum"], "amax": ["amin"], "amin": ["amax"], "max": ["min"],
    "min": ["max"], "tril": ["triu"], "triu": ["tril"], "mean": ["sum"], "sum": ["mean"], "ceil": ["floor"],
    "floor": ["ceil"], "log": ["log2"], "log2": ["log"], "cumsum": ["cumprod"], "sqrt": ["rsqrt"],
    "logaddexp": ["maximum"], "matrix_power": [], "cos": ["sin"], "sin": ["cos"], "zeros_like": ["ones_like"],
    "ones_like": ["zeros_like"], "all": ["any"], "any": ["all"], "view": ["reshape"],
}  # fmt: skip
_INPLACE = {
    "masked_fill", "add", "mul", "sub", "div", "exp", "clamp", "pow", "sqrt", "tanh", "sigmoid", "relu",
    "abs", "neg", "fill", "transpose", "unsqueeze", "squeeze", "nan_to_num", "cumsum",
}  # fmt: skip


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _int(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value if type(node.operand.value) is int else None
    return None


def _const(value) -> ast.expr:
    return (
        ast.UnaryOp(ast.USub(), ast.Constant(-value))
        if isinstance(value, (int, float)) and value < 0
        else (ast.Constant(value))
    )


def _other_dims(d: int) -> list[int]:
    return {-1: [-2, 0, 1], -2: [-1, 0], 0: [1, -1], 1: [0, 2, -1], 2: [1, -1], 3: [2, -1]}.get(d, [d - 1])


def _method(receiver: ast.expr, name: str, args=(), keywords=()) -> ast.Call:
    return ast.Call(ast.Attribute(receiver, name, ast.Load()), list(args), list(keywords))


def _expression_ops(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator, replacement) pairs for one expression node."""
    if isinstance(node, ast.BinOp):
        for op in _ARITH.get(type(node.op), []):
            yield "arith", ast.BinOp(node.left, op(), node.right)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.Pow, ast.FloorDiv)):
            yield "term", node.left  # a dropped term, factor, scale, bias or epsilon
            if not isinstance(node.op, (ast.Div, ast.Pow, ast.FloorDiv)):
                yield "term", node.right
        if type(node.op) in _BITS:
            yield "logic", ast.BinOp(node.left, _BITS[type(node.op)](), node.right)
            yield "term", node.left
            yield "term", node.right
        if isinstance(node.op, (ast.Add, ast.Sub)):  # a term doubled
            for side in ("left", "right"):
                doubled = copy.copy(node)
                setattr(doubled, side, ast.BinOp(ast.Constant(2), ast.Mult(), getattr(node, side)))
                yield "double", doubled
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for op in _COMPARE.get(type(node.ops[0]), []):
            yield "compare", ast.Compare(node.left, [op()], node.comparators)
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "logic", ast.BoolOp(other, node.values)
    elif isinstance(node, ast.UnaryOp) and not isinstance(node.operand, ast.Constant):
        if isinstance(node.op, (ast.USub, ast.Invert, ast.Not)):
            yield "sign", node.operand
    elif isinstance(node, (ast.Constant, ast.UnaryOp)) and _int(node) is not None:
        value = _int(node)
        for new in sorted({value + 1, value - 1, 2 * value} - {value}):
            yield "constant", _const(new)
    elif isinstance(node, ast.Constant) and type(node.value) is float:
        for new in (node.value * 2, node.value / 2) if node.value else (1.0,):
            yield "constant", _const(new)
    elif isinstance(node, ast.Call):
        yield from _call_ops(node)
    elif isinstance(node, ast.Attribute):
        if node.attr == "values" and isinstance(node.value, ast.Call) and _name(node.value.func) in ("max", "min"):
            yield "batch", ast.Call(node.value.func, [], [])  # one maximum for the whole tensor, not per row
        if node.attr in ("T", "mT"):
            yield "transpose", node.value
        elif node.attr == "float64":
            yield "dtype", ast.Attribute(node.value, "float32", ast.Load())
    elif isinstance(node, ast.Subscript):
        yield from _subscript_ops(node)
    elif isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) >= 2 and isinstance(node.ctx, ast.Load):
        if not any(isinstance(e, ast.Starred) for e in node.elts):
            elts = list(node.elts)
            elts[0], elts[1] = elts[1], elts[0]
            yield "swap", type(node)(elts, ast.Load())


def _call_ops(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    name = _name(node.func)
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    is_method = receiver is not None and not (isinstance(receiver, ast.Name) and receiver.id in ("torch", "F", "math"))
    is_method = is_method and not (isinstance(receiver, ast.Attribute) and receiver.attr in ("special", "linalg"))
    # dim / keepdim keywords
    for i, kw in enumerate(node.keywords):
        value = _int(kw.value)
        if kw.arg in ("dim", "axis") and value is not None:
            for d in _other_dims(value):
                yield "dim", _with_keyword(node, i, _const(d))
            if not any(k.arg == "keepdim" for k in node.keywords):
                yield "batch", _without_keyword(node, i)  # a reduction over everything: right for one row only
        elif kw.arg in ("dim", "axis") and isinstance(kw.value, ast.Tuple):
            for j, elt in enumerate(kw.value.elts):
                if _int(elt) is not None:
                    for d in _other_dims(_int(elt))[:1]:
                        elts = list(kw.value.elts)
                        elts[j] = _const(d)
                        yield "dim", _with_keyword(node, i, ast.Tuple(elts, ast.Load()))
        elif kw.arg == "keepdim" and isinstance(kw.value, ast.Constant):
            yield "dim", _with_keyword(node, i, ast.Constant(not kw.value.value))
        elif kw.arg == "dtype":
            yield "dtype", _without_keyword(node, i)
        elif kw.arg in ("generator", "largest", "diagonal", "bias"):
            yield "argument", _without_keyword(node, i)
    # positional dims
    positions = []
    if name in _DIM_METHODS and is_method and node.args:
        positions.append(0)
    if name in _DIM_SECOND and len(node.args) >= 2:
        positions.append(1)
    for p in positions:
        value = _int(node.args[p])
        if value is not None:
            for d in _other_dims(value):
                args = list(node.args)
                args[p] = _const(d)
                yield "dim", ast.Call(node.func, args, node.keywords)
    if name == "squeeze" and node.args:
        yield "batch", ast.Call(node.func, [], node.keywords)
    if name in ("transpose", "permute", "t") and is_method:
        yield "transpose", receiver
        if name == "transpose" and [_int(a) for a in node.args] == [-2, -1]:
            yield "batch", ast.Attribute(receiver, "T", ast.Load())
        if name == "permute" and len(node.args) >= 2:
            for j in range(len(node.args) - 1):
                args = list(node.args)
                args[j], args[j + 1] = args[j + 1], args[j]
                yield "transpose", ast.Call(node.func, args, node.keywords)
    # a dropped call: the function's input passes through unchanged
    if name in _DROPPABLE:
        if is_method:
            yield "drop", receiver
        elif node.args:
            yield "drop", node.args[0]
    for other in _SWAP.get(name, []):
        func = copy.copy(node.func)
        if isinstance(func, ast.Attribute):
            func.attr = other
        else:
            func.id = other
        yield "function", ast.Call(func, node.args, node.keywords)
    if name == "float" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
        if node.args[0].value in ("-inf", "inf"):
            yield "constant", ast.Constant(0.0)
            yield "constant", ast.Constant(-1e4)
    # swapped arguments
    if not is_method and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args):
        args = list(node.args)
        if name == "where" and len(args) == 3:
            args[1], args[2] = args[2], args[1]
        else:
            args[0], args[1] = args[1], args[0]
        yield "swap", ast.Call(node.func, args, node.keywords)
    # in place: x.exp() -> x.exp_(), torch.exp(x) -> x.exp_()
    if name in _INPLACE:
        if is_method:
            yield "inplace", _method(receiver, name + "_", node.args, node.keywords)
        elif node.args and name in ("exp", "tanh", "sigmoid", "relu", "sqrt", "abs"):
            yield "inplace", _method(node.args[0], name + "_", node.args[1:], node.keywords)


def _with_keyword(node: ast.Call, i: int, value: ast.expr) -> ast.Call:
    keywords = list(node.keywords)
    keywords[i] = ast.keyword(keywords[i].arg, value)
    return ast.Call(node.func, node.args, keywords)


def _without_keyword(node: ast.Call, i: int) -> ast.Call:
    return ast.Call(node.func, node.args, [k for j, k in enumerate(node.keywords) if j != i])


def _subscript_ops(node: ast.Subscript) -> Iterator[tuple[str, ast.AST]]:
    # x.shape[-1] -> x.shape[1] or x.shape[0]: right only for some ranks or for a square input
    if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" and _int(node.slice) is not None:
        index = _int(node.slice)
        for other in sorted({0, 1, -1, -2} - {index}):
            yield "batch", ast.Subscript(node.value, _const(other), ast.Load())


def _statement_ops(stmt: ast.stmt) -> Iterator[tuple[str, ast.AST | None]]:
    """Replacements of a whole statement (None deletes it)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        target, value = stmt.targets[0].id, stmt.value
        if isinstance(value, ast.BinOp) and isinstance(value.left, ast.Name) and value.left.id == target:
            yield "inplace", ast.AugAssign(ast.Name(target, ast.Store()), value.op, value.right)
        reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        if target in reads:
            yield "statement", None  # a step dropped: x = f(x) left out
    elif isinstance(stmt, (ast.AugAssign, ast.If)) or (
        isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Subscript) for t in stmt.targets)
    ):
        yield "statement", None
    elif isinstance(stmt, ast.Return) and stmt.value is not None and not isinstance(stmt.value, ast.Tuple):
        for wrap in ("double", "float", "detach"):
            yield "dtype" if wrap != "detach" else "grad", ast.Return(_method(stmt.value, wrap))


def _slots(tree: ast.AST) -> list[tuple[ast.AST, str, int | None, ast.AST]]:
    """Every (parent, field, index, child) of the tree, in a fixed order."""
    out = []

    def visit(parent):
        for name, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        out.append((parent, name, i, item))
                        visit(item)
            elif isinstance(value, ast.AST):
                out.append((parent, name, None, value))
                visit(value)

    visit(tree)
    return out


def _skipped(parent: ast.AST, name: str, child: ast.AST) -> bool:
    """Nodes not mutated: a print, docstrings, decorators, strings, the names a statement assigns."""
    if isinstance(child, (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.arguments)):
        return True
    if isinstance(parent, ast.FunctionDef) and name in ("decorator_list", "returns"):
        return True
    if isinstance(parent, (ast.Assign, ast.AugAssign)) and name == "targets":
        return True
    if isinstance(parent, ast.UnaryOp) and isinstance(child, ast.Constant):  # -1 is mutated as a whole
        return True
    if isinstance(parent, ast.Attribute) and isinstance(child, ast.Name) and child.id in ("torch", "F", "math"):
        return True
    return isinstance(child, ast.Expr) and isinstance(child.value, ast.Call) and _name(child.value.func) == "print"


def _proposals(tree: ast.AST, kind: str):
    skipped: set[int] = set()
    for k, (parent, name, index, child) in enumerate(_slots(tree)):
        if id(parent) in skipped or _skipped(parent, name, child):
            skipped.add(id(child))
            continue
        if isinstance(child, ast.stmt):
            if index is not None and not isinstance(child, (ast.FunctionDef, ast.ClassDef, ast.Import)):
                for op, new in _statement_ops(child):
                    yield k, op, new
        elif isinstance(child, ast.expr):
            for op, new in _expression_ops(child):
                yield k, op, new
    if kind == "function":
        yield from _parameter_swaps(tree)


def _parameter_swaps(tree: ast.AST):
    """Two adjacent parameters of the answer swapped wherever the body reads them."""
    func = (
        next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None) if isinstance(tree, ast.Module) else None
    )
    if func is None:
        return
    names = [a.arg for a in func.args.args]
    for a, b in zip(names, names[1:]):
        yield -1, "swap", (a, b)


def _apply(source: str, slot: int, new) -> str:
    tree = ast.parse(source)
    if slot == -1:  # a parameter swap
        a, b = new
        func = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        for node in ast.walk(func):  # the body's names; the signature (ast.arg nodes) keeps its order
            if isinstance(node, ast.Name) and node.id in (a, b):
                node.id = b if node.id == a else a
        return ast.unparse(tree)
    parent, name, index, _ = _slots(tree)[slot]
    if index is None:
        setattr(parent, name, new)
    else:
        items = getattr(parent, name)
        if new is None:
            del items[index]
            if not items:
                items.append(ast.Pass())
        else:
            items[index] = new
    return ast.unparse(ast.fix_missing_locations(tree))


def mutants(source: str, kind: str) -> list[Mutant]:
    """Every distinct mutant of ``source`` (a solution cell), as programs."""
    tree = ast.parse(source)
    original = ast.unparse(tree)
    slots = _slots(tree)
    seen, out = {original}, []
    for slot, op, new in list(_proposals(tree, kind)):
        try:
            text = _apply(source, slot, copy.deepcopy(new) if isinstance(new, ast.AST) else new)
            compile(text, "<mutant>", "exec")
        except (SyntaxError, ValueError, TypeError, IndexError):
            continue
        if text in seen:
            continue
        seen.add(text)
        if slot == -1:
            before, after = f"parameters {new[0]}, {new[1]}", "swapped"
            line = col = 0
        else:
            node = slots[slot][3]
            line, col = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
            before = ast.unparse(node) if not isinstance(node, ast.stmt) else ast.unparse(node).splitlines()[0]
            after = "(deleted)" if new is None else ast.unparse(new).splitlines()[0]
        before, after = _short(before), _short(after)
        out.append(Mutant(f"{op}:{line}:{col}:{before} -> {after}", op, f"line {line}: `{before}` -> `{after}`", text))
    return out


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
