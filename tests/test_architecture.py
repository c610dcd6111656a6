"""The architecture page's import table is the code's: every import between rnnprof's parts is listed there, and
every listed import is made (docs/architecture.md, "Import rules")."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from test_layering import TOP_LEAVES, _module_graph

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"

def part(module: str) -> str:
    """The top-level part of rnnprof a module belongs to, as the page names it: its folder (``rnnprof.traces.kineto``
    -> ``traces``), a leaf module's own name (``rnnprof.errors`` -> ``errors``), or ``rnnprof`` for the package."""
    names = module.split(".")
    return names[1] if len(names) > 1 else "rnnprof"


def documented() -> dict[str, set[str]]:
    text = PAGE.read_text()
    table = text[text.index("<!-- import-table -->"):text.index("<!-- /import-table -->")]
    rules = {}
    for row in table.splitlines()[3:]:
        if not row.startswith("|"):
            continue
        parts_cell, imports_cell = [c.strip() for c in row.strip("|").split("|")]
        imports = {re.sub(r"\s*↑?\s*(\(.*\))?$", "", item).strip() for item in re.split(r",\s*(?![^()]*\))", imports_cell)}
        for name in re.findall(r"`([^`]+)`", parts_cell):
            rules[name] = imports
    return rules


def imported() -> dict[str, set[str]]:
    found = defaultdict(set)
    for a, b in _module_graph(any_depth=True).edges:
        if part(a) != part(b):
            found[part(a)].add(part(b))
    return dict(found)


def test_the_table_parses_into_parts_and_their_imports():
    rules = documented()
    assert rules["analyzers"] == {"events"}
    assert rules["models"] == {"errors", "limits"}
    assert rules["files"] == rules["limits"] == rules["frameworks"] == {"errors"}
    assert rules["rnnprof"] == {"version", "recording", "api"}


def test_the_page_names_the_top_levels_leaves():
    (line,) = [row for row in PAGE.read_text().splitlines() if row.rstrip().endswith("the leaf modules")]
    assert sorted(re.findall(r"\w+", line.replace("the leaf modules", ""))) == sorted(TOP_LEAVES)


def test_part_is_a_module_s_top_level_folder_or_leaf_module():
    assert part("rnnprof.traces.kineto") == part("rnnprof.traces") == "traces"
    assert part("rnnprof.analyzers.audit.registry") == "analyzers"
    assert part("rnnprof.errors") == "errors" and part("rnnprof") == "rnnprof"


def test_every_import_between_parts_is_in_the_architecture_page():
    rules = documented()
    undocumented = {p: sorted(targets - rules.get(p, set())) for p, targets in imported().items()}
    assert {p: t for p, t in undocumented.items() if t} == {}, (
        "imports the architecture page does not list (docs/architecture.md, Import rules): move the code "
        "below its users or, if the import is right, add it to the table with its reason")


def test_every_import_the_page_lists_is_made():
    code = imported()
    stale = {p: sorted(targets - code.get(p, set())) for p, targets in documented().items()}
    assert {p: t for p, t in stale.items() if t} == {}, "the architecture page lists imports the code no longer makes"


def test_a_planted_upward_import_is_caught(monkeypatch):
    graph = _module_graph(any_depth=True)
    graph.add_edge("rnnprof.analyzers.comm", "rnnprof.traces.kineto")
    monkeypatch.setattr(__import__(__name__), "_module_graph", lambda any_depth: graph)
    rules = documented()
    found = imported()
    assert "traces" in found["analyzers"] - rules["analyzers"]
