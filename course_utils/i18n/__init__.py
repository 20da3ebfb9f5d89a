"""The course in other languages, from the English sources and gettext catalogues (``locale/``).

:mod:`~course_utils.i18n.segments` cuts a text into entries and puts translations back,
:mod:`~course_utils.i18n.catalogue` reads, updates and checks the ``.po`` files,
:mod:`~course_utils.i18n.sources` says where each catalogue's English comes from,
:mod:`~course_utils.i18n.notebooks` writes a translated chapter, and
:mod:`~course_utils.i18n.terms` holds the glossary's terms that every translation must use.
"""

__all__: list[str] = []
