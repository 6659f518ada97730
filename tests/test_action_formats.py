"""Actions in the formats real models write (agentlab.envs.actions): the kit's name(argument) grammar,
a chat template's <tool_call> JSON, and code as a fenced block; strict, and carrying the same action."""

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlab
from agentlab.envs import ENV_IDS, env_class
from agentlab.envs.actions import Action, ActionError, near_miss, parse_action, render_action, tool_parameter

GUESS = {"guess": "guess(n): guess the whole number n"}
SQL = env_class("agentlab/SQL-v0").tools
CODE = env_class("agentlab/Code-v0").tools


def call(name, arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_a_tool_call_parses_into_the_action_the_grammar_names():
    assert parse_action(call("guess", {"n": "8"}), GUESS, "tool_call") == Action("guess", "8")
    assert parse_action(call("guess", {"n": 8}), GUESS, "tool_call") == Action("guess", "8")  # numbers as written
    thought = "The number is above 5.\n" + call("guess", {"n": 8})
    assert parse_action(thought, GUESS, "tool_call") == Action("guess", "8", "The number is above 5.")
    stringified = '<tool_call>{"name": "guess", "arguments": "{\\"n\\": 3}"}</tool_call>'  # arguments as a JSON string
    assert parse_action(stringified, GUESS, "tool_call") == Action("guess", "3")
    assert parse_action(call("schema", {}), SQL, "tool_call") == Action("schema", "")
    sql = "SELECT COUNT(*) FROM customers WHERE city = 'Lyon'"
    assert parse_action(call("query", {"argument": sql}), SQL, "tool_call") == Action("query", sql)


@pytest.mark.parametrize("text, says", [
    ("guess 8", "write one <tool_call>"),
    ("<tool_call>{\"name\": \"guess\", \"arguments\": {\"n\": 8}}", "not closed; end it with </tool_call>"),
    (call("guess", {"n": 1}) + call("guess", {"n": 2}), "2 tool calls in one turn; write exactly one"),
    (call("guess", {"n": 1}) + " and then", "text after </tool_call>"),
    ("<tool_call>{name: guess}</tool_call>", "not valid JSON"),
    ("<tool_call>[\"guess\", 8]</tool_call>", 'a JSON object with "name" and "arguments" only'),
    ('<tool_call>{"name": "guess", "arguments": {"n": 1}, "id": 3}</tool_call>', '"name" and "arguments" only'),
    (call("peek", {"n": 1}), "unknown tool 'peek'"),
    (call("guess", {"number": 8}), 'guess takes one argument, "n"'),
    (call("guess", {"n": 8, "m": 9}), 'guess takes one argument, "n"'),
    (call("guess", {}), 'guess takes one argument, "n"'),
    (call("guess", {"n": True}), 'the argument "n" of guess must be a string or a number'),
    (call("guess", {"n": [8]}), "must be a string or a number"),
])
def test_a_malformed_tool_call_is_invalid_and_says_what_to_write(text, says):
    with pytest.raises(ActionError, match=says.replace("(", r"\(").replace("*", r"\*")):
        parse_action(text, GUESS, "tool_call")


def test_a_tool_without_arguments_refuses_one():
    with pytest.raises(ActionError, match="schema takes no arguments"):
        parse_action(call("schema", {"table": "x"}), SQL, "tool_call")


@pytest.mark.parametrize("fmt", ["call", "tool_call"])
def test_code_may_come_as_a_fenced_block_after_the_tools_name(fmt):
    code = "def add(a, b):\n    return a + b"
    for text in (f"submit\n```python\n{code}\n```", f"I am sure now.\nsubmit:\n```\n{code}\n```\n"):
        action = parse_action(text, CODE, fmt, code_tools=("run", "submit"))
        assert (action.tool, action.arg) == ("submit", code)
    assert parse_action(f"think: try it\nrun\n```py\n{code}\n```", CODE, fmt, ("run", "submit")).thought == "try it"
    with pytest.raises(ActionError, match="must follow the name of the tool it is for.*run or submit"):
        parse_action(f"```python\n{code}\n```", CODE, fmt, code_tools=("run", "submit"))
    assert parse_action(f"Here it is:\n```python\n{code}\n```", CODE, fmt, ("run", "submit"), "submit").tool == "submit"
    with pytest.raises(ActionError, match="2 code blocks in one turn"):
        parse_action(f"run\n```\n{code}\n```\nsubmit\n```\n{code}\n```", CODE, fmt, ("run", "submit"))
    with pytest.raises(ActionError, match="text after the code block"):
        parse_action(f"run\n```\n{code}\n```\nDone!", CODE, fmt, ("run", "submit"))
    with pytest.raises(ActionError):  # an env without code tools takes no fence
        parse_action("guess\n```\n8\n```", GUESS, fmt)


def test_a_call_whose_code_holds_a_fence_stays_a_call():
    text = 'run(s = """\n```\nnot a block\n```\n"""\nprint(s))'
    assert parse_action(text, CODE, "call", code_tools=("run", "submit")).tool == "run"


def test_near_misses_get_the_exact_text_to_write():
    assert near_miss("10", GUESS, "call") == "guess(10)"
    assert near_miss("10", GUESS, "tool_call") == call("guess", {"n": "10"}).replace("\n", "\n")
    assert near_miss("guess(10)", GUESS, "tool_call") == call("guess", {"n": "10"})
    assert near_miss(call("guess", {"n": 10}), GUESS, "call") == "guess(10)"
    untagged = json.dumps({"name": "guess", "arguments": {"n": "11"}})  # what Qwen2.5-Coder-0.5B writes zero-shot
    assert near_miss(untagged, GUESS, "tool_call") == call("guess", {"n": "11"})
    assert near_miss("10", SQL, "call") is None  # several tools: no single fix
    assert near_miss("guess", GUESS, "call") is None and near_miss("a\nb", GUESS, "call") is None


def test_the_env_says_the_fix_and_takes_the_native_call():
    env = agentlab.make("agentlab/GuessNumber-v0", action_format="tool_call")
    env.reset(seed=0)
    obs, reward, _, _, info = env.step('{"name": "guess", "arguments": {"n": "8"}}')
    assert not info["valid"] and reward < 0 and "To send that, write exactly:\n" + call("guess", {"n": "8"}) in obs
    _, _, _, _, info = env.step(call("guess", {"n": 8}))
    assert info["valid"] and info["call"] == "guess(8)"
    assert call("guess", {"n": "8"}) in env.unwrapped.system_prompt  # the example, in the env's format
    assert "guess(n)" not in env.unwrapped.system_prompt  # the tools reach the template as schemas instead
    with pytest.raises(ValueError, match="action_format must be one of"):
        agentlab.make("agentlab/GuessNumber-v0", action_format="xml")


def test_humaneval_submits_a_bare_fenced_block_and_says_so():
    env = agentlab.make("agentlab/HumanEval-v0", split="eval", action_format="tool_call")
    env.reset(seed=0)
    assert "A fenced block with no tool name before it is sent to submit" in env.unwrapped.system_prompt
    _, _, term, _, info = env.step(f"```python\n{env.unwrapped.task.answer}\n```")
    assert info["valid"] and info["tool"] == "submit" and term and info["success"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_both_formats_carry_the_same_actions(env_id):
    """Every action the expert and the careless demonstrator write, rendered as a tool call, parses
    back to the same action, and the env's schemas name every tool with its one argument."""
    cls = env_class(env_id)
    schemas = {s["function"]["name"]: s["function"] for s in cls.tool_schemas()}
    assert set(schemas) == set(cls.tools)
    for name, fn in schemas.items():
        param = tool_parameter(cls.tools[name])
        assert fn["parameters"]["required"] == ([] if param is None else [param]) and fn["description"]
    env, rng, seen = agentlab.make(env_id), np.random.default_rng(0), 0
    for seed in range(4):
        env.reset(seed=seed)
        done = False
        while not done:
            text = env.expert_action() if seed % 2 == 0 else env.unwrapped.imperfect_action(rng)
            action = parse_action(text, cls.tools, "call", cls.code_tools)
            native = render_action(action, "tool_call", cls.tools)
            assert parse_action(native, cls.tools, "tool_call", cls.code_tools) == action, native
            _, _, term, trunc, info = env.step(text)
            seen += 1
            done = term or trunc
    assert seen >= 4


def test_the_policy_knows_its_native_format_and_rollout_applies_it(tiny_path):
    from agentlab.policy import load_policy, native_format
    from agentlab.rollout import SamplingSettings, make_envs, rollout

    class Template:
        chat_template = "{% if tools %}...<tool_call>{{ tools }}</tool_call>{% endif %}"

    assert native_format(Template()) == "tool_call"
    policy = load_policy(str(tiny_path))
    assert policy.action_format == "call"  # the tiny template renders no tools
    envs = make_envs("agentlab/GuessNumber-v0", 2, max_steps=2)
    trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=8), seeds=[0, 1], generator=torch.Generator().manual_seed(0))
    assert {t.action_format for t in trajs} == {"call"} and envs[0].unwrapped.action_format == "call"
    policy.action_format = "tool_call"  # the format is the policy's: every env it plays follows it
    trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=8), seeds=[0, 1], generator=torch.Generator().manual_seed(0))
    assert {t.action_format for t in trajs} == {"tool_call"} and envs[1].unwrapped.action_format == "tool_call"
    assert "<tool_call>" in trajs[0].messages[0]["content"]


NATIVE = st.one_of(
    st.builds(lambda name, args: f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>",
              st.sampled_from(["guess", "move", "search", "read", "finish", "schema", "query", "answer", "run",
                               "submit", "step", "ask", "act", "get", "craft", "inventory", "nope"]),
              st.dictionaries(st.sampled_from(["n", "argument", "code", "d", "query", "x"]),
                              st.one_of(st.text(max_size=60), st.integers(), st.floats(), st.booleans(), st.none()),
                              max_size=2)),
    st.builds(lambda a, b: f"<tool_call>{a}</tool_call>{b}", st.text(max_size=80), st.text(max_size=20)),
    st.builds(lambda tool, code: f"{tool}\n```python\n{code}\n```", st.sampled_from(["run", "submit", "", "guess"]),
              st.text(max_size=120)),
    st.sampled_from(["<tool_call>", "</tool_call>", "<tool_call></tool_call>", "```", "```\n```", '{"name": "run"}']),
    st.text(max_size=200),
)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(NATIVE, min_size=1, max_size=6))
def test_fuzz_of_native_calls_never_raises(env_id, actions):
    env = agentlab.make(env_id, action_format="tool_call")
    env.reset(seed=0)
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and obs and np.isfinite(reward)
        if not info["valid"]:
            assert ("Invalid action" in obs or "Not allowed" in obs) and reward <= 0
        if term or trunc:
            env.reset(seed=1)
