"""Where the package compares kind names outside format/kinds/ (a literal such as "boxes", or a
constant named like one, alone or in a tuple / list / set), read with ast."""

from __future__ import annotations

import ast
from pathlib import Path

from fastloader.format import kinds


def _names_a_kind(node: ast.expr, names: set[str], constants: set[str]) -> bool:
    """A kind's name as a literal or a constant, alone or in a tuple / list / set."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.Attribute):
        return node.attr in constants
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(e, names, constants) for e in node.elts)
    return False


def kind_comparisons(root: Path, skip: Path | None = None) -> list[str]:
    """'path:line: source' of every comparison (==, !=, in, is, <= ...) with a kind's name of
    the built-in kinds (constants: kinds.BOXES, spatial.BOXES = "boxes", ...)."""
    names = set(kinds.names())
    constants = {name.upper() for name in names}
    found = []
    for path in sorted(root.rglob("*.py")):
        if skip is not None and path.is_relative_to(skip):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Compare) and any(
                    _names_a_kind(o, names, constants) for o in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found
