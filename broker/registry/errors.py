"""The registry's errors, as Confluent's Schema Registry answers them: an HTTP status and a
JSON body ``{"error_code": ..., "message": ...}`` (codes and messages from Confluent's
``Errors`` and its API reference).
"""

from __future__ import annotations

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
SCHEMA_TOO_LARGE = 42209
INVALID_RULESET = 42210
CONTEXT_NOT_EMPTY = 42211
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """An answer other than success: ``status`` (HTTP), ``code`` (Confluent's error code)."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | str | None = None) -> RegistryError:
    """40403, naming the id or GUID asked for when there is one."""
    text = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, SCHEMA_NOT_FOUND, text)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        SUBJECT_SOFT_DELETED,
        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        SUBJECT_NOT_SOFT_DELETED,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        VERSION_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete"
        " permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        VERSION_NOT_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was not deleted first before being permanently"
        " deleted",
    )


def compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        404,
        SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
        f"Subject '{subject}' does not have subject-level compatibility configured",
    )


def mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        404,
        SUBJECT_MODE_NOT_CONFIGURED,
        f"Subject '{subject}' does not have subject-level mode configured",
    )


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    return RegistryError(
        409,
        INCOMPATIBLE_SCHEMA,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}",'
        f" details: [{', '.join(messages)}]",
    )


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema {message}")


def version_not_next() -> RegistryError:
    """42201 for a registration whose ``version`` is not the subject's next one."""
    return RegistryError(422, INVALID_SCHEMA, "Version is not one more than previous version")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. Allowed values are"
        ' between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level() -> RegistryError:
    return RegistryError(
        422,
        INVALID_COMPATIBILITY_LEVEL,
        "Invalid compatibility level. Valid values are none, backward, forward, full,"
        " backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode() -> RegistryError:
    return RegistryError(
        422,
        INVALID_MODE,
        "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, and IMPORT",
    )


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, REFERENCE_EXISTS, message)


def id_does_not_match(message: str) -> RegistryError:
    return RegistryError(422, ID_DOES_NOT_MATCH, message)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not valid.")


def schema_too_large(message: str) -> RegistryError:
    return RegistryError(422, SCHEMA_TOO_LARGE, message)


def invalid_rule_set(message: str) -> RegistryError:
    return RegistryError(422, INVALID_RULESET, f"Invalid rule set: {message}")


def context_not_empty(context: str) -> RegistryError:
    return RegistryError(422, CONTEXT_NOT_EMPTY, f"The specified context '{context}' is not empty.")


def store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)


def timed_out(message: str) -> RegistryError:
    return RegistryError(500, OPERATION_TIMEOUT, message)


def forwarding_failed(message: str) -> RegistryError:
    return RegistryError(500, FORWARDING_FAILED, message)


def unknown_leader(message: str) -> RegistryError:
    return RegistryError(500, UNKNOWN_LEADER, message)
