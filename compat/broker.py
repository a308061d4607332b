"""What the compatibility suite reads from a Headrace broker's log."""

from __future__ import annotations

from headrace.broker.process import BrokerProcess


def complaints_since(broker: BrokerProcess, mark: int, limit: int = 3) -> list[str]:
    """What the broker logged about failed or refused requests since ``seen`` was
    ``mark``: "closing ..." lines and the last line of each traceback, deduplicated."""
    new = broker.lines[-(broker.seen - mark):] if broker.seen > mark else []
    out: list[str] = []
    for i, line in enumerate(new):
        text = None
        if " closing " in line or " WARNING " in line or " ERROR " in line:
            text = line.split(" ", 3)[-1] if line[:2].isdigit() else line
        elif line and not line.startswith((" ", "Traceback")) and \
                i > 0 and new[i - 1].startswith(" ") and ("Error" in line or "Exception" in line):
            where = next((ln.strip() for ln in reversed(new[:i]) if ln.strip().startswith("File ")), "")
            text = f"{line} ({where})" if where else line
        if text:
            text = text.replace("request failed", "request failed:")
            if text not in out:
                out.append(text)
    return out[-limit:]


def tail(broker: BrokerProcess, n: int = 5) -> str:
    return " | ".join(broker.lines[-n:])
