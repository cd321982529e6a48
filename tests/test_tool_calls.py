"""Tool declarations and calls (evolver/tool_calls.py): checked schemas with errors that say what to fix, the
schema of one call, the canonical action text, calls parsed from written text and validated against the tools.
The seed harness's use of them is in tests/test_benchmark_contract.py."""
import json

import pytest

from evolver import ToolCalls

SEND = {"type": "function", "function": {
    "name": "send_money", "description": "Send money.",
    "parameters": {"type": "object", "required": ["recipient", "amount"],
                   "properties": {"recipient": {"type": "string"}, "amount": {"type": "number", "minimum": 0}}}}}
BALANCE = {"name": "get_balance", "description": "The balance."}  # bare, no parameters: wrapped


def test_check_normalises_bare_tools_and_keeps_openai_ones():
    tools = ToolCalls.check([SEND, BALANCE])
    assert tools[0] == SEND
    assert tools[1] == {"type": "function", "function": {"name": "get_balance", "description": "The balance.",
                                                         "parameters": {"type": "object", "properties": {}}}}
    assert ToolCalls.names(tools) == ["send_money", "get_balance"]


@pytest.mark.parametrize("tools, says", [
    ([], "non-empty list"),
    ("send_money", "non-empty list"),
    ([42], "tool 0 is a int"),
    ([{"function": {"name": "send money"}}], "1-64 letters"),
    ([SEND, SEND], "declared twice"),
    ([{"function": {"name": "f", "parameters": {"type": "string"}}}], "schema of an object"),
    ([{"function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "strnig"}}}}}],
     "not a valid JSON schema at properties/x/type"),
    ([{"function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"$ref": "other.json"}}}}}],
     "inline the definitions"),
    ([{"function": {"name": "f", "parameters": {"type": "object", "$defs": {"P": {"type": "string"}},
                                                "properties": {"x": {"$ref": "#/$defs/P"}}}}}], "parameters use [$]ref"),
    ([{"function": {"name": "f", "description": 3}}], "description must be a string"),
])
def test_a_malformed_declaration_is_a_clear_error(tools, says):
    with pytest.raises(ToolCalls.SchemaError, match=says):
        ToolCalls.check(tools)


def test_call_schema_names_first_and_narrows_to_a_chosen_tool():
    tools = ToolCalls.check([SEND, BALANCE])
    both = ToolCalls.schema(tools)
    assert [o["properties"]["name"] for o in both["anyOf"]] == [{"const": "send_money"}, {"const": "get_balance"}]
    assert list(both["anyOf"][0]["properties"]) == ["name", "arguments"]
    one = ToolCalls.schema(tools, {"type": "function", "function": {"name": "get_balance"}})
    assert one["properties"]["name"] == {"const": "get_balance"}
    assert ToolCalls.choice("required", tools) == "required" and ToolCalls.choice(None, tools) == "auto"
    assert ToolCalls.choice("required", None) == "none"
    with pytest.raises(ToolCalls.SchemaError, match="none of auto, required, none or a listed tool"):
        ToolCalls.choice("transfer", tools)


def test_action_is_canonical_and_parse_reads_written_calls():
    a = ToolCalls.action({"arguments": {"b": 1, "a": "é"}, "name": "f"})
    assert a == '{"name": "f", "arguments": {"a": "é", "b": 1}}'  # no tools: the arguments sorted
    assert ToolCalls.action(json.loads(a)) == a
    call = {"arguments": {"amount": 5, "memo": "rent", "recipient": "bob"}, "name": "send_money"}
    # with the tools: the schema's order (what the grammar writes), keys it does not list after, sorted
    assert ToolCalls.action(call, [SEND]) == '{"name": "send_money", "arguments": {"recipient": "bob", "amount": 5, "memo": "rent"}}'
    assert ToolCalls.parse('Sure. {"name": "f", "parameters": "{\\"x\\": 2}"} done') == {"name": "f", "arguments": {"x": 2}}
    assert ToolCalls.parse("{not json} and {\"no\": \"name\"}") is None and ToolCalls.parse("") is None


def test_validate_says_what_is_wrong_with_a_call():
    tools = ToolCalls.check([SEND, BALANCE])
    assert ToolCalls.validate({"name": "send_money", "arguments": {"recipient": "bob", "amount": 5}}, tools) is None
    assert "unknown tool 'pay'" in ToolCalls.validate({"name": "pay", "arguments": {}}, tools)
    assert "'amount' is a required property" in ToolCalls.validate({"name": "send_money", "arguments": {"recipient": "b"}}, tools)
    assert "argument amount" in ToolCalls.validate({"name": "send_money", "arguments": {"recipient": "b", "amount": -1}}, tools)
    assert "must be a JSON object" in ToolCalls.validate({"name": "get_balance", "arguments": "[]"}, tools)
    assert "not a call" in ToolCalls.validate("send_money", tools)
