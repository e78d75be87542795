"""The cffi declarations of libsdmp1, made from its public header ``include/sdm/phase1.h``.

cffi's ``cdef`` takes plain C declarations and ``#define NAME <integer>`` lines only. This
module runs the header's preprocessor logic (include guards, ``#ifdef __cplusplus``, the
``SDM_P1_API`` attribute, ``#include "sdm/phase1_version.h"``), drops the comments and
writes every object-like macro whose value is an integer expression as its value (e.g.
``SDM_P1_VERSION_NUMBER``, ``SDM_P1_UNSET``); other macros (initializers, attributes) are not
declared. Anything it does not understand (a function-like macro, an ``#if`` it cannot
evaluate, ``#error``) is an error, so a header change can never be dropped silently.

One code path for every installation: the build runs this file as a script (Meson, also for
the wheel: ``python declarations.py HEADER OUTPUT``) and installs the result beside it as
``phase1_cdef.h``; a package run from the source tree without it calls :func:`declarations`
on the checkout's header at import. Standard library only, as the build runs it before
anything is installed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["declarations", "CDEF_FILE"]

#: The file name of the generated declarations, installed in this package (sdm_phase1/_c).
CDEF_FILE = "phase1_cdef.h"

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*?)\s*$")
_DEFINE = re.compile(r"^(\w+)(\(?)\s*(.*)$")
_INT_LITERAL = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
_OPERATORS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b, ast.BitXor: lambda a, b: a ^ b,
    ast.Lt: lambda a, b: int(a < b), ast.Gt: lambda a, b: int(a > b), ast.LtE: lambda a, b: int(a <= b),
    ast.GtE: lambda a, b: int(a >= b), ast.Eq: lambda a, b: int(a == b), ast.NotEq: lambda a, b: int(a != b),
}


class _Preprocessor:
    """The subset of the C preprocessor the public header uses, with no macro predefined
    (so ``__cplusplus``, ``_WIN32`` and ``__GNUC__`` are undefined: plain C, no attributes)."""

    def __init__(self, include_dir: Path):
        self.include_dir = include_dir
        self.integers: Dict[str, int] = {}  # object-like macros with an integer value
        self.texts: Dict[str, str] = {}  # the other object-like macros: name -> replacement
        self.lines: List[str] = []  # the output: declarations and integer #defines

    def run(self, path: Path) -> None:
        text = re.sub(r"/\*.*?\*/", lambda m: " " + "\n" * m.group().count("\n"),
                      path.read_text(encoding="utf-8"), flags=re.S)
        text = re.sub(r"//[^\n]*", "", text).replace("\\\n", " ")
        stack: List[List[bool]] = []  # per open #if: [this branch active, a branch was taken]
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{path}:{number}"
            active = all(branch[0] for branch in stack)
            directive = _DIRECTIVE.match(line)
            if directive is None:
                if active and line.strip():
                    # Macros expanded (SDM_P1_API to nothing), the line's indentation kept.
                    indent = line[: len(line) - len(line.lstrip())]
                    self.lines.append(indent + _IDENTIFIER.sub(self._expand, line).strip())
                continue
            name, rest = directive.groups()
            if name in ("if", "ifdef", "ifndef"):
                value = active and self._condition(name, rest, where)
                stack.append([value, value])
            elif name in ("elif", "else"):
                if not stack:
                    raise ValueError(f"{where}: #{name} without #if")
                branch = stack.pop()
                outer = all(b[0] for b in stack)
                value = outer and not branch[1] and (name == "else" or self._condition("if", rest, where))
                stack.append([value, branch[1] or value])
            elif name == "endif":
                if not stack:
                    raise ValueError(f"{where}: #endif without #if")
                stack.pop()
            elif not active:
                continue
            elif name == "define":
                self._define(rest, where)
            elif name == "include":
                if rest.startswith('"'):
                    self.run(self.include_dir / rest.strip('"'))
                elif not rest.startswith("<"):  # <stddef.h>, <stdint.h>: cffi knows their types
                    raise ValueError(f"{where}: cannot read #include {rest}")
            else:
                raise ValueError(f"{where}: unsupported directive #{name} {rest}")
        if stack:
            raise ValueError(f"{path}: #if without #endif")

    def _expand(self, match: "re.Match[str]") -> str:
        name = match.group()
        if name in self.integers:
            return str(self.integers[name])
        return self.texts.get(name, name)

    def _define(self, rest: str, where: str) -> None:
        match = _DEFINE.match(rest)
        if match is None or match.group(2):
            raise ValueError(f"{where}: cannot declare the macro #define {rest} (function-like?)")
        name, value = match.group(1), match.group(3)
        number = _integer(value, self.integers) if value else None
        if number is None:
            self.texts[name] = _IDENTIFIER.sub(self._expand, value)
        else:
            self.integers[name] = number
            self.lines.append(f"#define {name} {number}")

    def _condition(self, name: str, rest: str, where: str) -> bool:
        if name == "ifdef":
            return rest in self.integers or rest in self.texts
        if name == "ifndef":
            return not (rest in self.integers or rest in self.texts)
        defined = {**self.integers, **dict.fromkeys(self.texts, 1)}
        expr = re.sub(r"\bdefined\s*(\(\s*(\w+)\s*\)|(\w+))",
                      lambda m: "1" if (m.group(2) or m.group(3)) in defined else "0", rest)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        # Identifiers left are undefined macros: 0, as in C.
        value = _integer(_IDENTIFIER.sub(lambda m: m.group() if m.group() in ("and", "or", "not")
                                         or m.group() in self.integers else "0", expr), self.integers)
        if value is None:
            raise ValueError(f"{where}: cannot evaluate #{name} {rest}")
        return bool(value)


def _integer(expr: str, integers: Dict[str, int]) -> Optional[int]:
    """The value of a C integer constant expression of literals and integer macros, or None
    when ``expr`` is not one (a brace initializer, an attribute, ...)."""
    try:
        tree = ast.parse(_INT_LITERAL.sub(lambda m: str(int(m.group(1), 0)), expr.strip()), mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in integers:
            return integers[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert, ast.Not)):
            operand = value(node.operand)
            return {ast.USub: -operand, ast.UAdd: operand, ast.Invert: ~operand,
                    ast.Not: int(not operand)}[type(node.op)]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPERATORS:
            return _OPERATORS[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            values = [value(v) for v in node.values]
            return int(all(values) if isinstance(node.op, ast.And) else any(values))
        raise ValueError(ast.dump(node))

    try:
        return value(tree.body)
    except ValueError:
        return None


def declarations(header: Path, include_dir: Optional[Path] = None) -> str:
    """The cffi declarations of ``header`` (``include/sdm/phase1.h``); its quoted includes
    are read from ``include_dir`` (default: the folder above the header's, ``include/``).
    ValueError for a header construct this preprocessor does not handle."""
    header = Path(header)
    pre = _Preprocessor(Path(include_dir) if include_dir is not None else header.parent.parent)
    pre.run(header)
    body = "\n".join(pre.lines)
    return f"/* Generated from {header.name} by sdm_phase1/_c/declarations.py. */\n{body}\n"


if __name__ == "__main__":
    # python declarations.py HEADER OUTPUT (the build's step; see the module's docstring)
    if len(sys.argv) != 3:
        sys.exit("usage: declarations.py HEADER OUTPUT")
    Path(sys.argv[2]).write_text(declarations(Path(sys.argv[1])), encoding="utf-8")
