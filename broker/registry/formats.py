"""``format=``: a schema's text in the form a read asks for, as Confluent's registry gives it
(``ParsedSchema.formattedString`` of ``AvroSchema``, ``JsonSchema`` and ``ProtobufSchema``).

A value is matched whatever its case (Confluent's ``Format.get`` lowercases it). An empty
value, or one the schema's type does not know, gives the text as kept, never an error (as in
Confluent's: "forward compatibility of formats"):

=========  =====================  ========================================================
type       value                  text
=========  =====================  ========================================================
AVRO       ``resolved``           Avro's ``Schema.toString()``: the named types of the
                                  schemas it references written out where first used, not
                                  by name, so the text parses alone (avro_canonical.py)
AVRO       ``default``            as kept
JSON       any                    as kept
PROTOBUF   ``serialized``         a base64 ``FileDescriptorProto`` (protobuf_text.py)
PROTOBUF   ``default``,           as kept (the kept text holds no extensions)
           ``ignore_extensions``
=========  =====================  ========================================================

The ``guid`` answered with a formatted text stays the kept schema's, as in Confluent's.
Confluent's ``logical`` (a DDL of the schema's logical types, in its development branch
only) is not known here: it gives the text as kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .errors import RegistryError
from .state import Stored

RESOLVED = "resolved"
SERIALIZED = "serialized"


def formatted(stored: Stored, fmt: str | None, reference_texts: Callable[[], list[str]]) -> str:
    """The text of ``stored`` in format ``fmt``; ``reference_texts()`` gives the texts of the
    schemas it references (theirs first), asked for only when the format needs them."""
    if fmt is None or not fmt.strip():
        return stored.text
    name = fmt.lower()
    try:
        if stored.schema_type == "AVRO" and name == RESOLVED:
            return _avro_resolved(stored.text, reference_texts())
        if stored.schema_type == "PROTOBUF" and name == SERIALIZED:
            from .protobuf_text import encode_base64, to_descriptor

            return encode_base64(to_descriptor(stored.text))
    except (RegistryError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        pass  # (a kept text, or a reference, that no longer parses: not expected)
    return stored.text


def _avro_resolved(text: str, references: list[str]) -> str:
    from .avro_canonical import canonical

    return canonical(json.loads(text), [json.loads(r) for r in references], resolved=True)
