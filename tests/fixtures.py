"""Where the real traces used as test inputs live: ``shared/fixtures`` beside the repository.

``RNNPROF_FIXTURES`` overrides the location. Tests fail (not skip) when the folder is missing,
so a checkout without the traces cannot pass by testing less.
"""

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def _locate() -> Path:
    candidates = [os.environ.get("RNNPROF_FIXTURES"), _REPO.parent / "shared" / "fixtures", "/work/shared/fixtures"]
    for candidate in candidates:
        if candidate and Path(candidate, "README.md").is_file():
            return Path(candidate)
    raise RuntimeError("real trace fixtures not found: set RNNPROF_FIXTURES or put shared/fixtures beside the repository")


FIXTURES = _locate()
