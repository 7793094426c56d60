import pytest

from watchdog_gpu.sim import graphql
from watchdog_gpu.sim.graphql import EnumValue, GraphQLError, ObjectType
from watchdog_gpu.sim.servers.runpod import SCHEMA


def test_the_official_sdks_pod_stop_mutation_parses() -> None:
    operation = graphql.parse(
        """
    mutation {
        podStop(input: { podId: "abc123" }) {
            id
            desiredStatus
        }
    }
    """
    )
    assert operation.kind == "mutation"
    [selection] = operation.selections
    assert selection.name == "podStop"
    assert selection.arguments == {"input": {"podId": "abc123"}}
    assert [field.name for field in selection.selections or ()] == ["id", "desiredStatus"]


def test_named_operations_variables_aliases_comments_and_literals_parse() -> None:
    operation = graphql.parse(
        """
        # list pods
        query Pods($id: String!, $flags: [Int!] = [1, 2]) {
          first: pod(input: {podId: $id, n: -1.5e2, on: true, off: null, kind: RESERVED,
                      text: "a \\"quoted\\" \\u00e9"}) { id, name }
        }
        """
    )
    [selection] = operation.selections
    assert operation.name == "Pods"
    assert selection.key == "first"
    arguments = graphql.resolve_arguments(selection.arguments, {"id": "p1"})
    assert arguments["input"] == {
        "podId": "p1",
        "n": -150.0,
        "on": True,
        "off": None,
        "kind": "RESERVED",
        "text": 'a "quoted" é',
    }
    assert isinstance(selection.arguments["input"]["kind"], EnumValue)


def test_a_missing_variable_is_an_error() -> None:
    operation = graphql.parse("query ($id: String!) { pod(input: {podId: $id}) { id } }")
    with pytest.raises(GraphQLError, match="was not provided"):
        graphql.resolve_arguments(operation.selections[0].arguments, {})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("query { myself { id ", "Unexpected <EOF>"),
        ("query { myself { id } } query { x }", "only one operation"),
        ("subscription { x }", "unsupported operation"),
        ("query { myself { ...Frag } }", "fragments"),
        ("query { myself { id } ~ }", "Unexpected character"),
    ],
)
def test_syntax_errors_are_graphql_errors(document: str, message: str) -> None:
    with pytest.raises(GraphQLError, match=message):
        graphql.parse(document)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("query { myself { balance } }", 'Cannot query field "balance" on type "User"'),
        ("query { myself }", "must have a selection"),
        ("query { myself { id { x } } }", "must not have a selection"),
        (
            "query { myself { pods { runtime { gpus { util } } } } }",
            '"util" on type "PodRuntimeGpus"',
        ),
    ],
)
def test_validation_refuses_what_the_schema_does_not_have(document: str, message: str) -> None:
    operation = graphql.parse(document)
    with pytest.raises(GraphQLError, match=message):
        graphql.validate(operation.selections, "Query", SCHEMA)


def test_projection_keeps_only_selected_fields_calls_lazy_ones_and_names_types() -> None:
    schema = {
        "Query": ObjectType("Query", {"a": None, "b": "B"}),
        "B": ObjectType("B", {"c": None}),
    }
    operation = graphql.parse("{ a renamed: b { c __typename } __typename }")
    graphql.validate(operation.selections, "Query", schema)
    value = {"a": 1, "b": lambda: [{"c": 2, "d": 3}], "z": 9}

    assert graphql.project(value, operation.selections, "Query", schema) == {
        "a": 1,
        "renamed": [{"c": 2, "__typename": "B"}],
        "__typename": "Query",
    }
