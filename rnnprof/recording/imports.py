"""Run a function as soon as a top-level module has been imported, without importing it first.

``when_imported("torch", start)`` calls ``start(module)`` right after ``import torch`` has finished
executing ``torch/__init__.py`` (at once where it is already imported). It is how a script under capture
that imports neither framework up front gets the hooks of the one it turns out to use: no class can be
built from a module before its import has finished, so hooks installed then see everything.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _Watch(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: it wraps the loader the other finders give for one name."""

    def __init__(self, name: str, callback: Callable):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.cancel()  # once, and out of the way of the search below
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, callback = loader.exec_module, self.callback

        def exec_module(module):
            execute(module)
            callback(module)

        loader.exec_module = exec_module  # this spec's own loader instance
        return spec

    def cancel(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def when_imported(name: str, callback: Callable) -> Callable[[], None]:
    """Call ``callback(module)`` once ``name`` is imported; returns a function that cancels the wait."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return lambda: None
    watch = _Watch(name, callback)
    sys.meta_path.insert(0, watch)
    return watch.cancel
