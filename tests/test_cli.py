import subprocess
import sys

from rnnprof.cli import main


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_prints_version():
    out = subprocess.run([sys.executable, "-m", "rnnprof", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("rnnprof ")


def test_a_flag_is_never_abbreviated(capsys):
    """``--device 2`` is not ``--devices 2``: it is left unknown (the parse alone: nothing is trained), and a
    command refuses it in one line naming the flag meant."""
    from rnnprof.cli import build_parser

    args, extras = build_parser("scale").parse_known_args(["scale", "--device", "2"])
    assert extras == ["--device", "2"] and args.devices != "2"
    assert main(["comm", "tests/data/torch-gloo-rank0.json.gz", "--per-ste"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unrecognized arguments: --per-ste" in err
    assert "did you mean --per-step?" in err


def test_an_unknown_flag_points_to_the_commands_help_and_its_closest_flag(capsys):
    assert main(["comm", "tests/data/torch-gloo-rank0.json.gz", "--per-stp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rnnprof comm: error: unrecognized arguments: --per-stp")
    assert "did you mean --per-step?" in err
    assert err.rstrip().endswith("(see rnnprof comm --help)")
    # nothing close: no guess, still the command's help
    assert main(["comm", "tests/data/torch-gloo-rank0.json.gz", "--zzzzqq"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err and "(see rnnprof comm --help)" in err


def test_every_parser_refuses_abbreviations():
    from rnnprof.cli import build_parser

    parser = build_parser()
    assert not parser.allow_abbrev
    assert all(not sub.allow_abbrev for sub in parser.commands.values())


def test_the_benchmarks_and_tools_refuse_abbreviations_too():
    """Every parser the project's scripts build takes flags whole, as rnnprof's commands do."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent
    scripts = [*root.glob("benchmarks/**/*.py"), root / "docs" / "pictures.py"]
    calls = [(path.name, call) for path in scripts
             for call in re.findall(r"argparse\.ArgumentParser\([^\n]*", path.read_text())]
    assert calls
    assert [name for name, call in calls if "allow_abbrev=False" not in call] == []


def test_the_readme_ties_exit_status_1_to_every_command_with_fail_on(capsys):
    """Each command that takes --fail-on exits 1 on a finding at its default (error) and 0 with --fail-on never;
    README's exit codes name each such command."""
    import pathlib

    from rnnprof.cli import build_parser

    parser = build_parser()
    failing = sorted(name for name, sub in parser.commands.items()
                     if any("--fail-on" in action.option_strings for action in sub._actions))
    assert failing == ["audit", "placement-audit"]
    readme = pathlib.Path(__file__).resolve().parent.parent / "README.md"
    exit_codes = " ".join(readme.read_text().split("Exit codes:", 1)[1].split("\n\n", 1)[0].split())
    assert "1 a finding at or above `--fail-on`" in exit_codes
    assert all(f"`{name}`" in exit_codes for name in failing), exit_codes
    trace = "tests/data/kineto-2rank-nccl-rank0.json.gz"  # PF003 at error
    assert main(["audit", trace]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fail-on error" in err and "PF003" in err
    assert main(["audit", trace, "--fail-on", "never"]) == 0


def test_a_bad_input_is_one_short_line(tmp_path, capsys):
    """What a newcomer gets wrong first (a text file, an empty file, a JSON that is no trace, an empty folder, a
    trace without what the command needs): one line saying what was wrong and what was expected, short enough
    to read (the paths aside), exit status 2."""
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "obj.json").write_text('{"a": 1}')
    (tmp_path / "folder").mkdir()
    gloo = "tests/data/torch-gloo-rank0.json.gz"
    cases = [["count-ops", "notes.txt"], ["comm", "notes.txt"], ["comm", "empty.json"], ["critical-path", "obj.json"],
             ["explain", "folder"], ["comm", "folder"], ["roofline", "obj.json"], ["memory", gloo], ["hang", "folder"],
             ["view", "folder"], ["whatif", gloo]]
    for argv in cases:
        argv = [argv[0], *(a if a.startswith("tests/") else str(tmp_path / a) for a in argv[1:])]
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        shown = err.strip().replace(str(tmp_path), "DIR").replace(gloo, "FILE")
        assert shown.startswith(f"rnnprof {argv[0]}: error: ") and "expected" in shown, shown
        assert len(shown) <= 200, (len(shown), shown)
