"""Actions: the formats an agent may write a tool call in, each parsed strictly into one `Action`.

Two formats, picked per model (`agentlab.policy.Policy.action_format`), end in the same `Action`
(tool, argument, the reasoning written before it), so an env's logic never sees which was used:

- ``"call"``, the kit's grammar, for the tiny policy and SmolLM2 (whose template knows no tools)::

      think: the number is above 5, halve the range
      guess(8)

- ``"tool_call"``, the native tool call of a chat template that renders a ``tools=`` list, as
  Qwen2.5's does; the env's tools reach the template as JSON schemas (`tool_schemas`)::

      <tool_call>
      {"name": "guess", "arguments": {"n": 8}}
      </tool_call>

In either format, an env's code tools (``TextEnv.code_tools``) also take their code as a fenced
block on the lines after the tool's name, so that code need not sit inside a call's parentheses::

      submit
      ```python
      def add(a, b):
          return a + b
      ```

An env may name the tool that a fenced block with no tool name before it means (``bare_fence``:
HumanEval submits it, as published HumanEval scores take the answer's code block); elsewhere a
bare block is invalid. Every format is strict: one call per turn, nothing after it, a known tool,
its one argument; anything else raises `ActionError` with a message that says what to write.
"""

from __future__ import annotations

import json
import re
import string
import textwrap
from dataclasses import dataclass
from typing import Any

FORMATS = ("call", "tool_call")
MAX_ACTION_CHARS = 4000  # longer actions are refused before parsing
ECHO_CHARS = 60  # how much of a bad action an error message quotes back


@dataclass(frozen=True)
class Action:
    """A parsed action: ``tool(arg)``, with the reasoning written before it."""

    tool: str
    arg: str
    thought: str = ""

    def __str__(self) -> str:
        return f"{self.tool}({self.arg})"


class ActionError(ValueError):
    """An action that could not be parsed; the message is shown to the agent."""


def echo(text: Any, limit: int = ECHO_CHARS) -> str:
    """A short, printable-ASCII quote of what the agent wrote, for error messages."""
    text = text if isinstance(text, str) else repr(text)
    safe = "".join(c if c in string.printable and c not in "\r\x0b\x0c" else "?" for c in text)
    safe = safe.replace("\n", "\\n").replace("\t", " ")
    return safe if len(safe) <= limit else safe[:limit] + "..."


# ---------------------------------------------------------------------------- the tools, as schemas

_SIGNATURE = re.compile(r"^\s*\w+\((.*?)\)")


def tool_parameter(description: str) -> str | None:
    """The name of a tool's one argument, read from its description ``"guess(n): ..."``: ``"n"``;
    None for a tool that takes none (``"schema(): ..."``); ``"argument"`` where the signature shows
    a form rather than a name (``"query(SELECT ...)"``)."""
    match = _SIGNATURE.match(description)
    inner = match.group(1).strip() if match else "argument"
    if not inner:
        return None
    return inner if inner.isidentifier() else "argument"


def tool_schemas(tools: dict[str, str]) -> list[dict]:
    """The env's tools as the JSON schemas chat templates render from ``tools=`` (OpenAI's function
    format): one string parameter each, described by the tool's own line."""
    schemas = []
    for name, description in tools.items():
        param, match = tool_parameter(description), _SIGNATURE.match(description)
        what = description[match.end():].lstrip(": ") if match else description  # the line after "name(arg): "
        form = match.group(1).strip() if match else "the argument"  # "n", "SELECT ...", "expr = value"
        properties = {} if param is None else {param: {"type": "string", "description": form}}
        schemas.append({"type": "function", "function": {
            "name": name, "description": what,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)}}})
    return schemas


def render_action(action: Action, fmt: str, tools: dict[str, str]) -> str:
    """``action`` as an agent writes it in ``fmt`` (the form the env's prompt and messages show)."""
    if fmt == "call":
        return str(action)
    param = tool_parameter(tools[action.tool])
    arguments = {} if param is None else {param: action.arg}
    return "<tool_call>\n" + json.dumps({"name": action.tool, "arguments": arguments}) + "\n</tool_call>"


# ---------------------------------------------------------------------------- parsing

_CALL_START = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(", re.MULTILINE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```[A-Za-z0-9_+.-]*[ \t]*\r?\n(.*?)```", re.DOTALL)


def parse_action(text: Any, tools: dict[str, str] | list[str], fmt: str = "call",
                 code_tools: tuple[str, ...] = (), bare_fence: str | None = None) -> Action:
    """Parse one turn's text in format ``fmt`` into an `Action`, or raise `ActionError`.

    ``"call"``: the call starts at the first line that begins with ``name(``; everything before it
    is the thought. The argument runs from that ``(`` to the last ``)`` of the text, so code and SQL
    with parentheses and newlines need no escaping. Nothing may follow the closing ``)``.
    ``"tool_call"``: exactly one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    block, with nothing after it. ``code_tools`` and ``bare_fence``: see the module docstring.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown action format {fmt!r}; choose one of {FORMATS}")
    if not isinstance(text, str):
        raise ActionError(f"the action must be text, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"the action is {len(text)} characters long; the limit is {MAX_ACTION_CHARS}")
    if "\x00" in text:
        raise ActionError("the action contains a NUL character")
    stripped = text.strip()
    if not stripped:
        raise ActionError("the action is empty")
    tools = dict.fromkeys(tools, "") if isinstance(tools, list) else tools
    if fmt == "tool_call" and "<tool_call>" in stripped:
        return _parse_tool_call(stripped, tools)
    try:
        if fmt == "call":
            return _parse_call(stripped, tools)
        raise ActionError("no tool call found; write one <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> "
                          "block")
    except ActionError:
        fenced = _parse_fenced(stripped, code_tools, bare_fence) if code_tools else None
        if fenced is None:
            raise
        return fenced


def _thought(before: str) -> str:
    thought = before.strip()
    return thought[len("think:"):].strip() if thought.lower().startswith("think:") else thought


def _parse_call(stripped: str, tools: dict[str, str]) -> Action:
    match = _CALL_START.search(stripped)
    if match is None:
        raise ActionError("no tool call found; write one call such as name(argument) on its own line")
    name = match.group(1)
    if name not in tools:
        raise ActionError(f"unknown tool {name!r}")
    body = stripped[match.end():]
    close = body.rfind(")")
    if close < 0:
        raise ActionError(f"the call to {name} has no closing ')'")
    if body[close + 1:].strip():
        raise ActionError(f"text after the closing ')' of {name}(...); write one call per turn")
    # dedent rather than strip alone: code whose first line is indented keeps its structure
    return Action(tool=name, arg=textwrap.dedent(body[:close].strip("\r\n")).strip(),
                  thought=_thought(stripped[: match.start()]))


def _parse_tool_call(stripped: str, tools: dict[str, str]) -> Action:
    blocks = list(_TOOL_CALL.finditer(stripped))
    if not blocks:
        raise ActionError("the <tool_call> block is not closed; end it with </tool_call>")
    if len(blocks) > 1:
        raise ActionError(f"{len(blocks)} tool calls in one turn; write exactly one")
    block = blocks[0]
    if stripped[block.end():].strip():
        raise ActionError("text after </tool_call>; end the turn with the call")
    try:
        call = json.loads(block.group(1))
    except json.JSONDecodeError as err:
        raise ActionError(f"the tool call is not valid JSON ({err.msg} at character {err.pos})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or set(call) - {"name", "arguments"}:
        raise ActionError('the tool call must be a JSON object with "name" and "arguments" only')
    name = call["name"]
    if name not in tools:
        raise ActionError(f"unknown tool {name!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = None
    param = tool_parameter(tools[name])  # "argument" also for a tool given without a description
    want = "no arguments" if param is None else f'one argument, "{param}"'
    if not isinstance(arguments, dict) or set(arguments) != (set() if param is None else {param}):
        raise ActionError(f'{name} takes {want}: "arguments": {{{"" if param is None else json.dumps(param) + ": ..."}}}')
    value = "" if param is None else arguments[param]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ActionError(f'the argument "{param}" of {name} must be a string or a number')
    arg = value if isinstance(value, str) else json.dumps(value)
    return Action(tool=name, arg=textwrap.dedent(arg.strip("\r\n")).strip(), thought=_thought(stripped[: block.start()]))


def _parse_fenced(stripped: str, code_tools: tuple[str, ...], bare_fence: str | None) -> Action | None:
    """A code tool's name on its own line, then one fenced block; None where the text has no block."""
    blocks = list(_FENCE.finditer(stripped))
    if not blocks:
        return None
    if len(blocks) > 1:
        raise ActionError(f"{len(blocks)} code blocks in one turn; write one")
    block = blocks[0]
    if stripped[block.end():].strip():
        raise ActionError("text after the code block; end the turn with it")
    lines = stripped[: block.start()].rstrip().splitlines()
    named = lines[-1].strip().rstrip(":").strip() if lines else ""
    if named in code_tools:
        tool, before = named, "\n".join(lines[:-1])
    elif bare_fence is not None:
        tool, before = bare_fence, "\n".join(lines)
    else:
        raise ActionError(f"a code block must follow the name of the tool it is for, on the line before it: "
                          f"{' or '.join(code_tools)}")
    return Action(tool=tool, arg=textwrap.dedent(block.group(1).strip("\r\n")).strip(), thought=_thought(before))


def near_miss(text: Any, tools: dict[str, str], fmt: str) -> str | None:
    """What to write instead of ``text`` where it is a plain miss of the format: a tool call's JSON
    without its ``<tool_call>`` tags, a call in the other format (``guess(10)`` where a ``<tool_call>``
    was asked for, and back), or, in an env with one tool, a bare argument (``10`` for ``guess(10)``).
    None where no single fix is clear."""
    if not isinstance(text, str) or not text.strip():
        return None
    if fmt == "tool_call" and text.strip().startswith("{") and "<tool_call>" not in text:  # the call without its tags
        try:
            return render_action(_parse_tool_call(f"<tool_call>{text.strip()}</tool_call>", tools), fmt, tools)
        except ActionError:
            pass
    for other in FORMATS:
        if other == fmt:
            continue
        try:
            action = parse_action(text, tools, other)
        except ActionError:
            continue
        return render_action(action, fmt, tools)
    value = text.strip()
    if len(tools) == 1 and "\n" not in value and len(value) <= 40 and not set(value) & set("()<>{}`"):
        (tool,) = tools
        if tool_parameter(tools[tool]) is not None and value != tool:
            return render_action(Action(tool, value), fmt, tools)
    return None
