"""Message classes, loaded on first access: ``messages.FetchResponse``, ``messages.ProduceRequest``.

Every name of a shipped schema works (``<Api>Request``, ``<Api>Response``, and the data types
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``). Nested structs are class
attributes of their top-level message class: ``messages.ProduceResponse.PartitionProduceResponse``.
"""

from .schema import load_message, schema_names


def __getattr__(name: str):
    if name[:1].isupper():
        try:
            cls = load_message(name)
        except KeyError:
            pass
        else:
            globals()[name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(
        set(globals()) | {n for n in schema_names() if n not in ("RequestHeader", "ResponseHeader")}
    )
