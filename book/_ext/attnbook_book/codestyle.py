"""The chapters' code, formatted to fit the page: 79 columns (the code column holds 81 characters at 1280 px).

Formats the code cells of the MyST sources in place, leaving every other byte of the file as it is:

1. a comment at the end of a line that is too long moves onto its own line above, with the line's indentation
   (a shape comment stays next to the line it explains, and the code need not be broken to make room for it);
2. the statements that are still too long are re-wrapped by yapf, and only those: the rest keeps the layout
   its author chose (aligned matrices, one argument per idea). A formatter that rewrites every line (ruff's,
   black's) puts each element of a long list on its own line, which doubled the chapters' code lines.

What this cannot wrap (a long string) is listed for a person to shorten. ``ruff check`` (E501, with
``chapters/ruff.toml``) and the site tests hold the chapters to 79 columns.

Run as a program:

    python -m attnbook_book.codestyle [--check] [chapters/NN_name.md ...]   # default: every chapter

``--check`` changes nothing and exits 1 when a chapter would change or still has a line over 79 columns.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CHAPTERS = REPO / "chapters"
WIDTH = 79
_CELL = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n", re.M)


def code_cells(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of the code of every ``{code-cell}`` in a MyST source: after the
    opening fence and its ``:key: value`` options (and the blank line after them), up to the closing fence."""
    spans = []
    for m in _CELL.finditer(text):
        fence = m.group(1)
        start = m.end()
        options = re.compile(r"(?:---\n.*?\n---\n|(?::[\w-]+:[^\n]*\n)+)\n?", re.S)
        o = options.match(text, start)
        if o:
            start = o.end()
        close = re.compile(rf"^{fence}\s*$", re.M).search(text, start)
        spans.append((start, close.start()))
    return spans


def _comment_lines(source: str) -> dict[int, int]:
    """{line number (1-based): column of a comment that follows code on that line}."""
    found, last_code = {}, {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                if last_code.get(tok.start[0]) is not None:
                    found[tok.start[0]] = tok.start[1]
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                for line in range(tok.start[0], tok.end[0] + 1):
                    last_code[line] = tok.end[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    return found


def lift_long_comments(source: str, width: int = WIDTH) -> str:
    """Move the trailing comment of each line longer than ``width`` onto its own line above."""
    if any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
        return source  # magics: tokenize cannot read the cell; ruff handles it alone
    comments = _comment_lines(source)
    lines = source.split("\n")
    out = []
    for number, line in enumerate(lines, start=1):
        column = comments.get(number)
        if column is not None and len(line) > width:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + line[column:].rstrip())
            out.append(line[:column].rstrip())
        else:
            out.append(line)
    return "\n".join(out)


# yapf's PEP 8 style, packing arguments and elements onto as few lines as fit
STYLE = (
    "{based_on_style: pep8, column_limit: " + str(WIDTH) + ", each_dict_entry_on_separate_line: false, "
    "split_before_named_assigns: false, coalesce_brackets: true, split_all_comma_separated_values: false, "
    "allow_split_before_dict_value: false, split_before_logical_operator: false}"
)


def wrap_long_lines(source: str, width: int = WIDTH) -> str:
    """The statements of a cell that have a line over ``width`` columns, re-wrapped; the others unchanged."""
    from yapf.yapflib.yapf_api import FormatCode

    lines = source.split("\n")
    long = [(i, i) for i, line in enumerate(lines, start=1) if len(line) > width]
    if not long or any(line.lstrip().startswith(("%", "!")) for line in lines):
        return source
    try:
        formatted, _ = FormatCode(source + "\n", style_config=STYLE, lines=long)
    except SyntaxError:
        return source
    return formatted.rstrip("\n")


def format_text(text: str) -> str:
    """A MyST source with its code cells formatted; everything else unchanged."""
    spans = code_cells(text)
    formatted = [wrap_long_lines(lift_long_comments(text[a:b].rstrip("\n"))) for a, b in spans]
    out, last = [], 0
    for (a, b), code in zip(spans, formatted):
        out += [text[last:a], code.rstrip("\n") + "\n" if code.strip() else text[a:b]]
        last = b
    out.append(text[last:])
    return "".join(out)


def long_lines(text: str, width: int = WIDTH) -> list[str]:
    """The code lines of a MyST source wider than ``width``."""
    return [line for a, b in code_cells(text) for line in text[a:b].splitlines() if len(line) > width]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook_book.codestyle")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chapter would change")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.paths or sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))
    failed = False
    for path in paths:
        text = path.read_text(encoding="utf-8")
        formatted = format_text(text)
        wide = long_lines(formatted)
        if args.check:
            if formatted != text:
                print(f"{path}: code cells are not formatted (make format)")
                failed = True
        elif formatted != text:
            path.write_text(formatted, encoding="utf-8")
            print(f"formatted {path}")
        for line in wide:
            print(f"{path}: a code line of {len(line)} columns: {line.strip()[:60]}...")
            failed = failed or args.check
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
