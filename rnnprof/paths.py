"""What is wrong with a path the user gave that cannot be opened: missing, a symlink loop, a dangling link.

One place for the wording, so every command, rank folder and run directory says the same thing.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def broken(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be opened, as the end of a sentence starting with the path; None when it can be stat'ed."""
    try:
        os.stat(path)
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop (following its links never reaches a file)"
        if os.path.islink(path):
            return f"is a symlink to {os.readlink(path)!r}, which does not exist"
        if exc.errno == errno.EACCES:
            return "cannot be read (permission denied)"
        if exc.errno == errno.ENOENT:
            return "does not exist"
        return f"cannot be read ({exc.strerror or exc})"


def is_loop_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the error ``open``/``stat``/``Path.resolve`` raise on a symlink loop."""
    if isinstance(exc, OSError):
        return exc.errno == errno.ELOOP
    return isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop")


def broken_links(paths) -> list[Path]:
    """The entries of ``paths`` that are symlinks leading to no file (loops and dangling links)."""
    return [Path(p) for p in paths if os.path.islink(p) and broken(p) is not None]


def shown(path: str | os.PathLike) -> str:
    """``path`` as a page shows it: relative to the folder the command runs in when it lies under it (a page
    carries no machine's absolute paths), else as given."""
    try:
        relative = Path(os.path.abspath(path)).relative_to(Path.cwd())
    except (ValueError, OSError):
        return str(path)
    return relative.as_posix() if relative.parts else "."
