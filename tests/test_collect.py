"""``nbgrader collect`` through the course's CourseCollect: who submitted, and nothing but files."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from course_utils import grading
from course_utils.grading import exchange
from course_utils.grading.collect import Refused, check_tree

REPO = Path(__file__).resolve().parent.parent
CHAPTER = "ch03_scaled_dot_product"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the owner checks need files owned by other accounts (root)")


def _account(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("exchange")
    os.chmod(root, 0o755)
    mp.setenv(exchange.EXCHANGE_VARIABLE, str(root))
    course = grading.new_course([CHAPTER], REPO)
    nb = grading.chapter_notebook(CHAPTER, course)
    inbound = root / exchange.COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    nobody, daemon = _account("nobody"), _account("daemon")

    def entry(student: str, owner: int | None, n: int = 0) -> Path:
        d = inbound / f"{student}+{CHAPTER}+2026-11-2{n} 10:00:00.000000 UTC+r{n}"
        d.mkdir()
        shutil.copy(course / "notebooks" / CHAPTER / nb.name, d / nb.name)
        (d / "timestamp.txt").write_text(f"2026-11-2{n} 10:00:00.000000 UTC")
        if owner is not None:
            for p in (d, *d.iterdir()):
                os.chown(p, owner, owner)
        return d

    entry("nobody", nobody)                                   # the one honest submission
    entry("daemon", nobody, 1)                                # nobody submits as daemon: refused
    linked = entry("root", None, 2)                           # a notebook that is a link to solutions/
    (linked / nb.name).unlink()
    os.symlink(nb, linked / nb.name)
    hard = entry("bin", _account("bin"), 3)                   # a hard link to the solution
    (hard / nb.name).unlink()
    os.link(nb, hard / nb.name)
    fifo = entry("sys", _account("sys"), 4)
    os.mkfifo(fifo / "pipe")
    os.chown(fifo / "pipe", _account("sys"), _account("sys"))
    os.symlink(entry("games", _account("games"), 5), inbound / f"mail+{CHAPTER}+2026-11-26 10:00:00.000000 UTC+r6")
    proc = grading.course.nbgrader("collect", CHAPTER, course=course, check=False)
    yield {"course": course, "log": proc.stderr + proc.stdout, "daemon": daemon, "nb": nb.name}
    mp.undo()
    shutil.rmtree(course, ignore_errors=True)


def _got(c, student: str) -> bool:
    return (c["course"] / "submitted" / student / CHAPTER).exists()


def test_the_owner_of_a_submission_is_the_student_it_names(collected):
    assert _got(collected, "nobody") and (collected["course"] / "submitted" / "nobody" / CHAPTER
                                           / collected["nb"]).is_file()
    assert not _got(collected, "daemon"), collected["log"]
    assert "names student 'daemon' but belongs to 'nobody'" in collected["log"], collected["log"]


def test_links_hard_links_and_special_files_are_not_collected(collected):
    for student, why in (("root", "symbolic link"), ("bin", "hard link"), ("sys", "a FIFO"),
                         ("mail", "symbolic link")):
        assert not _got(collected, student), (student, collected["log"])
        assert why in collected["log"], (why, collected["log"])


def test_oversize_and_deep_trees_are_refused(tmp_path):
    (tmp_path / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    with pytest.raises(Refused, match="deeper"):
        check_tree(tmp_path, max_files=50, max_depth=3, max_bytes=2**20)
    big = tmp_path / "big"
    big.mkdir()
    (big / "x").write_bytes(b"x" * 2048)
    with pytest.raises(Refused, match="over"):
        check_tree(big, max_files=50, max_depth=3, max_bytes=1024)
    for i in range(3):
        (big / f"f{i}").write_text("y")
    with pytest.raises(Refused, match="more than 2 files"):
        check_tree(big, max_files=2, max_depth=3, max_bytes=2**20)
