"""The agent sweep's tools: small, deterministic and local, so a loop's time in the tools is the client's
own and its results are the same on every run and engine.

A workspace of two files (the shipped document as `record.md`, and `notes.txt`), and three tools:
`read_file` (a file's text, cut to READ_CHARS), `search_document` (the document's paragraphs holding every
word of the query, else any, at most three, each cut to PASSAGE_CHARS) and `calculate` (arithmetic on
numbers only, read with `ast`, never `eval`). A call the loop cannot run (arguments that are not a JSON
object, an unknown tool, a missing or mistyped argument) is a parse failure: its result says why, and is
sent back to the model as the tool's answer, as an agent harness does.
"""

from __future__ import annotations

import ast
import json
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ninferkit.measure.client import StreamedCall
from ninferkit.measure.workloads import document

READ_CHARS = 2000
PASSAGE_CHARS = 400
NOTES = ("Operations notes. Night-flow readings are taken between 02:00 and 04:00. Leakage is reported in "
         "megalitres per day. Meter replacements are logged by district.")
"""notes.txt: written for this project."""


def _function(name: str, description: str, argument: str, words: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {argument: {"type": "string", "description": words}},
        "required": [argument]}}}


TOOLS: tuple[dict[str, Any], ...] = (
    _function("read_file", "The text of a file of the workspace (record.md, notes.txt).", "path", "the file name"),
    _function("search_document", "Passages of record.md that mention the query's words.", "query", "words to find"),
    _function("calculate", "Evaluates an arithmetic expression (+ - * / ** and parentheses).", "expression",
              "e.g. 17.4 / 0.19"),
)
"""The Chat Completions definitions; `messages_tools` gives the Anthropic Messages form of the same."""


def messages_tools() -> list[dict[str, Any]]:
    """The tools as Anthropic Messages takes them (`name`, `description`, `input_schema`)."""
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in TOOLS]


@dataclass(frozen=True)
class ToolRun:
    """One call run: whether it could be (`parsed`), the result sent back and the seconds it took."""

    name: str
    parsed: bool
    result: str
    seconds: float


def run_call(call: StreamedCall) -> ToolRun:
    """Run a streamed call; a call that cannot run is a parse failure whose result says why."""
    start = time.perf_counter()
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError as exc:
        return ToolRun(call.name, False, f"error: the arguments are not JSON ({exc})", time.perf_counter() - start)
    tool, required = _RUN.get(call.name), _ARGUMENT.get(call.name)
    if tool is None or required is None:
        known = ", ".join(_RUN)
        return ToolRun(call.name, False, f"error: no tool named {call.name!r} (tools: {known})",
                       time.perf_counter() - start)
    if not isinstance(arguments, dict) or not isinstance(arguments.get(required), str):
        return ToolRun(call.name, False, f"error: {call.name} takes a string argument {required!r}",
                       time.perf_counter() - start)
    return ToolRun(call.name, True, tool(arguments[required]), time.perf_counter() - start)


def read_file(path: str) -> str:
    files = {"record.md": document(), "notes.txt": NOTES}
    if path not in files:
        return f"error: no file {path!r} (files: {', '.join(files)})"
    return files[path][:READ_CHARS]


def search_document(query: str) -> str:
    words = [w for w in query.lower().split() if w]
    paragraphs = [p.strip() for p in document().split("\n\n") if p.strip()]
    found = [p for p in paragraphs if words and all(w in p.lower() for w in words)] or \
        [p for p in paragraphs if any(w in p.lower() for w in words)]
    return "\n\n".join(p[:PASSAGE_CHARS] for p in found[:3]) or "No passages matched."


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as exc:
        return f"error: {type(exc).__name__}: {exc}"
    return json.dumps({"result": value})


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent above 64")
        result: float | int = _OPERATORS[type(node.op)](left, right)
        return result
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        unary: float | int = _OPERATORS[type(node.op)](_evaluate(node.operand))
        return unary
    raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")


_RUN: dict[str, Callable[[str], str]] = {"read_file": read_file, "search_document": search_document,
                                         "calculate": calculate}
_ARGUMENT = {t["function"]["name"]: t["function"]["parameters"]["required"][0] for t in TOOLS}
"""Each tool's one argument."""
