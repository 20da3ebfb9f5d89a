import sys

from course_grading.cli import main

sys.exit(main())
