"""Layering: the top level holds leaves and the command line only; analyzers are pure (no TensorFlow, torch,
training, recording or trace reading); models and the event table import no run or capture code; commands stay
thin; no import circle at any depth; imports of rnnprof's own modules at the top of a module but for a listed few;
no private name taken from another module; short functions and modules; one meaning per public name."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import rnnprof

ANALYZERS = Path(rnnprof.__file__).parent / "analyzers"
# The parts that run, record or read training: nothing an analyzer may import.
PIPELINE_ABOVE = ("rnnprof.training", "rnnprof.recording", "rnnprof.rundir", "rnnprof.traces", "rnnprof.inputs",
                  "rnnprof.frameworks.tensorflow", "rnnprof.frameworks.torch")
FORBIDDEN = ("tensorflow", "torch", *PIPELINE_ABOVE)


@functools.lru_cache(maxsize=None)
def _parsed(path: Path, stamp: tuple[int, int]) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _tree(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once for the tests of this module (read only)."""
    status = path.stat()
    return _parsed(path, (status.st_mtime_ns, status.st_size))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in the module, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(_tree(path)):
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
    probe.write_text("def f():\n    from rnnprof.frameworks.tensorflow import import_tensorflow\n"
                     "    import torch.nn\n    import rnnprof.traces\n")
    assert [name for _, name in _imports(probe) if _forbidden(name)] == [
        "rnnprof.frameworks.tensorflow", "rnnprof.frameworks.tensorflow.import_tensorflow", "torch.nn",
        "rnnprof.traces"]


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
    paths = sorted((PACKAGE / "events").glob("*.py"))
    assert len(paths) >= 4 and PACKAGE / "events" / "names.py" in paths
    imported = [name for path in paths for _, name in _imports(path) if name.startswith("rnnprof")]
    assert all(name.startswith(("rnnprof.errors", "rnnprof.events.")) for name in imported), imported


# -- the top level: leaves and the command line --------------------------------------------------------------

# The modules at rnnprof's top level: the leaves every layer may import (they import nothing of rnnprof but each
# other), and the command line. Everything else lives in the folder of its layer (docs/architecture.md).
TOP_LEAVES = ("errors", "files", "limits", "paths", "version")
TOP_ENTRY = ("__init__", "__main__", "cli")


def _top_level_misfits(root: Path) -> list[str]:
    """What breaks the rule under ``root``'s ``rnnprof/``: a top-level module neither a leaf nor the command line,
    and an import of a leaf that is not another leaf."""
    package = root / "rnnprof"
    found = [f"rnnprof/{path.name}: not a leaf ({', '.join(TOP_LEAVES)}) nor the command line"
             for path in sorted(package.glob("*.py")) if path.stem not in TOP_LEAVES + TOP_ENTRY]
    leaves = tuple(f"rnnprof.{name}" for name in TOP_LEAVES)
    for name in TOP_LEAVES:
        path = package / f"{name}.py"
        if path.exists():
            found += [f"rnnprof/{name}.py:{line}: imports {target}" for line, target in _imports(path)
                      if target.split(".")[0] == "rnnprof" and not target.startswith(leaves)]
    return found


def test_the_top_level_is_leaves_and_the_command_line():
    assert all((PACKAGE / f"{name}.py").exists() for name in TOP_LEAVES + TOP_ENTRY)
    assert _top_level_misfits(PACKAGE.parent) == [], (
        "a module at rnnprof's top level is a leaf or the command line: put it in the folder of its layer")


def test_the_top_level_scan_finds_a_planted_module_and_a_leaf_importing_a_layer(tmp_path):
    for path, text in (("rnnprof/__init__.py", ""), ("rnnprof/cli.py", "from rnnprof.commands import comm\n"),
                       ("rnnprof/errors.py", ""), ("rnnprof/limits.py", "from rnnprof.errors import UsageError\n"),
                       ("rnnprof/files.py", "def f():\n    from rnnprof.traces import load_events\n"),
                       ("rnnprof/whole_job.py", ""), ("rnnprof/traces/__init__.py", "")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert _top_level_misfits(tmp_path) == [
        "rnnprof/whole_job.py: not a leaf (errors, files, limits, paths, version) nor the command line",
        "rnnprof/files.py:2: imports rnnprof.traces", "rnnprof/files.py:2: imports rnnprof.traces.load_events"]


def test_commands_hold_no_loops_over_devices_and_no_format_or_error_text_branching():
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        text = path.read_text()
        assert ".problem" not in text, f"{path.name} branches on an error's text"
        assert "detect_format" not in text, f"{path.name} decides formats itself"
        assert not re.search(r"for \w+ in [\w.()]*devices\b", text), f"{path.name} loops over devices"


def _modules(root: Path) -> dict[str, Path]:
    """rnnprof's modules under ``root`` (the folder holding ``rnnprof/``) by dotted name."""
    modules = {}
    for path in (root / "rnnprof").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _targets(node, name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """The rnnprof modules an import statement of module ``name`` imports (``from pkg import submodule`` is an
    import of the submodule; a parent package, always imported first, is none unless a name defined in it is
    imported)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
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
    found = []
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.append(target)
    return found


def _module_graph(any_depth: bool):
    """rnnprof's modules and the imports between them (see ``_targets``)."""
    import networkx as nx

    modules = _modules(PACKAGE.parent)
    graph = nx.DiGraph()
    for name, path in modules.items():
        tree = _tree(path)
        for node in ast.walk(tree) if any_depth else _top_level(tree):
            for target in _targets(node, name, path, modules):
                graph.add_edge(name, target)
    return graph


def _top_level(tree):
    """The statements run when the module is imported (``if TYPE_CHECKING:`` blocks left out)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        yield from (ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node])


def _circles(graph) -> list[list[str]]:
    import networkx as nx

    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_circles_at_any_depth():
    """No circle of files at all, counting the imports inside functions: a circle hidden in a function is
    still two modules that cannot be understood apart."""
    graph = _module_graph(any_depth=True)
    assert graph.number_of_edges() > 100, "the scan sees rnnprof's imports"
    assert _circles(graph) == []


def test_the_circle_scan_finds_a_planted_circle(tmp_path):
    for path, text in (("rnnprof/__init__.py", ""), ("rnnprof/a.py", "import rnnprof.b\n"),
                       ("rnnprof/b.py", "def f():\n    from rnnprof import a\n")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    modules = _modules(tmp_path)
    import networkx as nx

    graph = nx.DiGraph([(name, target) for name, path in modules.items()
                        for node in ast.walk(_tree(path))
                        for target in _targets(node, name, path, modules)])
    assert _circles(graph) == [["rnnprof.a", "rnnprof.b"]]


# -- imports inside functions --------------------------------------------------------------------------------

# Why an import of rnnprof's own may stay inside a function (every other one is at the module's top):
FRAMEWORK = "the module imports TensorFlow or torch at its top: loaded only when a workload is built"
LAZY_API = ("rnnprof's capture and analysis APIs, imported when first used so that `import rnnprof` stays light")
# (cli imports the chosen command by name, through importlib, so no statement needs listing for it.)
IN_FUNCTION_ALLOWED: dict[tuple[str, str], str] = {
    ("rnnprof", "rnnprof.recording.api"): LAZY_API,
    ("rnnprof", "rnnprof.api"): LAZY_API,
    ("rnnprof.models", "rnnprof.models.tensorflow.nmt"): FRAMEWORK,
    ("rnnprof.models", "rnnprof.models.tensorflow.resnet"): FRAMEWORK,
    ("rnnprof.models", "rnnprof.models.tensorflow.rnnlm"): FRAMEWORK,
    ("rnnprof.recording.torch_workload", "rnnprof.models.torch.rnnlm"): FRAMEWORK,
    ("rnnprof.training.torch_ddp", "rnnprof.models.torch.rnnlm"): FRAMEWORK,
    ("rnnprof.training.torch_training", "rnnprof.models.torch.rnnlm"): FRAMEWORK,
    ("rnnprof.training.torch_training", "rnnprof.models.torch.transformer"): FRAMEWORK,
}


def _in_function_imports(root: Path) -> dict[tuple[str, str], list[int]]:
    """(module, imported rnnprof module) of every import statement inside a function, with its lines."""
    modules = _modules(root)
    found: dict[tuple[str, str], list[int]] = {}
    for name, path in modules.items():
        tree = _tree(path)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                for target in _targets(node, name, path, modules):
                    lines = found.setdefault((name, target), [])
                    if node.lineno not in lines:
                        lines.append(node.lineno)
    return found


def test_imports_of_rnnprof_inside_functions_are_only_the_allowed_ones():
    found = _in_function_imports(PACKAGE.parent)
    assert sorted(set(found) - set(IN_FUNCTION_ALLOWED)) == [], (
        "move the import to the module's top; if it must stay inside (a module that imports TensorFlow or "
        "torch at its top), list it in IN_FUNCTION_ALLOWED with its reason")
    stale = sorted(set(IN_FUNCTION_ALLOWED) - set(found))
    assert stale == [], "no longer inside a function: take it off the list"
    assert set(IN_FUNCTION_ALLOWED.values()) <= {FRAMEWORK, LAZY_API}


def test_the_in_function_scan_finds_a_planted_import(tmp_path):
    for path, text in (("rnnprof/__init__.py", ""), ("rnnprof/names.py", ""),
                       ("rnnprof/a.py", "import rnnprof.names\n\nclass C:\n    def m(self):\n"
                                        "        from rnnprof import names\n        from . import names as n\n")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert _in_function_imports(tmp_path) == {("rnnprof.a", "rnnprof.names"): [5, 6]}


# -- private names stay in their module ----------------------------------------------------------------------

def _private_imports(root: Path) -> list[str]:
    """``from X import _y`` of a module of rnnprof, ``from pkg import _module`` and ``import pkg._module``: a
    name starting with one underscore (dunders aside) taken from another rnnprof module, at any depth."""
    modules = _modules(root)

    def private(part: str) -> bool:
        return part.startswith("_") and not part.startswith("__")

    found = []
    for name, path in modules.items():
        for node in ast.walk(_tree(path)):
            if not _targets(node, name, path, modules):
                continue
            if isinstance(node, ast.ImportFrom):
                dotted = [*(node.module or "").split("."), *(a.name for a in node.names)]
            else:
                dotted = [part for a in node.names for part in a.name.split(".")]
            found += [f"{path.relative_to(root).as_posix()}:{node.lineno}: {part}" for part in dotted if private(part)]
    return found


def test_no_private_name_is_imported_from_another_module():
    assert _private_imports(PACKAGE.parent) == []


def test_the_private_name_scan_finds_planted_ones(tmp_path):
    for path, text in (("rnnprof/__init__.py", ""), ("rnnprof/_shared.py", "_x = 1\n"),
                       ("rnnprof/a.py", "from rnnprof._shared import y\nfrom rnnprof import _shared\n"
                                        "from rnnprof.version import __version__\n"
                                        "def f():\n    from rnnprof._shared import _x\n"),
                       ("rnnprof/version.py", "__version__ = '0'\n")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert _private_imports(tmp_path) == ["rnnprof/a.py:1: _shared", "rnnprof/a.py:2: _shared",
                                          "rnnprof/a.py:5: _shared", "rnnprof/a.py:5: _x"]


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
        yield from visit(_tree(path), "", path.relative_to(root).as_posix())


def _too_long(functions) -> dict[str, ast.AST]:
    """Those of ``functions`` (``_functions``' pairs) over ``MAX_LINES`` lines."""
    return {key: node for key, node in functions if node.end_lineno - node.lineno + 1 > MAX_LINES}


def _long_functions(root: Path) -> dict[str, ast.AST]:
    return _too_long(_functions(root))


def test_functions_are_at_most_50_lines_but_a_few_that_say_why():
    assert len(LONG_ALLOWED) <= 3
    functions = list(_functions(PACKAGE.parent))
    found = _too_long(functions)
    assert len(functions) > 500, "the scan sees rnnprof's functions"
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


# -- short modules -------------------------------------------------------------------------------------------

MAX_MODULE_LINES = 600


def _long_modules(root: Path) -> dict[str, int]:
    """Modules under ``root``'s ``rnnprof/`` over ``MAX_MODULE_LINES`` lines, with their line counts."""
    counts = {path.relative_to(root).as_posix(): len(path.read_text().splitlines())
              for path in sorted((root / "rnnprof").rglob("*.py"))}
    return {path: n for path, n in counts.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_600_lines():
    """A module that grows past 600 lines holds several concerns: split it into a package, by concern."""
    assert len(list(PACKAGE.rglob("*.py"))) > 100, "the scan sees rnnprof's modules"
    assert _long_modules(PACKAGE.parent) == {}


def test_the_module_length_scan_finds_a_planted_long_module(tmp_path):
    (tmp_path / "rnnprof" / "sub").mkdir(parents=True)
    (tmp_path / "rnnprof" / "fits.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "rnnprof" / "sub" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path) == {"rnnprof/sub/long.py": MAX_MODULE_LINES + 1}


# -- one meaning per public name -----------------------------------------------------------------------------

# The parts of a plug-in interface: every module of the package defines them, with one meaning.
INTERFACES = {
    "add_arguments": "rnnprof/commands/", "run": "rnnprof/commands/",
    "analyze": "rnnprof/commands/",  # a command's analysis, returning the result it renders (rnnprof.open calls it)
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
        for node in _tree(path).body:
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
