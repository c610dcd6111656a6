"""Import PyTorch, or say in one line how to install it.

Every PyTorch import of the run code goes through here first, so a missing torch is
``MissingDependency`` (exit 2) naming the extra, never an ImportError traceback.
"""

from __future__ import annotations

import sys

from rnnprof.errors import TORCH_EXTRAS, MissingDependency


def import_torch(needed_for: str = "this command"):
    """The ``torch`` module; ``MissingDependency`` where it is not installed."""
    if sys.modules.get("torch") is None:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            name = getattr(exc, "name", None) or ""
            if name != "torch" and not name.startswith("torch.") and "import of torch halted" not in str(exc):
                raise  # a broken install of torch, not a missing one
            raise MissingDependency("PyTorch", needed_for, TORCH_EXTRAS) from None
    return sys.modules["torch"]
