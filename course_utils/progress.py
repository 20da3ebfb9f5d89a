"""Where a progress bar goes: one notebook output updated in place, or stdout.

:func:`progress_file` is the file :func:`course_utils.train.fit` gives tqdm's text bar: in a notebook
kernel a :class:`DisplayLine` (one display, updated by its display id, so an executed notebook stores
the finished bar once), elsewhere ``sys.stdout``.
"""

from __future__ import annotations

import sys

__all__ = ["DisplayLine", "progress_file"]


class DisplayLine:
    """A file for tqdm's text bar that shows it as one notebook output updated in place.

    tqdm.auto's widget is stored by an executed notebook as its text fallback frozen at 0%,
    and a text bar on stdout as one output per refresh. Updating one display (a display id)
    keeps a single output, which ends as the finished bar.
    """

    def __init__(self):
        from IPython.display import display
        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def write(self, text: str) -> None:
        line = text.replace("\n", "\r").split("\r")
        line = [part for part in line if part.strip()]
        if line:
            self.handle.update({"text/plain": line[-1]}, raw=True)

    def flush(self) -> None:
        pass


def progress_file(enabled: bool):
    """Where the progress bar goes: one updated display in a notebook kernel, else stdout."""
    if enabled and "ipykernel" in sys.modules:
        try:
            from IPython import get_ipython
            if get_ipython() is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell":
                return DisplayLine()
        except ImportError:
            pass
    return sys.stdout
