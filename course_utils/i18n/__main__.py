"""``python -m course_utils.i18n update|check|stats [--lang zh_CN] [DOMAIN ...]``

* ``update``: bring each catalogue up to date with its English source, then write ``README.<lang>.md``
  from the ``readme`` catalogue and ``solutions/model_answers.<lang>.md`` from the chapters' (``make
  translations``).
* ``check``: list every untranslated, fuzzy or faulty entry; exit 1 if there is one.
* ``stats``: entries, translated, fuzzy and untranslated per catalogue.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course_utils.i18n import answers, catalogue, readme, sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.i18n", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["update", "check", "stats"])
    parser.add_argument("domains", nargs="*", help="chapters, readme, site (default: all)")
    parser.add_argument("--lang", default="zh_CN", choices=catalogue.LANGUAGES)
    parser.add_argument("--root", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    root = args.root.resolve()
    names = args.domains or sources.domains(root)
    failed = 0
    for domain in names:
        path = catalogue.po_path(root, args.lang, domain)
        fresh = sources.fresh(root, domain)
        if args.command == "update":
            cat = catalogue.update(path, fresh, args.lang)
        else:
            cat = catalogue.read(path)
        s = catalogue.stats(cat)
        print(f"{domain:32} {s.entries:4} entries {s.translated:4} translated {s.fuzzy:4} fuzzy {s.untranslated:4} untranslated")
        if args.command == "check":
            found = catalogue.problems(cat, fresh)
            for p in found:
                print(f"  {p}")
            failed += bool(found)
    if args.command == "update" and "readme" in names:
        print(f"wrote {readme.write(root, args.lang).relative_to(root)}")
    if args.command == "update" and set(names) & set(sources.chapter_names(root)):
        print(f"wrote {answers.write(root, args.lang).relative_to(root)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
