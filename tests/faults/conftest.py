"""The fault suite's tests import it as ``bench.faults`` (the repository root on sys.path)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
