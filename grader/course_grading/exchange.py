"""nbgrader's exchange for this course: where it is, and what a student's side needs.

The exchange is nbgrader's shared folder (``release_assignment`` writes ``outbound/``, students'
``submit`` writes ``inbound/``, ``collect`` copies ``inbound/`` into ``submitted/``,
``release_feedback`` writes ``feedback/``). Its place is ``$COURSE_EXCHANGE``, else
``<TMPDIR>/attention-course-exchange`` (fine on one laptop; a JupyterHub uses a shared folder such
as ``/srv/nbgrader/exchange``, see docs/jupyterhub.md).

Two pitfalls of nbgrader 0.9.6 on a JupyterHub decide what a *student's* configuration says
(:func:`student_config`):

* **The student id.** nbgrader's ``submit`` names a submission after the Unix account
  (``nbgrader.utils.get_username``), and takes ``JUPYTERHUB_USER`` only when that account is
  ``jovyan`` (the Docker images' user). Where several hub users share one Unix account (a local
  spawner run as one user, as in ``make hub-rehearsal``) every submission would be named after that
  account, one student's overwriting another's; with a Unix account per user (The Littlest
  JupyterHub) the names are right only if Unix and hub names agree. The student's configuration
  therefore sets ``CourseDirectory.student_id`` from ``JUPYTERHUB_USER``.
* **The cache.** ``fetch_feedback`` returns the feedback of *every* submission recorded in its
  cache (``Exchange.cache``, default ``~/.local/share/jupyter/nbgrader_cache``): students who share
  a cache (a shared ``HOME``) fetch each other's feedback. Each student's cache is in their own
  home.

This module must stay light: ``nbgrader_config.py`` imports it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

COURSE_ID = "attention-course"
EXCHANGE_VARIABLE = "COURSE_EXCHANGE"


def exchange_root() -> str:
    """The exchange folder: ``$COURSE_EXCHANGE``, else ``<TMPDIR>/attention-course-exchange``."""
    return os.environ.get(EXCHANGE_VARIABLE) or os.path.join(tempfile.gettempdir(), "attention-course-exchange")


STUDENT_CONFIG = '''"""nbgrader configuration of a student of {course_id} (written by course_grading.exchange)."""
import os

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course_id!r}
c.Exchange.root = {root!r}
# nbgrader 0.9.6 names a submission after the Unix account unless that account is "jovyan": the
# hub's user name is the student id.
if os.environ.get("JUPYTERHUB_USER"):
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
# fetch_feedback returns every feedback recorded in the cache: the cache is this student's own.
c.Exchange.cache = os.path.join(os.path.expanduser("~"), ".local", "share", "jupyter", "nbgrader_cache")
'''


def student_config(root: str | os.PathLike | None = None, course_id: str = COURSE_ID) -> str:
    """The text of a student's ``~/.jupyter/nbgrader_config.py`` for the exchange at ``root``."""
    return STUDENT_CONFIG.format(course_id=course_id, root=str(root or exchange_root()))


def write_student_config(home: Path, root: str | os.PathLike | None = None, course_id: str = COURSE_ID) -> Path:
    """Write :func:`student_config` into ``home/.jupyter/nbgrader_config.py``; return its path."""
    path = Path(home) / ".jupyter" / "nbgrader_config.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(student_config(root, course_id))
    return path
