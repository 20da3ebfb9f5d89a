"""nbgrader's tampering signal, raised only for tampering: no "checksum has changed" on an honest submission.

nbgrader's ``OverwriteCells`` (the first step of ``nbgrader autograde``) compares every read-only
cell of a submission with the *source* notebook's cell stored in the gradebook, warns
``Attribute 'checksum' for cell ... has changed!`` when they differ, and puts the stored source
back. A test cell with hidden tests always differs: the release (what the learner got) has its
hidden block removed by ``ClearHiddenTests``, the gradebook keeps it. So every honest submission
of a chapter got one warning per hidden-test cell (chapter 3: six), and a real edit of a test cell
read the same.

:class:`ReleaseAwareOverwriteCells` does what nbgrader does (the stored source goes back in, the
checksum is nbgrader's), but warns only when the submitted cell is neither the source cell nor
its release form (the source with ``ClearHiddenTests`` applied, nbgrader's own function). The
grader's intake (``intake.py``) rebuilds every read-only cell from the release before nbgrader
sees it, so under ``make autograde`` no warning is expected at all; the signal matters where a
raw submission reaches nbgrader.
"""

from __future__ import annotations

import copy

from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, OverwriteCells

__all__ = ["ReleaseAwareOverwriteCells", "release_source"]


def release_source(source: str) -> str:
    """What the release holds of a source cell's ``source``: nbgrader's ``ClearHiddenTests`` applied."""
    cell = NotebookNode(source=source, metadata={})
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


class ReleaseAwareOverwriteCells(OverwriteCells):
    """nbgrader's ``OverwriteCells``; the checksum warning only for a read-only cell the learner changed."""

    _as_released = False

    def preprocess_cell(self, cell, resources, cell_index):
        self._as_released = False
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                stored = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except MissingEntry:
                stored = None
            if stored is not None and stored.locked:
                released = copy.deepcopy(cell)
                released.source = release_source(stored.source)
                self._as_released = utils.compute_checksum(cell) == utils.compute_checksum(released)
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and self._as_released:
            return   # the release's own form of the cell: nothing was changed
        super().report_change(name, attr, old, new)
