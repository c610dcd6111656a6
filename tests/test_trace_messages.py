"""The trace formats' error texts live in ``traces.messages``, apart from the registry they describe: the
list of expected formats is the registry's, and no format module reaches back for the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import rnnprof.traces
from rnnprof.traces import messages
from rnnprof.traces.registry import REGISTRY

TRACES = Path(rnnprof.traces.__file__).parent


def test_expected_names_the_listed_formats_holding_events_in_registry_order():
    listed = [f.description for f in REGISTRY if f.events and f.listed]
    assert messages.EXPECTED == "one of: " + ", ".join(listed)


def test_no_module_of_traces_but_the_package_imports_the_registry():
    importers = []
    for path in sorted(TRACES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "rnnprof.traces.registry" or (
                    isinstance(node, ast.ImportFrom) and node.module == "rnnprof.traces"
                    and any(a.name == "registry" for a in node.names)):
                importers.append(path.name)
    assert sorted(set(importers)) == ["__init__.py", "graphs.py"]
