"""Sphinx configuration of fastloader's API reference (built by `make docs`, warnings are
errors)."""

import fastloader

project = "fastloader"
author = "fastloader authors"
release = fastloader.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# The guide's pages link each other as page.md; MyST resolves those links.
myst_heading_anchors = 2
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # dataclass Attributes as fields, not duplicate attribute entries
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"undoc-members": False}
html_theme = "alabaster"
exclude_patterns = ["_build"]
