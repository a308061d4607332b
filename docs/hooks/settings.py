"""MkDocs hook: the tables of docs/reference/settings.md, made from the settings themselves.

``BROKER_SETTINGS`` and ``TOPIC_SETTINGS`` in broker/config/settings.py are what the broker checks
its settings against (``headrace settings`` prints them). At every build this hook loads that
file by its path, relative to this one (it imports only the standard library at module level),
so the build needs neither Headrace installed nor its dependencies and reads this checkout's
settings whatever an editable install points at. It puts a table where the page says
``<!-- settings:broker -->`` and one where it says ``<!-- settings:topic -->``; nothing
generated is committed. A marker missing from the page stops the build.
"""

from __future__ import annotations

import html
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from mkdocs.exceptions import PluginError

SETTINGS_PY = Path(__file__).resolve().parents[2] / "broker" / "config" / "settings.py"
PAGE = "reference/settings.md"
MARKERS = ("<!-- settings:broker -->", "<!-- settings:topic -->")
LISTENER_PREFIX = "listener.name.<listener>."


def load_config(path: Path = SETTINGS_PY) -> ModuleType:
    """broker/config/settings.py as a module of its own (not ``headrace.broker.config.settings``)."""
    name = "_headrace_docs_config"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses looks its module up while making Setting
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


_MS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))
_BYTES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _hint(name: str, value: int) -> str:
    """A reading of a round default: 604800000 ms is 7 days, 1073741824 bytes 1 GiB."""
    if value <= 0 or value >= (1 << 62):
        return ""
    if name.endswith(".ms"):
        for unit, word in _MS:
            if value % unit == 0:
                n = value // unit
                return f" ({n} {word}{'s' if n != 1 else ''})"
    if "bytes" in name or name.endswith(".size"):
        for unit, word in _BYTES:
            if value % unit == 0:
                return f" ({value // unit} {word})"
    return ""


def default_text(name: str, value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "" or value is None:
        return "(empty)"
    if isinstance(value, int):
        return f"`{value}`{_hint(name, value)}"
    return f"`{value}`"


def prose(text: str) -> str:
    """A setting's doc as table-cell text: no HTML, no Markdown emphasis or links by accident."""
    text = html.escape(text, quote=False)
    for ch in "\\`*_[]|":
        text = text.replace(ch, "\\" + ch)
    return text


def broker_table(config: ModuleType) -> str:
    rows = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    for name in sorted(config.BROKER_SETTINGS):
        s = config.BROKER_SETTINGS[name]
        doc = prose(s.doc)
        if s.topic:
            doc += f" Topic setting: `{s.topic}`."
        if name in config.LISTENER_SETTINGS:
            doc += f" Also per listener, as `{LISTENER_PREFIX}{name}`"
            if name == "sasl.jaas.config":  # config._listener_setting: per mechanism too
                doc += f" or `{LISTENER_PREFIX}<mechanism>.{name}`"
            doc += "."
        rows.append(f"| `{name}` | {s.type} | {default_text(name, s.default)} | {doc} |")
    return "\n".join(rows) + "\n"


def topic_table(config: ModuleType) -> str:
    rows = [
        "| setting | type | default: the broker setting (its default) | what it does |",
        "|---|---|---|---|",
    ]
    for topic in sorted(config.TOPIC_SETTINGS):
        s = config.TOPIC_SETTINGS[topic]
        default = default_text(s.name, s.default)
        if s.name == topic:  # a topic setting with no broker setting beside it
            default = f"none ({default})"
        else:
            default = f"`{s.name}` ({default})"
        rows.append(f"| `{topic}` | {s.type} | {default} | {prose(s.doc)} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    missing = [m for m in MARKERS if m not in markdown]
    if missing:
        raise PluginError(f"docs/{PAGE} lacks {', '.join(missing)}")
    settings = load_config()
    markdown = markdown.replace(MARKERS[0], broker_table(settings))
    return markdown.replace(MARKERS[1], topic_table(settings))
