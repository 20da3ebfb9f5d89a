"""Intake: what nbgrader is given for one submission, rebuilt from the trusted release.

A submission is untrusted data. It is read without following links and only if it is a
regular file of bounded size (a symlink, a FIFO, a device or a folder is refused with a
reason, and never opened for reading). What is graded is then *rebuilt* from the chapter's
release notebook (generated from ``solutions/``, the trusted template):

* every graded or read-only cell of the release is taken from the release, with its
  metadata; from the submission only the *source* of the answer cells is taken (matched by
  ``grade_id``, the first cell that carries it);
* the learner's own extra cells are kept as plain cells of their type (source only);
* the learner's text is bounded: a cell over ``MAX_CELL_CHARS`` characters, and whatever goes over
  ``MAX_TEXT_CHARS`` in all, is cut (with a note in the cell and a fault), so that nothing the grader
  does with it afterwards (the feedback's Markdown rendering, the sanitiser) costs more than that;
* outputs are never read: a notebook over the size one with outputs has only because of its outputs
  is graded without them (up to ``MAX_NOTEBOOK_BYTES`` on disk);
* a notebook is parsed only when its structure is bounded (:func:`json_counts`, counted without
  parsing it: at most ``MAX_JSON_CONTAINERS`` objects and arrays, ``MAX_JSON_VALUES`` values), so that parsing costs bounded memory in the grader's
  own process (both limits are set from the course's own notebooks, with their margin);
* nothing else of the submission counts: its tags (``skip-execution``, ``raises-exception``),
  its cell and notebook metadata (``"nbgrader": "x"``, ``schema_version: 99``), its outputs,
  its kernelspec, a second copy of a test cell (dropped);
* graded cells that were deleted are put back from the release, cells whose type was changed
  get their type back, and the hidden-test delimiter in a learner's cell is neutralised.

A notebook that cannot be graded as it stands (not a regular file, not valid JSON, another
chapter's notebook, none of the chapter's graded cells) is replaced by the blank release
marked ``not_run``: it gets 0 and the reason, without a kernel.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.course import chapter_notebook, chapters, origin
from course_grading.results import GRADER_VERSION, META
from course_utils.messages import everywhere, notebook_language

# The largest notebook of the course (solutions/ch06_transformer, with its outputs) is 0.93 MiB and
# holds the most containers, 434; the one with the most strings and structural marks (json_counts)
# is ch03's, 6,283 (tests/test_intake.py measures them again). A submission may be 17 times that size
# and hold 23 times those containers; it is refused before it is parsed otherwise, and it may hold a
# million strings and marks (a learner's Markdown table of 300,000 lines is 300,000 strings, each
# cut later), so that parsing it in the grader's own process costs a bounded amount of memory
# whatever its shape (tests/test_intake.py measures the worst shapes: under 150 MiB; a padding of
# empty objects costs 40 bytes of memory per byte of JSON, and 128 MiB of it took the grader to 5 GiB).
MAX_NOTEBOOK_BYTES = 16 * 2**20     # read at most this
MAX_JSON_CONTAINERS = 10_000        # parse only a notebook with at most this many objects and arrays
MAX_JSON_VALUES = 1_000_000         # ... and at most this many strings and structural marks
OUTPUTS_NOTE_BYTES = 4 * 2**20      # a bigger notebook gets a note that its outputs were not read
MAX_CELL_CHARS = 100_000            # what one cell of the learner's may hold; more is cut
MAX_TEXT_CHARS = 1_000_000          # what all the learner's cells may hold together; more is cut
HIDDEN_DELIMITERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


class Refused(ValueError):
    """A submitted path that is not read at all (a link, a FIFO, too large, ...)."""


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_submission(path: Path, base: Path | None = None, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a submitted file: never through a symbolic link (in ``path`` or any folder
    between ``base`` and it), never blocking (a FIFO), only a regular file of at most ``limit``."""
    path = Path(path)
    if base is not None:
        _refuse_linked_folders(path, Path(base))
    fd = _open_unfollowed(path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path.name} is {_file_kind(st.st_mode)}, not a notebook file")
        if st.st_size > limit:
            raise Refused(f"{path.name} is {st.st_size / 2**20:.0f} MiB, over the limit of {limit / 2**20:.0f} MiB")
        return _read_at_most(fd, path, limit)
    finally:
        os.close(fd)


def _refuse_linked_folders(path: Path, base: Path) -> None:
    """Refuse ``path`` if a folder between ``base`` and it is a symbolic link (``O_NOFOLLOW`` only
    looks at the last part of a path)."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        parts = ()
    here = base
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise Refused(f"{here.name}/ is a symbolic link, not a folder")


def _open_unfollowed(path: Path) -> int:
    """A read-only descriptor of ``path``, opened without following a link or blocking on a FIFO."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise Refused(f"{path.name} is a symbolic link, not a notebook file") from None
        raise Refused(f"{path.name} cannot be opened ({e.strerror})") from None


def _file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words (for the reason it was refused)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _read_at_most(fd: int, path: Path, limit: int) -> bytes:
    """Everything ``fd`` holds, refused as soon as it is over ``limit`` bytes (a file may grow after
    its size was read)."""
    chunks, size = [], 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise Refused(f"{path.name} is over the limit of {limit / 2**20:.0f} MiB")
    return b"".join(chunks)


# Skip what is not structure, then take one whole string or one structural character (possessive:
# linear in the length; a string that never ends stops the count, and the parser then refuses it).
_TOKEN = re.compile(rb'[^"{\[,:]*+("[^"\\]*+(?:\\.[^"\\]*+)*+"|[{\[,:])', re.S)


def json_counts(raw: bytes, limit: int = MAX_JSON_VALUES, containers: int = MAX_JSON_CONTAINERS) -> tuple[int, int]:
    """``(marks, containers)``: how many strings, ``{``, ``[``, ``,`` and ``:`` the JSON text ``raw``
    holds (each string counted once, whatever it holds), and how many ``{`` and ``[``, counted without
    parsing it, until one count is over its limit. Every value and key but the outermost follows a
    mark, so the first is at least the number of values and keys."""
    n = c = pos = 0
    while n <= limit and c <= containers:
        m = _TOKEN.match(raw, pos)
        if m is None:
            break
        n += 1
        c += m.group(1) in (b"{", b"[")
        pos = m.end()
    return n, c


def parse_bounded(raw: bytes, name: str) -> dict:
    """The submission's JSON, parsed only when its shape is bounded (:func:`json_counts`)."""
    marks, containers = json_counts(raw)
    if marks > MAX_JSON_VALUES or containers > MAX_JSON_CONTAINERS:
        raise Refused(f"{name} holds over {MAX_JSON_CONTAINERS:,} JSON objects and arrays or {MAX_JSON_VALUES:,} "
                      "values (a chapter's notebook holds under 500 and 7,000)")
    return json.loads(raw.decode("utf-8"))


def _meta(cell) -> dict:
    m = cell.get("metadata") if isinstance(cell, dict) else None
    n = m.get("nbgrader") if isinstance(m, dict) else None
    return n if isinstance(n, dict) else {}


def _graded_ids(cells) -> list[str]:
    return [g for g in (_meta(c).get("grade_id") for c in cells) if isinstance(g, str) and g]


def _source(cell) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def _neutralise(source: str) -> tuple[str, bool]:
    """A learner's source with nbgrader's hidden-test delimiters made harmless comments."""
    if not any(d in source for d in HIDDEN_DELIMITERS):
        return source, False
    for d in HIDDEN_DELIMITERS:
        source = source.replace(d, d.replace(" ", "_").lower() + " (delimiter removed)")
    return source, True


def _plain(kind: str, source: str) -> NotebookNode:
    if kind == "markdown":
        return nbformat.v4.new_markdown_cell(source)
    if kind == "raw":
        return nbformat.v4.new_raw_cell(source)
    return nbformat.v4.new_code_cell(source)


class _Budget:
    """The learner's text allowance: ``take(source)`` gives the source, cut where it goes over."""

    def __init__(self) -> None:
        self.left, self.cut = MAX_TEXT_CHARS, 0

    def take(self, source: str) -> str:
        room = min(MAX_CELL_CHARS, max(self.left, 0))
        if len(source) > room:
            self.cut += 1
            source = source[:room] + f"\n[cut by the grader: over {MAX_CELL_CHARS:,} characters in a cell or " \
                                     f"{MAX_TEXT_CHARS:,} in the notebook]\n"
        self.left -= len(source)
        return source


# The written answer's placeholder in every release (nbgrader's text_stub, translated: stored_run.stubs).
_TEXT_STUBS = everywhere("YOUR ANSWER HERE")


class _Taken:
    """The cells taken so far while a submission is rebuilt (:func:`rebuild`), and what was done to
    them that the learner is told about."""

    def __init__(self) -> None:
        self.out: list[NotebookNode] = []
        self.used: set[str] = set()           # the grade ids taken (the first cell that carries one)
        self.retyped: list[str] = []
        self.dropped: list[str] = []
        self.delimited = False
        self.budget = _Budget()

    def add(self, cell: dict, by_id: dict[str, NotebookNode]) -> None:
        """Take one cell of the submission: a graded or read-only cell from the release (an answer
        cell with the learner's source), the learner's own cell as a plain cell; a second copy of a
        test or read-only cell is dropped."""
        kind = cell.get("cell_type")
        kind = kind if kind in ("code", "markdown", "raw") else "code"
        source = _source(cell)
        gid = _meta(cell).get("grade_id")
        tc = by_id.get(gid) if isinstance(gid, str) else None
        if tc is None or _meta(tc).get("solution"):   # the learner's own text
            source = self.budget.take(source)
        if tc is not None and gid not in self.used:
            self.used.add(gid)
            self.out.append(self._from_release(tc, gid, kind, source))
        elif tc is not None and not _meta(tc).get("solution"):
            self.dropped.append(gid)                     # a second copy of a test or read-only cell
        else:
            self.out.append(_plain(kind, self._neutralised(source)))

    def _from_release(self, tc: NotebookNode, gid: str, kind: str, source: str) -> NotebookNode:
        """The release's cell ``tc``, with the learner's ``source`` if it is an answer cell."""
        new = copy.deepcopy(tc)
        if _meta(tc).get("solution"):
            new.source = self._neutralised(source)
            if tc.cell_type == "markdown" and source.strip() in _TEXT_STUBS and tc.source.strip() in _TEXT_STUBS:
                new.source = tc.source   # a translated release's placeholder, unanswered: nbgrader's "No response", 0
        if kind != tc.cell_type:
            self.retyped.append(gid)
        return new

    def _neutralised(self, source: str) -> str:
        source, hit = _neutralise(source)
        self.delimited |= hit
        return source

    def faults(self) -> list[str]:
        """What the learner is told was done to their cells."""
        faults = []
        if self.budget.cut:
            faults.append(f"{self.budget.cut} cell(s) of the submission were cut: a cell may hold {MAX_CELL_CHARS:,} "
                          f"characters, the notebook {MAX_TEXT_CHARS:,}")
        if self.retyped:
            faults.append(f"graded cells whose type was changed were given their type back: {', '.join(self.retyped)}")
        if self.dropped:
            faults.append(f"second copies of read-only cells were ignored: {', '.join(sorted(set(self.dropped)))}")
        if self.delimited:
            faults.append("a cell of the submission contained the hidden-test delimiter; it was made a comment")
        return faults


def rebuild(cells: list, template: NotebookNode) -> tuple[NotebookNode, list[str]]:
    """The notebook to grade: ``template`` (the release) with the learner's answers and extra cells."""
    by_id = {_meta(c)["grade_id"]: c for c in template.cells if _meta(c).get("grade_id")}
    taken = _Taken()
    for cell in cells:
        if isinstance(cell, dict):
            taken.add(cell, by_id)
    faults = taken.faults()
    missing = _put_back_missing(taken.out, _graded_ids(template.cells), by_id, taken.used)
    if missing:
        faults.append(f"graded cells missing from the submission were put back from the release: {', '.join(missing)}")
    nb = nbformat.v4.new_notebook(metadata=copy.deepcopy(template.metadata))
    nb.cells = taken.out
    nb.nbformat, nb.nbformat_minor = template.nbformat, template.nbformat_minor
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb, faults


def _put_back_missing(out: list, want: list[str], by_id: dict[str, NotebookNode], used: set[str]) -> list[str]:
    """Put the graded cells the submission lacks back into ``out``, from the release, each after the
    nearest earlier graded cell that is there (else at the top); returns their grade ids."""
    missing = [g for g in want if g not in used]
    for gid in missing:
        earlier = set(want[:want.index(gid)])
        at = [i for i, c in enumerate(out) if _meta(c).get("grade_id") in earlier]
        out.insert(at[-1] + 1 if at else 0, copy.deepcopy(by_id[gid]))
    return missing


def intake(submitted: Path, chapter: str, release: Path, dest: Path, root: Path,
           base: Path | None = None) -> list[str]:
    """Check one submission, write what nbgrader should grade to ``dest``, return the faults."""
    blank = nbformat.read(release, as_version=4)
    try:
        raw = read_submission(submitted, base)
        data = parse_bounded(raw, submitted.name)
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise ValueError("it has no list of cells")
    except Refused as e:
        return _set_aside(blank, dest, f"{e}; graded as blank")
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        return _set_aside(blank, dest, f"{submitted.name} is not valid JSON ({one_line(e, 120)}); graded as blank")
    except ValueError as e:
        return _set_aside(blank, dest, f"{submitted.name} is not a valid notebook ({one_line(e, 120)}); "
                                       "graded as blank")
    want = set(_graded_ids(blank.cells))
    have = set(_graded_ids(data["cells"]))
    if not have & want:
        home = origin(root)
        for other in chapters(home):
            if other != chapter and have & set(_graded_ids(nbformat.read(chapter_notebook(other, home), 4).cells)):
                return _set_aside(blank, dest, f"this is the notebook of {other}, submitted as {chapter}; "
                                               "graded as blank")
        return _set_aside(blank, dest, f"none of {chapter}'s graded cells are in {submitted.name}; graded as blank")
    nb, faults = rebuild(data["cells"], blank)
    if len(raw) > OUTPUTS_NOTE_BYTES:
        faults.append(f"{submitted.name} was {len(raw) / 2**20:.0f} MiB with its stored outputs; it was graded "
                      "without them (the grader never reads outputs)")
    lang = notebook_language(data)   # the learner's language (a known one only): the grader's words in it
    if lang:
        nb.metadata.setdefault("course", {})["language"] = lang
    nbformat.validate(nb)
    nb.metadata[META] = {"faults": faults}
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return faults


def _set_aside(blank: NotebookNode, dest: Path, reason: str) -> list[str]:
    blank.metadata[META] = {"faults": [reason], "not_run": reason}
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(blank, dest)
    return [reason]


def fingerprint(submitted: Path, chapter: str, course: Path, limits, base: Path | None = None) -> str:
    """What a grade depends on: the submission, the chapter's tests, the grader and its limits."""
    h = hashlib.sha256()
    try:
        h.update(read_submission(submitted, base))
    except Refused as e:
        h.update(f"<refused: {e}>".encode())
    h.update(chapter_notebook(chapter, course).read_bytes())
    h.update(GRADER_VERSION.encode())
    h.update(json.dumps(limits.to_env(), sort_keys=True).encode())
    return h.hexdigest()


def submitted_notebook(folder: Path, nb_name: str) -> Path:
    """The notebook to grade in ``submitted/<student>/<chapter>/``: the chapter's name, else the only one."""
    right = folder / f"{nb_name}.ipynb"
    others = sorted(folder.glob("*.ipynb"))
    return right if os.path.lexists(right) or len(others) != 1 else others[0]
