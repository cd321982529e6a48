"""Tool calls: the tools a task declares, the calls a model makes, and the text an environment gets.

A benchmark declares its tools as JSON schemas in OpenAI's ``tools`` format (``Task.tools``):
``{"type": "function", "function": {"name", "description", "parameters"}}``, ``parameters`` a JSON schema
of an object. A harness passes them with a request (``GenRequest.tools`` and ``tool_choice``), and every
backend answers with ``GenResult.tool_calls``: the OpenAI backend natively, the local engines by decoding
under a grammar built from :func:`call_schema`, so a call always parses. A call is ``{"name", "arguments"}``;
the environment gets it, and the store keeps it, as :func:`action` writes it (one canonical JSON text: the
name, then the arguments in their schema's order), so traces and SQL read the same whatever the engine.

This module is part of the harness API (a sandboxed harness imports it) and needs no model.
"""
from __future__ import annotations

import json
import re
from typing import Any

from evolver.errors import EvolverError

#: What OpenAI accepts as a function name (and what a grammar can write without escaping).
NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"
#: ``tool_choice`` values besides a tool's name: "auto" (a call or a final message), "required" (a call),
#: "none" (a message; the request decodes unconstrained).
CHOICES = ("auto", "required", "none")


class ToolSchemaError(EvolverError):
    """A tool declaration that is not a usable JSON schema in OpenAI's function format."""


def check_tools(tools: Any) -> list[dict]:
    """``tools`` in OpenAI's format, each ``{"type": "function", "function": {"name", "description",
    "parameters"}}`` (a bare ``{"name", "parameters"}`` is wrapped; missing ``parameters`` is an object with
    no properties). Raises :class:`ToolSchemaError` naming the tool and what to fix."""
    if not isinstance(tools, list) or not tools:
        raise ToolSchemaError(f"tools must be a non-empty list of OpenAI function schemas; got {type(tools).__name__}")
    out, seen = [], set()
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        where = f"tool {i}"
        if not isinstance(fn, dict):
            raise ToolSchemaError(f"{where} is a {type(tool).__name__}; write "
                                  '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
        name = fn.get("name")
        if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
            raise ToolSchemaError(f"{where} has name {name!r}; a tool's name is 1-64 letters, digits, '_', '.' or '-'")
        where = f"tool {name!r}"
        if name in seen:
            raise ToolSchemaError(f"{where} is declared twice; tool names must be unique")
        seen.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolSchemaError(f"{where}: parameters must be a JSON schema of an object "
                                  '({"type": "object", "properties": {...}}); got ' + json.dumps(params)[:120])
        _check_schema(params, where)
        desc = fn.get("description", "")
        if not isinstance(desc, str):
            raise ToolSchemaError(f"{where}: description must be a string")
        out.append({"type": "function", "function": {"name": name, "description": desc,
                                                     "parameters": {"type": "object", **params}}})
    return out


def _check_schema(schema: dict, where: str) -> None:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "/".join(map(str, exc.path)) or "(top)"
        raise ToolSchemaError(f"{where}: its parameters are not a valid JSON schema at {path}: {exc.message}") from None
    if '"$ref"' in json.dumps(schema):  # a call's schema nests the parameters: no pointer into them survives
        raise ToolSchemaError(f"{where}: its parameters use $ref; inline the definitions they refer to")


def names(tools: list[dict]) -> list[str]:
    """The tools' names, in order."""
    return [t.get("function", t).get("name") for t in tools]


def _params(tool: dict) -> dict:
    fn = tool.get("function", tool)
    return fn.get("parameters") or {"type": "object", "properties": {}}


def choice_of(tool_choice: Any, tools: list[dict] | None) -> str:
    """A request's ``tool_choice`` as one word: "none" without tools, else "auto", "required", "none" or a
    tool's name (OpenAI's ``{"type": "function", "function": {"name": ...}}`` is read as that name)."""
    if not tools:
        return "none"
    if isinstance(tool_choice, dict):
        tool_choice = (tool_choice.get("function") or {}).get("name")
    if tool_choice in (None, ""):
        return "auto"
    if tool_choice in CHOICES or tool_choice in names(tools):
        return str(tool_choice)
    raise ToolSchemaError(f"tool_choice {tool_choice!r} is none of {', '.join(CHOICES)} or a listed tool "
                          f"({', '.join(names(tools))})")


def call_schema(tools: list[dict], tool_choice: Any = None) -> dict:
    """The JSON schema of one call of ``tools`` (of the one ``tool_choice`` names, if it names one):
    ``{"name": NAME, "arguments": {...}}`` with the arguments that tool's parameters allow, name first."""
    choice = choice_of(tool_choice, tools)
    chosen = [t for t in tools if choice not in names(tools) or t.get("function", t).get("name") == choice]
    options = [{"type": "object",
                "properties": {"name": {"const": t.get("function", t)["name"]}, "arguments": _params(t)},
                "required": ["name", "arguments"], "additionalProperties": False} for t in chosen]
    return options[0] if len(options) == 1 else {"anyOf": options}


def action(call: dict, tools: list[dict] | None = None) -> str:
    """The text an environment gets for ``call`` (and the store keeps): JSON of its name, then its arguments,
    in the order the local engines' grammar writes them: each object's keys in its schema's ``properties``
    order when ``tools`` are given (the called tool's), the rest after them, sorted. One text per call, so a
    demonstration trains exactly the tokens the grammar lets the policy write."""
    name, args = call.get("name"), call.get("arguments", {})
    tool = next((t for t in tools or [] if t.get("function", t).get("name") == name), None)
    return json.dumps({"name": name, "arguments": _ordered(args, _params(tool) if tool else {})}, ensure_ascii=False)


def _ordered(value: Any, schema: dict) -> Any:
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema, dict) else None
        props = props if isinstance(props, dict) else {}
        keys = [k for k in props if k in value] + sorted(k for k in value if k not in props)
        return {k: _ordered(value[k], props.get(k, {})) for k in keys}
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_ordered(v, items if isinstance(items, dict) else {}) for v in value]
    return value


def parse(text: str) -> dict | None:
    """The first JSON object in ``text`` that names a tool (``"name"``, with ``"arguments"`` or
    ``"parameters"``; arguments given as JSON text are parsed) as ``{"name", "arguments"}``, or None."""
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"\{", text or "")][:20]:
        try:
            obj, _ = decoder.raw_decode(text[start:])
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            return {"name": obj["name"], "arguments": args}
    return None


def validate(call: Any, tools: list[dict]) -> str | None:
    """Why ``call`` is not a valid call of one of ``tools`` (unknown name, arguments its schema rejects),
    or None when it is."""
    import jsonschema

    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return "not a call: expected {\"name\": ..., \"arguments\": {...}}"
    tool = next((t for t in tools if t.get("function", t).get("name") == call["name"]), None)
    if tool is None:
        return f"unknown tool {call['name']!r}; listed: {', '.join(names(tools))}"
    args = call.get("arguments", {})
    if not isinstance(args, dict):
        return f"{call['name']}: arguments must be a JSON object, got {type(args).__name__}"
    schema = _params(tool)
    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(args))
    if error is None:
        return None
    where = "/".join(map(str, error.absolute_path))
    return f"{call['name']}: {'argument ' + where + ': ' if where else ''}{error.message}"


class ToolCalls:
    """Tool declarations and calls (a namespace: ``ToolCalls.check(tools)``, never an instance): check a
    benchmark's ``Task.tools``, the JSON schema of one call, the canonical action text of a call, a call
    parsed from written text, and why a call does not fit its tools."""

    check = staticmethod(check_tools)
    names = staticmethod(names)
    schema = staticmethod(call_schema)
    choice = staticmethod(choice_of)
    action = staticmethod(action)
    parse = staticmethod(parse)
    validate = staticmethod(validate)
    SchemaError = ToolSchemaError
