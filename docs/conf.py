"""Sphinx configuration of rnnprof's documentation (``make docs``: warnings are errors)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))  # the API reference reads this checkout's docstrings

project = "rnnprof"
author = "rnnprof authors"
# myst_nb: Markdown pages (MyST) and notebooks, each notebook executed as the site is built (an error in a cell
# fails the build); autodoc: the Python API's reference from its docstrings.
extensions = ["myst_nb", "sphinxarg.ext", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_heading_anchors = 3
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 300
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
html_static_path = []
suppress_warnings = ["myst.header", "myst.domains"]  # sphinx-argparse's domain cannot resolve MyST's "any" links
