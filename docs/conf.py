"""Sphinx configuration of rnnprof's documentation (``make docs``: warnings are errors)."""

project = "rnnprof"
author = "rnnprof authors"
extensions = ["myst_parser", "sphinxarg.ext"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_static_path = []
suppress_warnings = ["myst.header", "myst.domains"]  # sphinx-argparse's domain cannot resolve MyST's "any" links
