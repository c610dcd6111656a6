"""Layering: analyzers are pure (no TensorFlow, torch, training, recording or trace reading); models and the event table import no
run or capture code; commands stay thin."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import rnnprof

ANALYZERS = Path(rnnprof.__file__).parent / "analyzers"
# The parts that run, record or read training: nothing an analyzer may import.
PIPELINE_ABOVE = ("rnnprof.training", "rnnprof.recording", "rnnprof.rundir", "rnnprof.traces", "rnnprof.inputs",
                  "rnnprof.tensorflow_import", "rnnprof.torch_import")
FORBIDDEN = ("tensorflow", "torch", *PIPELINE_ABOVE)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in the module, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_scan_sees_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from rnnprof.tensorflow_import import import_tensorflow\n"
                     "    import torch.nn\n    import rnnprof.traces\n")
    assert [name for _, name in _imports(probe) if _forbidden(name)] == [
        "rnnprof.tensorflow_import", "rnnprof.tensorflow_import.import_tensorflow", "torch.nn", "rnnprof.traces"]


def test_no_analyzer_module_imports_tensorflow_torch_or_the_pipeline_above_it():
    modules = sorted(ANALYZERS.rglob("*.py"))
    assert len(modules) > 10
    offenders = [f"{path.relative_to(ANALYZERS)}:{line}: {name}"
                 for path in modules for line, name in _imports(path) if _forbidden(name)]
    assert offenders == []


def test_importing_every_analyzer_loads_no_tensorflow_or_torch():
    code = ("import importlib, pkgutil, sys, rnnprof.analyzers as a\n"
            "names = [m.name for m in pkgutil.walk_packages(a.__path__, 'rnnprof.analyzers.')]\n"
            "[importlib.import_module(n) for n in names]\n"
            "print(len(names), sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'torch')\n"
            "                         or m.startswith(%r)))\n" % (PIPELINE_ABOVE,))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, loaded = done.stdout.split(" ", 1)
    assert int(count) > 10 and loaded.strip() == "[]"


PACKAGE = Path(rnnprof.__file__).parent


def _offenders(paths, forbidden: tuple[str, ...], root: Path) -> list[str]:
    def bad(name: str) -> bool:
        return any(name == f or name.startswith(f + ".") for f in forbidden)
    return [f"{path.relative_to(root)}:{line}: {name}" for path in paths for line, name in _imports(path) if bad(name)]


def test_models_import_no_run_or_capture_code():
    modules = sorted((PACKAGE / "models").rglob("*.py"))
    assert len(modules) >= 8
    assert _offenders(modules, (*PIPELINE_ABOVE, "rnnprof.commands", "rnnprof.reports"), PACKAGE) == []


def test_the_event_table_and_names_import_nothing_of_rnnprof_but_errors():
    paths = [PACKAGE / "events.py", PACKAGE / "names.py"]
    imported = [name for path in paths for _, name in _imports(path) if name.startswith("rnnprof")]
    assert all(name.startswith("rnnprof.errors") for name in imported), imported


def test_commands_hold_no_loops_over_devices_and_no_format_or_error_text_branching():
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        text = path.read_text()
        assert ".problem" not in text, f"{path.name} branches on an error's text"
        assert "detect_format" not in text, f"{path.name} decides formats itself"
        assert not re.search(r"for \w+ in [\w.()]*devices\b", text), f"{path.name} loops over devices"


def _module_graph(any_depth: bool):
    """rnnprof's modules and the imports between them (``from pkg import submodule`` is an import of the
    submodule; a parent package, always imported first, is no edge unless a name defined in it is imported)."""
    import networkx as nx

    root = Path(rnnprof.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = nx.DiGraph()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = ast.walk(tree) if any_depth else _top_level(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in nodes:
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in modules] + ([base] if any(s not in modules for s in subs) else [])
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def _top_level(tree):
    """The statements run when the module is imported (``if TYPE_CHECKING:`` blocks left out)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        yield from (ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node])


def test_no_import_circles_at_module_level():
    import networkx as nx

    graph = _module_graph(any_depth=False)
    assert graph.number_of_edges() > 100, "the scan sees rnnprof's imports"
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_the_circle_scan_finds_a_planted_circle(tmp_path, monkeypatch):
    import networkx as nx

    graph = _module_graph(any_depth=False)
    graph.add_edge("rnnprof.events", "rnnprof.analyzers.comm")  # comm imports events at module level
    assert any(len(c) > 1 for c in nx.strongly_connected_components(graph))


# -- short functions -----------------------------------------------------------------------------------------

MAX_LINES = 50
# Functions allowed over MAX_LINES for good ("path::qualified name"); each docstring says why ("Long because").
LONG_ALLOWED: frozenset[str] = frozenset()


def _functions(root: Path):
    """(``path::qualified.name``, node) of every function under ``root``'s ``rnnprof/``, nested ones too."""
    def visit(node, prefix, path):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                if not isinstance(child, ast.ClassDef):
                    yield f"{path}::{name}", child
                yield from visit(child, name, path)
            else:
                yield from visit(child, prefix, path)

    for path in sorted((root / "rnnprof").rglob("*.py")):
        yield from visit(ast.parse(path.read_text(), str(path)), "", path.relative_to(root).as_posix())


def _long_functions(root: Path) -> dict[str, ast.AST]:
    return {key: node for key, node in _functions(root) if node.end_lineno - node.lineno + 1 > MAX_LINES}


def test_functions_are_at_most_50_lines_but_a_few_that_say_why():
    assert len(LONG_ALLOWED) <= 3
    found = _long_functions(PACKAGE.parent)
    assert len(list(_functions(PACKAGE.parent))) > 500, "the scan sees rnnprof's functions"
    assert sorted(set(found) - LONG_ALLOWED) == []
    unexplained = [key for key in LONG_ALLOWED & set(found)
                   if not re.search(r"(^|[.!?]\s+)Long because", ast.get_docstring(found[key]) or "")]
    assert unexplained == [], "each allowed long function's docstring has a sentence starting 'Long because'"
    assert sorted(LONG_ALLOWED - set(found)) == [], "no longer long: take it off the list"


def test_the_length_scan_finds_a_long_method_and_a_long_nested_function(tmp_path):
    body, nested = ("".join(f"{indent}x{k} = {k}\n" for k in range(MAX_LINES - 1)) for indent in ("    ", "        "))
    (tmp_path / "rnnprof").mkdir()
    (tmp_path / "rnnprof" / "probe.py").write_text(
        f"def fits():\n{body}\n"
        f"class C:\n    def long(self):\n{nested}        return 1\n\n"
        f"def outer():\n    def inner():\n{nested}        return 1\n    return inner\n")
    assert sorted(_long_functions(tmp_path)) == ["rnnprof/probe.py::C.long", "rnnprof/probe.py::outer",
                                                 "rnnprof/probe.py::outer.inner"]


# -- one meaning per public name -----------------------------------------------------------------------------

# The parts of a plug-in interface: every module of the package defines them, with one meaning.
INTERFACES = {
    "add_arguments": "rnnprof/commands/", "run": "rnnprof/commands/",
    "check": "rnnprof/analyzers/",  # a rule's check, in placement/ and audit/
    "sniff": "rnnprof/traces/", "parse": "rnnprof/traces/", "events": "rnnprof/traces/",
    "load": "rnnprof/traces/", "load_doc": "rnnprof/traces/",
    "graph_defs": "rnnprof/traces/", "sniff_graphs_only": "rnnprof/traces/",
    "render_table": "rnnprof/reports/", "to_document": "rnnprof/reports/",
    "main": "rnnprof/",  # a module's entry point when run as a program
}


def _public_definitions(root: Path) -> dict[str, list[str]]:
    """Public top-level names of every module under ``root``'s ``rnnprof/`` defined there: functions, classes,
    and aliases of another name of the module (``name = other``); by name, the modules defining it."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "rnnprof").rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in names:
                if not name.startswith("_"):
                    found.setdefault(name, []).append(path.relative_to(root).as_posix())
    return found


def _names_with_two_meanings(root: Path) -> dict[str, list[str]]:
    return {name: paths for name, paths in _public_definitions(root).items()
            if len(paths) > 1 and not all(p.startswith(INTERFACES.get(name, "\0")) for p in paths)}


def test_each_public_name_is_defined_in_one_module():
    assert len(_public_definitions(PACKAGE.parent)) > 300, "the scan sees rnnprof's names"
    found = _names_with_two_meanings(PACKAGE.parent)
    assert found == {}


def test_the_name_scan_finds_a_name_defined_twice_and_an_interface_name_out_of_its_package(tmp_path):
    for path, text in (("rnnprof/a.py", "def merge(): pass\nclass Step: pass\n"),
                       ("rnnprof/b.py", "def merge(): pass\nStep = int\ndef run(): pass\n"),
                       ("rnnprof/commands/x.py", "def run(): pass\ndef _merge(): pass\n"),
                       ("rnnprof/commands/y.py", "def run(): pass\n")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert _names_with_two_meanings(tmp_path) == {
        "merge": ["rnnprof/a.py", "rnnprof/b.py"], "Step": ["rnnprof/a.py", "rnnprof/b.py"],
        "run": ["rnnprof/b.py", "rnnprof/commands/x.py", "rnnprof/commands/y.py"]}
