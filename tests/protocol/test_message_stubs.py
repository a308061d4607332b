"""protocol/messages.pyi, the static types of the message classes: current, complete, and
naming what the classes made at run time have.

The stub is written by ``python -m headrace.protocol.stubs``; when the first test fails, run
that and commit the result. The others read the committed file with ``ast`` and hold it
against the classes ``messages`` makes: every schema is a class, every struct a class nested
in its message, with the same fields in the same order, and an ``__init__`` taking the same
keyword arguments with the same defaults.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from headrace.protocol import messages, stubs
from headrace.protocol.schema import Struct, load_message, schema_names


def parse_stub() -> dict[str, ast.ClassDef]:
    tree = ast.parse(stubs.STUB_PATH.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


STUB = parse_stub()
NAMES = schema_names()


def fields_of(node: ast.ClassDef) -> list[str]:
    """The instance attributes a stub class declares (not its ClassVars)."""
    out = []
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if "ClassVar" not in ast.unparse(item.annotation):
                out.append(item.target.id)
    return out


def init_of(node: ast.ClassDef) -> ast.FunctionDef:
    (init,) = [i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"]
    return init


def nested_of(node: ast.ClassDef) -> dict[str, ast.ClassDef]:
    return {i.name: i for i in node.body if isinstance(i, ast.ClassDef)}


def test_the_stub_is_current():
    # fails after a schema change (a new kafka-python wheel, a file in protocol/schemas/) or a
    # change of stubs.py: python -m headrace.protocol.stubs
    assert stubs.render() == stubs.STUB_PATH.read_text(encoding="utf-8")
    assert stubs.main(["--check"]) == 0


def test_the_stub_names_every_schema():
    assert len(NAMES) > 100 and {"ProduceRequest", "FetchResponse"} <= set(NAMES)
    assert sorted(STUB) == NAMES
    for name in NAMES:  # and each is a class at run time
        assert getattr(messages, name) is load_message(name)


def check_class(runtime: type, node: ast.ClassDef) -> None:
    assert fields_of(node) == list(runtime._fields), runtime.__qualname__
    init = init_of(node)
    stub_params = [a.arg for a in init.args.kwonlyargs]
    runtime()  # (the class's constructor is compiled on first use)
    params = list(inspect.signature(runtime.__init__).parameters.values())[1:]
    assert stub_params == [p.name for p in params], runtime.__qualname__
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    for p, default in zip(params, init.args.kw_defaults):
        assert default is not None, f"{runtime.__qualname__}.{p.name} has no default"
        if isinstance(default, ast.Constant) and default.value is not Ellipsis:
            assert type(default.value) is type(p.default), f"{runtime.__qualname__}.{p.name}"
            assert default.value == p.default, f"{runtime.__qualname__}.{p.name}"


@pytest.mark.parametrize("name", NAMES)
def test_the_stub_has_the_fields_and_constructor_of_the_class(name):
    cls = load_message(name)
    node = STUB[name]
    check_class(cls, node)
    nested = nested_of(node)
    assert sorted(nested) == sorted(cls._spec.structs)
    for struct_name, struct_node in nested.items():
        struct_cls = getattr(cls, struct_name)
        assert issubclass(struct_cls, Struct)
        check_class(struct_cls, struct_node)


@pytest.mark.parametrize(
    ("name", "path", "expected"),
    [
        ("ProduceResponse", "TopicProduceResponse", ["name", "topic_id", "partition_responses"]),
        ("MetadataRequest", "", ["topics", "allow_auto_topic_creation"]),
        ("FetchResponse", "PartitionData", ["partition_index", "error_code", "high_watermark"]),
    ],
)
def test_a_few_classes_by_hand(name, path, expected):
    cls = load_message(name)
    node = STUB[name]
    if path:
        cls, node = getattr(cls, path), nested_of(node)[path]
    assert fields_of(node)[: len(expected)] == expected
    assert list(cls._fields[: len(expected)]) == expected


def annotations(name: str, struct: str = "") -> dict[str, str]:
    node = STUB[name] if not struct else nested_of(STUB[name])[struct]
    return {
        i.target.id: ast.unparse(i.annotation)
        for i in node.body
        if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)
    }


def test_field_types_follow_the_schema():
    produce = annotations("ProduceRequest")
    assert produce["transactional_id"] == "str | None"  # nullable
    assert produce["acks"] == "int"
    assert produce["topic_data"] == "list[TopicProduceData]"
    data = annotations("ProduceRequest", "PartitionProduceData")
    assert data["records"] == "_Records | None"
    topic = annotations("MetadataResponse", "MetadataResponseTopic")
    assert topic["topic_id"] == "UUID"
    assert topic["partitions"] == "list[MetadataResponse.MetadataResponsePartition]"
    assert topic["is_internal"] == "bool"
    assert annotations("MetadataResponse")["API_KEY"] == "ClassVar[int]"
    assert annotations("ConsumerProtocolSubscription")["API_KEY"] == "ClassVar[None]"
