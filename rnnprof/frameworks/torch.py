"""Import PyTorch, or say in one line how to install it.

Every PyTorch import of the run code goes through here first, so a missing torch is
``MissingDependency`` (exit 2) naming the extra, never an ImportError traceback.
"""

from __future__ import annotations

import sys

from rnnprof.errors import TORCH_EXTRAS, MissingDependency, is_missing


def import_torch(needed_for: str = "this command"):
    """The ``torch`` module; ``MissingDependency`` where it is not installed."""
    if sys.modules.get("torch") is None:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            if not is_missing(exc, "torch"):
                raise  # a broken install of torch, not a missing one
            raise MissingDependency("PyTorch", needed_for, TORCH_EXTRAS) from None
    return sys.modules["torch"]
