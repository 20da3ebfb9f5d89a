"""``nbgrader collect`` through the course's CourseCollect: who submitted, when (by the server's clock),
and nothing but files, within a byte budget."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

import course_grading as grading
from course_grading import exchange
from course_grading.collect import Refused, check_tree

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


# --- collect decides from what the server knows (issue 48, cause 3) ---------------------------------
# Each attack below is a student with a real account of their own (useradd), in an exchange of its
# own, collected by the course's `nbgrader collect`.

STUDENTS = [f"ctest{i}" for i in range(1, 8)]


@pytest.fixture(scope="module")
def accounts():
    """Real accounts ctest1..ctest7 (made here, removed afterwards): student id = account name."""
    if shutil.which("useradd") is None:
        pytest.skip("useradd is missing: the collect attacks need accounts of their own")
    made = []
    for name in STUDENTS:
        if _account(name) is None:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                           check=True, capture_output=True)
            made.append(name)
    yield {name: _account(name) for name in STUDENTS}
    for name in made:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def class_course():
    course = grading.new_course([CHAPTER], REPO)
    yield course
    shutil.rmtree(course, ignore_errors=True)


def _inbound(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "exchange"
    inbound = root / exchange.COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    for p in (tmp_path, root, root / exchange.COURSE_ID):
        os.chmod(p, 0o755)
    monkeypatch.setenv(exchange.EXCHANGE_VARIABLE, str(root))
    return inbound


def _folder(inbound: Path, name: str, uid: int, text: str, timestamp: str | None = None) -> Path:
    """A submission folder named ``name``, made by the account ``uid`` (every entry its own)."""
    d = inbound / name
    d.mkdir()
    (d / f"{CHAPTER}.ipynb").write_text(text)
    if timestamp is not None:
        (d / "timestamp.txt").write_text(timestamp)
    for p in (d, *d.iterdir()):
        os.chown(p, uid, uid)
    return d


def _collect(course: Path) -> str:
    shutil.rmtree(course / "submitted", ignore_errors=True)
    proc = grading.course.nbgrader("collect", CHAPTER, course=course, check=False)
    return proc.stderr + proc.stdout


def _submitted(course: Path, student: str) -> str | None:
    nb = course / "submitted" / student / CHAPTER / f"{CHAPTER}.ipynb"
    return nb.read_text() if nb.exists() else None


def test_a_classmates_folder_named_after_a_student_hides_nothing(accounts, class_course, tmp_path, monkeypatch):
    """ctest2 makes a folder named after ctest1 with a later time: it is ignored, and ctest1's own
    on-time submission is collected (nbgrader chose the later name, then refused it)."""
    inbound = _inbound(tmp_path, monkeypatch)
    _folder(inbound, f"ctest1+{CHAPTER}+2026-11-20 10:00:00.000000 UTC+a1", accounts["ctest1"], "ctest1's own")
    _folder(inbound, f"ctest1+{CHAPTER}+2026-11-29 10:00:00.000000 UTC+x", accounts["ctest2"], "planted")
    log = _collect(class_course)
    assert _submitted(class_course, "ctest1") == "ctest1's own", log
    assert "names student 'ctest1' but belongs to 'ctest2'" in log, log


def test_a_name_whose_time_does_not_parse_stops_no_one(accounts, class_course, tmp_path, monkeypatch):
    """Six honest students and one folder whose time does not parse: all six are collected, and the
    bad folder is named in a message (nbgrader stopped the whole collect on it)."""
    inbound = _inbound(tmp_path, monkeypatch)
    for i, s in enumerate(STUDENTS[:6]):
        _folder(inbound, f"{s}+{CHAPTER}+2026-11-2{i} 10:00:00.000000 UTC+r{i}", accounts[s], f"by {s}")
    _folder(inbound, f"ctest7+{CHAPTER}+not a time at all+r7", accounts["ctest7"], "bad name")
    _folder(inbound, f"ctest7+{CHAPTER}", accounts["ctest7"], "no time")
    log = _collect(class_course)
    assert [_submitted(class_course, s) for s in STUDENTS[:6]] == [f"by {s}" for s in STUDENTS[:6]], log
    assert _submitted(class_course, "ctest7") is None, log
    assert "'not a time at all' does not parse" in log and "is not student+chapter+time" in log, log


def _latest_ctime(folder: Path) -> float:
    return max(os.lstat(p).st_ctime for p in (folder, *folder.rglob("*")))


def test_the_time_of_submission_is_the_servers_not_the_students(accounts, class_course, tmp_path, monkeypatch):
    """A late submission whose name and timestamp.txt say 2020: submitted/ records the last change of
    the folder by the server's clock (nbgrader copied the student's timestamp.txt: no late penalty)."""
    from course_grading.inbound import server_time
    inbound = _inbound(tmp_path, monkeypatch)
    folder = _folder(inbound, f"ctest3+{CHAPTER}+2020-01-01 00:00:00.000000 UTC+old", accounts["ctest3"],
                     "late work", timestamp="2020-01-01 00:00:00.000000 UTC")
    log = _collect(class_course)
    assert _submitted(class_course, "ctest3") == "late work", log
    recorded = (class_course / "submitted" / "ctest3" / CHAPTER / "timestamp.txt").read_text()
    assert recorded == f"{server_time(_latest_ctime(folder)):%Y-%m-%d %H:%M:%S.%f} UTC", log
    assert not recorded.startswith("2020"), recorded


def test_a_file_grown_while_it_is_copied_is_cut_at_its_size_when_opened(accounts, class_course, tmp_path,
                                                                       monkeypatch):
    """The notebook grows by 64 MiB right after collect opens it (the moment a writer in another
    process would): collect copies the size it opened, within the 2 MiB budget set here (nbgrader's
    read to the end copied every byte the writer added)."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    from course_grading import collect
    inbound = _inbound(tmp_path, monkeypatch)
    folder = _folder(inbound, f"ctest4+{CHAPTER}+2026-11-20 10:00:00.000000 UTC+g", accounts["ctest4"], "x" * 2**20)
    nb = folder / f"{CHAPTER}.ipynb"
    target, real_fstat, grown = os.lstat(nb).st_ino, os.fstat, []

    def fstat_then_grow(fd):
        st = real_fstat(fd)
        if st.st_ino == target and not grown:
            grown.append(True)
            os.truncate(nb, st.st_size + 64 * 2**20)   # the writer: 64 MiB more, after the open
        return st

    monkeypatch.setattr(collect.os, "fstat", fstat_then_grow)
    shutil.rmtree(class_course / "submitted", ignore_errors=True)
    cfg = Config()
    cfg.CourseDirectory.root = str(class_course)
    cfg.CourseDirectory.course_id = exchange.COURSE_ID
    cfg.CourseDirectory.assignment_id = CHAPTER
    cfg.Exchange.root = str(inbound.parent.parent)
    cfg.CourseCollect.max_bytes = 2 * 2**20
    collect.CourseCollect(coursedir=CourseDirectory(config=cfg), authenticator=Authenticator(config=cfg),
                          config=cfg).start()
    assert grown, "the notebook was never opened"
    copied = class_course / "submitted" / "ctest4" / CHAPTER / f"{CHAPTER}.ipynb"
    assert copied.stat().st_size == 2**20


def test_a_copy_stops_at_its_byte_budget(tmp_path):
    """copy_tree refuses a file that would take the copy over what is left of its budget."""
    from course_grading.collect import Budget, copy_tree
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 1000)
    (src / "b").write_bytes(b"b" * 1000)
    with pytest.raises(Refused, match="over the size limit"):
        copy_tree(src, tmp_path / "dest", Budget(bytes=1500, files=50, depth=3))
    budget = Budget(bytes=2000, files=50, depth=3)
    copy_tree(src, tmp_path / "dest2", budget)
    assert budget.bytes == 0 and (tmp_path / "dest2" / "b").read_bytes() == b"b" * 1000


def test_a_copy_never_follows_a_link_it_finds(tmp_path):
    """copy_tree on its own (as after a check, had the folder changed since): a link to a folder or
    a file is refused, not followed."""
    from course_grading.collect import Budget, copy_tree
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("k")
    for i, target in enumerate((secret, secret / "key")):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / "inner").symlink_to(target)
        with pytest.raises(Refused, match="without following a link"):
            copy_tree(src, tmp_path / f"dest{i}", Budget(bytes=2**20, files=50, depth=3))
        assert not (tmp_path / f"dest{i}" / "inner" / "key").exists()


def test_names_that_give_no_student_are_ignored_even_when_names_are_trusted(tmp_path):
    from course_grading.inbound import Accounts, submissions
    for name in (f"..+{CHAPTER}+2026-11-20 10:00:00 UTC+r", f".hidden+{CHAPTER}+2026-11-20 10:00:00 UTC+r",
                 f"<img src=x onerror=alert(1)>+{CHAPTER}+2026-11-20 10:00:00 UTC+r",
                 f"ok+{CHAPTER}+2026-11-20 10:00:00 UTC+r"):
        (tmp_path / name).mkdir()
    messages = []
    log = type("Log", (), {"error": lambda self, *a: messages.append(a[0] % a[1:])})()
    found = submissions(tmp_path, CHAPTER, Accounts(trust_names=True), log=log)
    assert [s.student for s in found] == ["ok"], messages
    assert sum("gives no student id" in m for m in messages) == 3, messages
