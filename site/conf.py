"""Sphinx configuration of the course site (``make site``; README, "Read it on the web").

The source folder is not this one: ``site/prepare.py`` writes it to ``site/_build/src`` (the
learner's version of every executed chapter, the index and the glossary) and ``make site`` runs
``sphinx-build -c site site/_build/src site/_build/html``. Nothing is executed and nothing is
fetched: the notebooks' stored outputs are shown as they are, and MathJax is served from
``_static/mathjax/`` (copied from the npm package by ``make site``, see ``site/_vendor``).
"""

import os

project = "Attention, from Seq2Seq to Transformers"
# The site is built once per language (make site): English at the root of site/_build/html, Chinese
# under zh_CN/ with `-D language=zh_CN`. Sphinx then writes its own labels in Chinese and indexes the
# pages for search with its Chinese splitter (jieba, in the site extra).
language = os.environ.get("COURSE_SITE_LANG", "en")
# The footer's words, in the page's language (Sphinx and the theme translate their own labels).
AUTHORS = {"en": "the course's authors", "zh_CN": "本课程的作者"}
LICENCES = {"en": "© the course's authors, MIT licence.", "zh_CN": "© 本课程的作者，MIT 许可证。"}
author = AUTHORS[language]
copyright = "the course's authors, MIT licence"   # the page metadata; the footer shows LICENCES

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
TITLES = {"en": "Attention, from Seq2Seq to Transformers", "zh_CN": "注意力：从 Seq2Seq 到 Transformer"}
html_title = TITLES[language]
# _vendor: MathJax; _static: the language switch's and the Chinese pages' styles.
html_static_path = ["_vendor", "_static"]
html_css_files = ["course.css"]
templates_path = ["_templates"]
# MathJax 3.2.2 from the npm registry, served from _static/mathjax/ (no CDN).
mathjax_path = "mathjax/tex-mml-chtml.js"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    # The other language's version of the same page, on every page (site/_templates/language-switch.html).
    "article_header_end": ["language-switch.html", "article-header-buttons.html"],
    # The theme's footer less its English "© Copyright" label (site/_templates/licence.html).
    "footer_content_items": ["author.html", "licence.html"],
}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
# The theme's colour mode; left unset, pydata-sphinx-theme logs a console error on every page.
html_context = {"default_mode": "light", "languages": TITLES, "licence": LICENCES[language]}


def setup(app):
    """Sphinx 9.0.4's Chinese search ships the English stemmer (english-stemmer.js, for the Latin words
    of a Chinese page) but names it ChineseStemmer in language_data.js, which then fails with
    "ChineseStemmer is not defined" and leaves search without a stemmer. The same splitter (jieba),
    with the stemmer's own name."""
    from sphinx.search.zh import SearchChinese

    class CourseSearchChinese(SearchChinese):
        language_name = "English"   # only used to name the JavaScript stemmer: EnglishStemmer

    app.add_search_language(CourseSearchChinese)
    # The glossary's Chinese terms as whole words of the index (site/prepare.py writes the list).
    terms = app.srcdir / "_search_terms.txt"
    if terms.is_file():
        app.config.html_search_options = {"dict": str(terms)}
