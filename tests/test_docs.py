"""The documentation site builds with warnings as errors, and its CLI reference comes from the parsers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rnnprof.cli import COMMANDS

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def _text(html: Path) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.read_text()).split())


def test_the_cli_reference_lists_every_command_and_its_flags(site):
    text = _text(site / "cli.html").replace(" ", "")  # the usage lines are tokenised (`-- drop - last`)
    for name in COMMANDS:
        assert f"rnnprof{name}[" in text, name
    # flags read from the parsers, not written by hand
    assert "--drop-last" in text and "--timeout" in text and "--max-input-size" in text


def test_every_page_is_in_the_site(site):
    pages = {p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md") if "_build" not in p.parts}
    built = {p.relative_to(site).with_suffix("") for p in site.rglob("*.html")}
    assert pages <= built, pages - built


MODULE_DOCSTRING_MAX_LINES = 15


def test_module_docstrings_are_short():
    """A module's docstring says what it is in a few lines; specifications live in docs/."""
    import ast

    package = Path(__file__).resolve().parents[1] / "rnnprof"
    long = {}
    for path in sorted(package.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if docstring and len(docstring.splitlines()) > MODULE_DOCSTRING_MAX_LINES:
            long[str(path.relative_to(package.parent))] = len(docstring.splitlines())
    assert not long, f"module docstrings over {MODULE_DOCSTRING_MAX_LINES} lines: {long}"


@pytest.mark.parametrize("command", sorted(name for name in COMMANDS if name != "worker"))
def test_every_command_page_opens_with_an_example(command):
    """After its title a command page shows the command run (a console block), before any definition."""
    text = (DOCS / "commands" / f"{command}.md").read_text()
    body = text.split("\n", 1)[1].lstrip("\n")
    assert body.startswith(f"```console\n$ rnnprof {command} "), body[:200]
