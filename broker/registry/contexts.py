"""Schema contexts: Confluent's qualified subject names (``QualifiedSubject``), so that a
subject ``:.ctx:orders-value`` lives in context ``.ctx``, apart from ``orders-value`` in the
default context ``.``.

How this works
--------------
A subject in a path, a query or a reference is read as Confluent reads it (``split``):
``:.ctx:name`` is ``name`` in context ``.ctx``; ``:.ctx`` (no second colon) is the context
itself (an empty name); anything else, ``:x:y`` too (no dot), is a name in the default context.
Subjects are kept and answered qualified (``normalize``): a named context's as ``:.ctx:name``,
the default context's bare (``:.:name`` is ``name``). A context's own settings are kept under
its empty-named subject (``context_subject``: ``:.ctx:``), Confluent's CONFIG and MODE keys;
``:.__GLOBAL:`` (``GLOBAL``) holds the settings every context falls back to (Confluent 8.1).

A reference names a subject relative to the schema that holds it (``qualify_reference``,
Confluent's ``qualifySubjectWithParent``): an unqualified name is in the referring schema's
context.

Lists take Confluent's ``subjectPrefix`` (``in_prefix``): ``:*:`` (``WILDCARD``, the default
of ``GET /subjects``) is every context, ``:*:name`` a name prefix in every context; any other
prefix covers the qualified subjects from the prefix to the prefix followed by U+FFFF, in the
order of (context, name), so ``""`` is the default context's subjects, ``:.ctx:`` those of
``.ctx``, ``:.ct`` those of every context whose name starts ``.ct``.
"""

from __future__ import annotations

DEFAULT = "."
WILDCARD = ":*:"
GLOBAL = ".__GLOBAL"  # settings every context falls back to; holds no subject
_PREFIX = ":."
_LAST = "\uffff"  # Java's Character.MAX_VALUE, the end of a prefix's range


def split(subject: str) -> tuple[str, str]:
    """(context, name) of a subject as written, as Confluent's ``QualifiedSubject``."""
    if subject.startswith(_PREFIX):
        end = subject.find(":", len(_PREFIX))
        if end < 0:
            return subject[1:], ""
        return subject[1:end], subject[end + 1 :]
    return DEFAULT, subject


def qualified(context: str, name: str) -> str:
    """The subject ``name`` of ``context`` as kept and answered."""
    return name if context == DEFAULT else f":{context}:{name}"


def normalize(subject: str) -> str:
    """A subject as kept: ``:.:name`` is ``name``, ``:.ctx:name`` stays."""
    return qualified(*split(subject))


def context_of(subject: str) -> str:
    return split(subject)[0]


def context_subject(context: str) -> str:
    """The subject a context's own config and mode are kept under (``:.ctx:``)."""
    return qualified(context, "")


def is_context(subject: str) -> bool:
    """Whether ``subject`` names a context, not a subject in it (``:.ctx:``)."""
    return split(subject)[1] == ""


def qualify_reference(context: str, subject: str) -> str:
    """The subject a reference names, read in ``context`` (the referring schema's): an
    unqualified one is in that context."""
    own, name = split(subject)
    return qualified(context if own == DEFAULT else own, name)


def in_prefix(subject: str, prefix: str) -> bool:
    """Whether a kept subject is listed under Confluent's ``subjectPrefix`` (module doc)."""
    context, name = split(subject)
    if prefix.startswith(WILDCARD):
        return name.startswith(prefix[len(WILDCARD) :])
    return split(prefix) <= (context, name) <= split(prefix + _LAST)


def names_context(subject: str) -> bool:
    """Whether a subject as written names its context (``:.ctx:name``, ``:.:name``,
    ``:*:name``), so that a context path prefix leaves it as it is (context_paths.py)."""
    return subject.startswith((_PREFIX, WILDCARD))
