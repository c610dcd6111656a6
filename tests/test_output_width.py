"""What a person reads at 80 columns: README's example of each command on a trace in tests/data prints no line
wider than the terminal, breaks no figure across lines, and critical-path and diff fit about a screen unless
asked for their long lists (--links, --all); a command page that opens with a command on tests/data shows that
command's real output."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from rnnprof.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCREEN = 70  # lines: critical-path and diff without their long lists
LONG_LISTS = {"critical-path": "--links", "diff": "--all"}
NUMBER = re.compile(r"^[+-]?(\d[\d,]*)?\.?\d+[%x]?$")


def readme_examples() -> list[list[str]]:
    """The commands of README's "One example per command" block that read only files in tests/data."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## One example per command", 1)[1].split("```", 2)[1]
    examples = []
    for line in block.splitlines():
        argv = line.split()
        if argv[:1] != ["rnnprof"]:
            continue
        paths = [a for a in argv[2:] if "/" in a or a.endswith((".gz", ".json"))]  # not a flag's value ("0.5")
        if paths and all(p.startswith("tests/data/") for p in paths) and "-o" not in argv:
            examples.append(argv[1:])
    return examples


EXAMPLES = readme_examples()


@pytest.fixture(autouse=True)
def in_the_checkout(monkeypatch):
    """The examples run as README writes them, from the checkout's root."""
    monkeypatch.chdir(ROOT)


def printed(argv: list[str], width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    code = main(argv, console=console)
    assert code in (0, 1) if argv[0] == "audit" else code == 0  # audit exits 1 on a finding at error
    return out.getvalue()


def numbers(text: str) -> set[str]:
    """The words of ``text`` that are numbers ("5,515.196", "-0.4", "18.4%", "1.10x")."""
    words = (w.strip("(),;:") for w in text.split())
    return {w for w in words if NUMBER.match(w)}


def test_readme_has_an_example_of_each_command_on_the_test_traces():
    assert {argv[0] for argv in EXAMPLES} >= {"count-ops", "comm", "critical-path", "roofline", "audit", "diff"}


@pytest.mark.parametrize("argv", EXAMPLES, ids=[a[0] for a in EXAMPLES])
def test_at_80_columns_no_figure_is_broken_and_no_line_is_wider(argv):
    narrow, wide = printed(argv, 80), printed(argv, 300)
    assert max(cell_len(line) for line in narrow.splitlines()) <= 80
    # a number cut in two shows as words the wide output does not have ("5,515" and ".196")
    assert numbers(narrow) - numbers(wide) == set()
    if argv[0] in LONG_LISTS:
        assert len(narrow.splitlines()) <= SCREEN
        full = printed([*argv, LONG_LISTS[argv[0]]], 80)
        assert len(full.splitlines()) > len(narrow.splitlines())
        assert numbers(full) - numbers(printed([*argv, LONG_LISTS[argv[0]]], 300)) == set()


def test_roofline_at_80_columns_shows_each_family_and_its_gflop_whole():
    argv = next(a for a in EXAMPLES if a[0] == "roofline")
    document = json.loads(printed([*argv, "--json"], 10_000))
    text = printed(argv, 80)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    families = document["ranks"][0]["families"]
    assert families
    for name, family in families.items():
        assert name in rows, name  # "Elementwise", not "Elemen" and "twise"
        assert f"{family['flops'] / 1e9:,.3f}" in rows[name]


def test_a_wide_figure_stays_whole_in_a_narrow_table():
    from rnnprof.reports.fit import Column, fit_table

    out = io.StringIO()
    console = Console(file=out, width=40, color_system=None)
    rows = [["Normalization_fwd", "5,515.196", "0.4327", "18.4%"], ["Elementwise", "0.044", "0.2061", "51.5%"]]
    console.print(fit_table(40, [Column("family", "label"), Column("GFLOP"), Column("GB", drop=1),
                                 Column("of roofline")], rows, title="per op family"))
    text = out.getvalue()
    assert "5,515.196" in text and "Normalization_fwd" in text and "Elementwise" in text
    assert "0.4327" not in text and "left out at this width: GB" in text
    assert max(cell_len(line) for line in text.splitlines()) <= 40


def page_openings() -> list[tuple[str, list[str], list[str]]]:
    """(page, argv, lines shown) of each command page whose opening example reads only files in tests/data."""
    found = []
    for page in sorted((ROOT / "docs" / "commands").glob("*.md")):
        body = page.read_text().split("```console\n", 1)
        if len(body) < 2:
            continue
        command, *shown = body[1].split("\n```", 1)[0].splitlines()
        argv = command.removeprefix("$ rnnprof ").split()
        paths = [a for a in argv[1:] if "/" in a or a.endswith((".gz", ".json"))]
        if paths and all(p.startswith("tests/data/") for p in paths) and "-o" not in argv:
            found.append((page.stem, argv, shown))
    return found


OPENINGS = page_openings()


def test_the_pages_opening_on_the_test_traces_are_found():
    assert {page for page, _, _ in OPENINGS} >= {"audit", "comm", "count-ops", "critical-path", "diff", "roofline"}


@pytest.mark.parametrize("page, argv, shown", OPENINGS, ids=[page for page, _, _ in OPENINGS])
def test_a_command_page_opens_with_the_commands_real_output(page, argv, shown, capsys):
    """Every line the page shows is in the output at 80 columns, in order ("[...]" marks lines left out; a
    note printed on stderr may stand anywhere)."""
    out = [line.rstrip() for line in printed(argv, 80).splitlines()]
    err = {line.rstrip() for line in capsys.readouterr().err.splitlines()}
    at = 0
    for line in (line.rstrip() for line in shown if line.strip() != "[...]"):
        if line in err:
            continue
        assert line in out[at:], f"docs/commands/{page}.md shows a line its command does not print: {line!r}"
        at = out.index(line, at) + 1
