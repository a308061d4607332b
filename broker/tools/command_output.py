"""Output of the admin commands: aligned tables for a person, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence


def table(rows: Sequence[dict], columns: Sequence[str], out=None) -> None:
    """``rows`` under ``columns`` (upper-cased headers), each column as wide as its widest cell."""
    out = out or sys.stdout
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    header = [c.upper().replace("_", " ") for c in columns]
    for line in [header, *cells]:
        print("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip(), file=out)


def as_json(value: object, out=None) -> None:
    print(json.dumps(value, indent=2, sort_keys=False), file=out or sys.stdout)


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
