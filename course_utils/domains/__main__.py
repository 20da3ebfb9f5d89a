"""``python -m course_utils.domains --check`` / ``--write``: the prompts' generated lists."""

import sys

from course_utils.domains import main

sys.exit(main())
