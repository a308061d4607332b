"""``python -m compat``: run the compatibility suite (see compat/run.py)."""

import sys

from compat.run import main

sys.exit(main())
