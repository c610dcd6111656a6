"""rnnprof's version: a leaf module, so the manifest writers and the CLI read it without importing the package's
lazy capture API."""

__version__ = "0.1.0"
