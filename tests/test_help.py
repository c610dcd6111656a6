"""Every flag of every command says what it does and, when it has a default, what the default is."""

from __future__ import annotations

import argparse
import re

import pytest

from rnnprof.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


def _flags(command: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in command._actions
            if a.option_strings and a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]


def _shown_help(command: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as ``--help`` prints it, with ``%(default)s`` and the like filled in."""
    return command._get_formatter()._expand_help(action)


def _has_default(action: argparse.Action) -> bool:
    """A value the command uses when the flag is not given (a switch being off is not one)."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return False
    return action.default not in (None, argparse.SUPPRESS, [], ())


def _spellings(value) -> set[str]:
    if isinstance(value, float):
        return {str(value), f"{value:g}"}
    return {str(value)}


COMMANDS = _commands()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_has_help_that_shows_its_default(name):
    command = COMMANDS[name]
    missing, no_default = [], []
    for action in _flags(command):
        shown = _shown_help(command, action)
        flag = action.option_strings[-1]
        if not shown.strip():
            missing.append(flag)
        elif _has_default(action) and not ("default" in shown
                                           and any(s in shown for s in _spellings(action.default))):
            no_default.append(f"{flag} (default {action.default!r}): {shown!r}")
    assert not missing, f"{name}: flags without help: {', '.join(missing)}"
    assert not no_default, f"{name}: help does not show the default: " + "; ".join(no_default)


def test_the_walk_sees_the_workload_flags():
    """The check above covers the flags it must: scale's and trace's workload flags among them."""
    for name in ("scale", "trace"):
        flags = {a.option_strings[-1] for a in _flags(COMMANDS[name])}
        assert {"--model", "--direction", "--attention", "--src-max-len", "--vocab-size", "--optimizer",
                "--plant", "--devices", "--warmup"} <= flags


def test_plant_is_described_as_an_opt_in_demo_of_a_placement_mishap():
    for name in ("scale", "trace"):
        plant = next(a for a in _flags(COMMANDS[name]) if "--plant" in a.option_strings)
        assert "opt-in demo of a placement mishap" in plant.help


@pytest.mark.parametrize("dest", ["layers", "units", "src_max_len", "vocab_size", "batch_size", "learning_rate"])
def test_model_dependent_defaults_shown_are_the_ones_a_run_gets(dest):
    """The help of a flag whose default depends on --model and --preset names what each run really uses."""
    from rnnprof.commands.workload_flags import workload_config_from_args

    scale = COMMANDS["scale"]
    action = next(a for a in _flags(scale) if a.dest == dest)
    shown = " ".join(_shown_help(scale, action).split())
    for argv, label in ((["--model", "nmt"], "for nmt"), (["--model", "rnnlm"], "for rnnlm"),
                        (["--model", "rnnlm", "--preset", "rnn_benchmark"], "with --preset rnn_benchmark")):
        args = build_parser().parse_args(["scale", *argv])
        value = getattr(workload_config_from_args(args, 0, devices=1, variable_update="replicated"), dest)
        assert any(f"{s} {label}" in shown for s in _spellings(value)), (argv, value, shown)


def test_the_help_says_what_rnnprof_profiles_not_only_rnns(capsys):
    from rnnprof.cli import main

    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "RNN models" not in out and "PyTorch" in out and "TensorFlow" in out


HELP_MAX = 100  # two lines at most in `rnnprof --help` at 80 columns


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_help_is_one_lowercase_line_saying_what_it_does(name):
    """One voice: a lowercase verb phrase (what the command does or answers), one line, no full stop."""
    from rnnprof.cli import COMMANDS as REGISTRY

    help_text = REGISTRY[name].help
    assert help_text[:1].islower(), help_text
    assert "\n" not in help_text and not help_text.endswith("."), help_text
    assert len(help_text) <= HELP_MAX, (len(help_text), help_text)
    assert help_text.split()[0] not in {"the", "a", "an", "what"}, help_text


@pytest.mark.parametrize("name", sorted(_commands()))
def test_no_help_text_opens_an_emphasis_the_cli_reference_cannot_close(name):
    """docs/cli.rst renders each command's help as reStructuredText: a lone ``*`` (as in ``(*.txt)``) opens an
    emphasis with no end, a warning on every docs build."""
    command = _commands()[name]
    texts = [command.description or "", *(a.help or "" for a in command._actions if a.help != argparse.SUPPRESS)]
    assert [t for t in texts if re.search(r"(^|[\s(])\*[^\s*]", t)] == []
