"""Insert the empty `<!-- domain: ... -->` markers into the prompts of declared exercises that lack them
(the end of the markdown cell just before the exercise's answer cell); then run
`python -m course_utils.domains --write` to fill them."""

import sys

from course_utils import domains


def main(chapter_module: str) -> None:
    for ex in domains.declarations(chapter_module):
        path = domains._source(ex, domains.ROOT)
        lines = path.read_text(encoding="utf-8").split("\n")
        start, end = domains._marker(ex)
        if f"# {start}" in lines:
            continue
        head = next(i for i, ln in enumerate(lines) if ln.startswith("# %% nbgrader=")
                    and f'"grade_id": "{ex.exercise}"' in ln)
        i = head - 1
        while not lines[i].strip():
            i -= 1
        lines[i + 1:i + 1] = ["#", f"# {start}", f"# {end}"]
        path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
