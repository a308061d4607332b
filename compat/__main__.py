"""``python -m compat``: run the compatibility suite.

The files, in reading order: ``run.py`` (the command line), ``clients.py`` (the clients and
their installers), ``runner.py`` (a broker per client, a process per scenario), ``kit.py``
(what the Python scenario programs share; ``<client>/scenarios.py`` are those programs),
``broker.py`` (what is read from the broker's log), ``matrix.py`` (the matrix and its section
of docs/clients.md). ``capture.py`` is a separate tool.
"""

import sys

from compat.run import main

sys.exit(main())
