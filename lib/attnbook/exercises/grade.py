"""``python -m attnbook.exercises.grade`` is now ``python -m attnbook.grading``; this alias stays for one release."""

import sys

if __name__ == "__main__":
    from attnbook.grading.cli import main

    print("python -m attnbook.exercises.grade is now python -m attnbook.grading", file=sys.stderr)
    sys.exit(main())
