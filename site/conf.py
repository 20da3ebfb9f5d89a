"""Sphinx configuration of the course site (``make site``; README, "Read it on the web").

The source folder is not this one: ``site/prepare.py`` writes it to ``site/_build/src`` (the
learner's version of every executed chapter, the index and the glossary) and ``make site`` runs
``sphinx-build -c site site/_build/src site/_build/html``. Nothing is executed and nothing is
fetched: the notebooks' stored outputs are shown as they are, and MathJax is served from
``_static/mathjax/`` (copied from the npm package by ``make site``, see ``site/_vendor``).
"""

project = "Attention, from Seq2Seq to Transformers"
author = "the course's authors"
copyright = "the course's authors, MIT licence"

extensions = ["myst_nb"]

# The notebooks are shown with the outputs stored by `make execute`; a build never runs them.
nb_execution_mode = "off"
# Chapter headings get GitHub-style anchors (`#6-masks`), the links GLOSSARY.md uses.
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath", "amsmath"]
# Stored outputs of the widgets-free chapters: no ipywidgets state to render.
nb_merge_streams = True

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header"]  # chapters start at "#", their exercises jump to "###"

html_theme = "sphinx_book_theme"
html_title = "Attention, from Seq2Seq to Transformers"
html_static_path = ["_vendor"]
# MathJax 3.2.2 from the npm registry, served from _static/mathjax/ (no CDN).
mathjax_path = "mathjax/tex-mml-chtml.js"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
# The theme's colour mode; left unset, pydata-sphinx-theme logs a console error on every page.
html_context = {"default_mode": "light"}
