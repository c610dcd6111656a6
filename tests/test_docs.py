"""The documentation site builds with warnings as errors, and its CLI reference comes from the parsers; command pages
keep their shape; README's command table is the CLI's, and its examples name files a clone has and parse."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rnnprof.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


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


PAGES = sorted(page.stem for page in (DOCS / "commands").glob("*.md"))
# What a command page holds after its opening, in this order (its other sections stand between them).
SECTIONS = ("## How to read the output", "## How right it is")


def test_every_command_but_worker_has_a_page_and_every_page_a_command():
    assert set(PAGES) == set(COMMANDS) - {"worker"}


@pytest.mark.parametrize("command", PAGES)
def test_every_command_page_opens_with_its_question_and_an_example(command):
    """After its title, the question the command answers (one paragraph), then the command run (a console block),
    before any definition."""
    text = (DOCS / "commands" / f"{command}.md").read_text()
    assert text.startswith(f"# rnnprof {command}\n\n"), text[:100]
    question, _, rest = text.split("\n\n", 1)[1].partition("\n\n")
    assert question.endswith("?") and "```" not in question, question
    assert rest.startswith(f"```console\n$ rnnprof {command} "), rest[:200]


@pytest.mark.parametrize("command", PAGES)
def test_every_command_page_says_how_to_read_its_output_and_how_right_it_is(command):
    """Then how to read the output, the definitions, and last but for a JSON reference, a short table of how
    right the figures are, each row naming where it is made (a test or a benchmark)."""
    text = (DOCS / "commands" / f"{command}.md").read_text()
    at = [text.find(f"\n{heading}\n") for heading in SECTIONS]
    assert all(i >= 0 for i in at) and at == sorted(at), dict(zip(SECTIONS, at))
    right = text[at[-1]:].split("\n## ", 2)[1]
    table = right.split("\n\n")[1].splitlines()  # the first paragraph after the heading
    assert table[0].startswith("| check |") and set(table[1]) <= set("|-"), table[:2]
    rows = table[2:]
    assert rows and all(row.startswith("| ") for row in rows), "no table under How right it is"
    for row in rows:
        assert "tests/" in row or "benchmarks" in row, f"{command}: a row that names no test or benchmark: {row}"


def _options(command: str) -> set[str]:
    """The option strings the command's own parser takes, as ``rnnprof.cli`` builds it."""
    (choices,) = [a.choices for a in build_parser(command)._subparsers._group_actions]
    return {option for action in choices[command]._actions for option in action.option_strings}


@pytest.mark.parametrize("command", PAGES)
def test_every_flag_a_pages_command_lines_give_is_the_commands(command):
    """A page's `rnnprof COMMAND ...` lines (its usage, its examples) give only flags the command's parser takes;
    what follows ` -- ` is the user's own command."""
    text = (DOCS / "commands" / f"{command}.md").read_text()
    lines = [line.strip().removeprefix("$ ") for block in text.split("```")[1::2]
             for line in block.replace("\\\n", " ").splitlines()]
    given = {flag for line in lines if line.startswith(f"rnnprof {command} ")
             for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", line.split(" -- ")[0])}
    assert given and given <= _options(command), given - _options(command)


DIARY = re.compile(r"\b(second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth) "
                   r"(run|round)\b|load average", re.I)


@pytest.mark.parametrize("command", PAGES)
def test_a_command_page_keeps_no_run_diary(command):
    """Measurements are the benchmarks' (docs/benchmarks.md): a page names no run by its number and no machine's
    load."""
    text = (DOCS / "commands" / f"{command}.md").read_text()
    assert not DIARY.findall(text), DIARY.findall(text)


def test_benchmarks_page_keeps_the_latest_result_only():
    """One latest table per benchmark: no column or paragraph per earlier run."""
    text = (DOCS / "benchmarks.md").read_text()
    assert not re.findall(r"\b(second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
                          r"thirteenth) (run|round)\b", text, re.I)
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("[!_]*.py")}
    named = set(re.findall(r"`(\w+)\.py`", text)) | set(re.findall(r"benchmarks/(\w+)\.py", text))
    assert scripts <= named, scripts - named


# -- README ---------------------------------------------------------------------------------------------------

def _section(heading: str) -> str:
    return README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


TABLE_ROW = re.compile(r"^\| \[`rnnprof ([\w-]+)`\]\(([^)#]+)(#[^)]*)?\) \| (.*) \|$")


def readme_table() -> dict[str, tuple[str, str]]:
    """README's command table: each command's linked file and its description."""
    rows = [TABLE_ROW.match(line) for line in _section("What it answers").splitlines() if line.startswith("| [")]
    assert all(rows), "a row of README's command table that links no `rnnprof NAME`"
    return {row.group(1): (row.group(2), row.group(4)) for row in rows}


def test_the_readme_table_lists_exactly_the_commands_the_cli_registers():
    assert sorted(readme_table()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_readme_row_links_its_page(command):
    """Each row links an existing file: the command's page, or, for a command without one, the page that covers
    it, the row saying why it has none."""
    link, text = readme_table()[command]
    assert (ROOT / link).is_file(), link
    if (DOCS / "commands" / f"{command}.md").is_file():
        assert link == f"docs/commands/{command}.md", link
    else:
        assert "No page of its own:" in text, text


def test_the_readme_documentation_list_links_every_command_page():
    links = set(re.findall(r"\]\((docs/commands/[\w-]+\.md)\)", _section("Documentation")))
    assert links == {f"docs/commands/{page}.md" for page in PAGES}


def readme_examples() -> list[list[str]]:
    """Every `rnnprof ...` line of README's code blocks, as words (a line ending in a backslash goes on)."""
    examples = []
    for block in README.split("```")[1::2]:
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("rnnprof "):
                examples.append(shlex.split(line)[1:])
    return examples


EXAMPLES = readme_examples()
OUTPUTS = ("--out", "-o")  # flags whose value a command writes


def _paths(argv: list[str]) -> tuple[list[str], list[str]]:
    """(what ``argv`` reads, what it writes): the words that name a file or folder."""
    reads, writes = [], []
    for before, word in zip(["", *argv], argv):
        if before in OUTPUTS:
            writes.append(word)
        elif "/" in word or word.endswith((".py", ".json", ".gz", ".html")):
            if not word.startswith("-"):
                reads.append(word)
    return reads, writes


def test_the_readme_has_an_example_of_every_command():
    block = _section("One example per command")
    assert {argv[0] for argv in readme_examples() if f"rnnprof {shlex.join(argv)}" in block} == set(COMMANDS)


def test_every_readme_example_names_only_files_a_clone_has():
    """A file an example reads is in the repository, or made by an example above it (a run directory)."""
    made: list[str] = []
    for argv in EXAMPLES:
        reads, writes = _paths(argv)
        for path in reads:
            assert (ROOT / path).exists() or any(path == out or path.startswith(f"{out}/") for out in made), (
                f"rnnprof {shlex.join(argv)}: {path} is not in a clone")
        made += writes


@pytest.mark.parametrize("argv", EXAMPLES, ids=[" ".join(a[:2]) for a in EXAMPLES])
def test_every_readme_example_parses(argv):
    """Each example's flags are the CLI's: its own parser (as ``rnnprof.cli.main`` builds it) reads them; the
    command is not run here."""
    args = build_parser(argv[0]).parse_args(argv)
    assert args.command == argv[0]


# Where the README examples run (the rest are parsed only, above): the commands on tests/data alone run in
# tests/test_output_width.py (at 80 and 300 columns: exit 0, audit's 0 or 1 for a finding at error); report's
# example, the same command on the same gloo pair, in tests/test_report_sections.py; the torchrun capture of
# examples/train.py in tests/test_torch_script.py (torchrun_run, 2 ranks, 5 steps). Parsed only: scale and the
# capture of a built-in TensorFlow workload take minutes, what reads their runs needs them first, and worker and
# view serve until stopped.
PARSED_ONLY = {"scale": "minutes of training", "worker": "serves until stopped", "view": "serves until stopped"}


def where_it_runs(argv: list[str]) -> str:
    reads, writes = _paths(argv)
    if reads and all(p.startswith("tests/data/") for p in reads) and not writes:
        return "tests/test_output_width.py"
    if argv[0] == "report" and reads and all(p.startswith("tests/data/torch-gloo-rank") for p in reads):
        return "tests/test_report_sections.py"
    if argv[0] == "trace" and "--" in argv and "examples/train.py" in argv:
        return "tests/test_torch_script.py"
    if argv[0] == "watch" and "--" in argv and "examples/train.py" in argv:
        return "tests/test_watch.py"
    if argv[0] in PARSED_ONLY:
        return PARSED_ONLY[argv[0]]
    if argv[0] == "trace" and "--" not in argv:
        return "minutes of training"
    if reads and all(p.startswith("runs/") for p in reads):
        return "reads a run an example above captures"
    return ""


@pytest.mark.parametrize("argv", EXAMPLES, ids=[" ".join(a[:2]) for a in EXAMPLES])
def test_every_readme_example_is_run_by_a_test_or_says_why_not(argv):
    assert where_it_runs(argv), f"rnnprof {shlex.join(argv)}: run it in a test, or say why it is parsed only"


def test_the_readme_examples_on_the_test_traces_are_those_test_output_width_runs():
    from test_output_width import EXAMPLES as RUN

    assert sorted(RUN) == sorted(a for a in EXAMPLES if where_it_runs(a) == "tests/test_output_width.py"
                                 and a in _block_examples())
    import test_torch_script

    assert test_torch_script.EXAMPLE == ROOT / "examples" / "train.py"


def _block_examples() -> list[list[str]]:
    block = _section("One example per command")
    return [a for a in EXAMPLES if f"rnnprof {shlex.join(a)}" in block]


def test_the_readme_cluster_spec_is_one_the_worker_reads():
    """The spec the worker example names is read by the worker's own reader, and holds the task it names."""
    from rnnprof.training.cluster import read_cluster_spec

    argv = next(a for a in EXAMPLES if a[0] == "worker")
    args = build_parser("worker").parse_args(argv)
    spec = read_cluster_spec(ROOT / args.cluster_spec)
    assert args.task < len(spec.jobs[args.job])


def test_the_readme_shows_comms_output_as_the_comm_page_does():
    """README's sample of `comm` is lines of the comm page's opening, which test_output_width checks against the
    command's real output."""
    shown = README.split("What `comm` prints", 1)[1].split("```", 2)[1]
    page = (DOCS / "commands" / "comm.md").read_text().split("```console\n", 1)[1].split("\n```", 1)[0]
    lines = [line.rstrip() for line in page.splitlines()]
    at = 0
    for line in (line.rstrip() for line in shown.splitlines() if line.strip()):
        assert line in lines[at:], line
        at = lines.index(line, at) + 1


def test_the_walkthrough_notebook_runs_as_the_site_is_built(site):
    """The site executes the notebook (conf.py: an error in a cell fails the build) and shows what it found."""
    page = _text(site / "notebooks" / "walkthrough.html")
    assert "rank1 arrives last at collectives" in page  # the planted straggler, as the audit names it
    assert "Fixing it would save" in page and "PF001 error rank1" in page.replace("&#x27;", "'")
    assert "('PF001', 'rank1'," in page.replace("&#x27;", "'")  # the --json figures, read in a cell
    assert "Traceback" not in page


def test_the_api_reference_is_generated_from_the_docstrings(site):
    import rnnprof.api

    import html

    page = html.unescape(_text(site / "api.html")).replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    for name in ("comm", "count_ops", "critical_path", "whatif", "memory", "roofline", "audit", "hang", "diff"):
        first = " ".join(getattr(rnnprof.api.Run, name).__doc__.replace("``", "").split())[:60]
        assert f"rnnprof.api.Run.{name}" in (site / "api.html").read_text() and first in page, name
