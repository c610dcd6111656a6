"""Errors that carry the process exit code.

Every failure a user can cause is one of these; ``cli.main`` prints the message
as one line and returns ``exit_code``. Anything else is a bug: one line too, exit
code 3 (``cli.INTERNAL_ERROR``), and the traceback only with ``--debug``.
"""

from __future__ import annotations


class RnnprofError(Exception):
    """Base class: a message meant for the user and an exit code."""

    exit_code = 2


class UsageError(RnnprofError):
    """A flag or combination of flags that cannot work."""


class InputError(RnnprofError):
    """A file or directory that cannot be read as what it claims to be."""

    def __init__(self, path: object, problem: str, expected: str | None = None):
        self.path = str(path)
        self.problem = problem
        self.expected = expected
        text = f"{self.path}: {problem}"
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)


class MissingDependency(RnnprofError):
    """A command needs a package that is installed with one of rnnprof's extras."""

    def __init__(self, package: str, needed_for: str, extras: str):
        self.package = package
        super().__init__(f"{needed_for} needs {package}, which is not installed "
                         f"(install it with {extras})")


def is_missing(exc: ImportError, package: str) -> bool:
    """Whether ``exc`` says ``package`` itself is absent (not a broken install of it)."""
    name = getattr(exc, "name", None) or ""
    return name == package or name.startswith(package + ".") or f"import of {package} halted" in str(exc)


TENSORFLOW_EXTRAS = "pip install 'rnnprof[cpu]', or 'rnnprof[gpu]' on a Linux machine with NVIDIA GPUs"


class FindingsError(RnnprofError):
    """An analysis found problems at or above the user's failure threshold."""

    exit_code = 1


class InterruptedRun(RnnprofError):
    """The user interrupted a command; partial results were kept."""

    exit_code = 130


TORCH_EXTRAS = "pip install 'rnnprof[torch]'"


class JobHung(RnnprofError):
    """The job under capture hung and was stopped; the message is the verdict (docs/commands/hang.md). Exit
    status 124, as ``timeout`` uses."""

    exit_code = 124


class RankFailed(RnnprofError):
    """A worker process of a multi-process run failed; the others were stopped."""

    exit_code = 1


class TaskFailed(RnnprofError):
    """A task of a TensorFlow cluster died or could not start; the other tasks were stopped."""

    exit_code = 1
