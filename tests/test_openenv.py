"""agentlab over OpenEnv, on real loopback sockets: the same episodes as in-process, 64 sessions at
once, bad input, vanished clients, the sandbox behind the server, foreign servers, and train /
evaluate / widgets unchanged on a served env. Speed is measured by bench/openenv.py, not here."""

import asyncio
import json
import subprocess
import sys
import time

import pytest
import torch

pytest.importorskip("openenv")

from agentlab.envs import make  # noqa: E402
from agentlab.envs.sandbox import sandbox_mode  # noqa: E402
from agentlab.integrations.openenv import (MAX_BODY_BYTES, MAX_WIRE_ACTION_CHARS, AgentlabEnvironment,  # noqa: E402
                                           RemoteEnv, RemoteEnvError, _Client, register_remote, run_in_thread,
                                           serve_in_thread, url_of)
from agentlab.rollout import SamplingSettings, play, rollout  # noqa: E402

GUESS, CODE = "agentlab/GuessNumber-v0", "agentlab/Code-v0"


@pytest.fixture(scope="module")
def guess_server():
    with serve_in_thread(GUESS, max_sessions=80) as server:
        yield server


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def expert(env):
    return env.expert_action()


# ---------------------------------------------------------------------------- the same env, over the wire

def test_an_episode_over_openenv_is_the_in_process_episode(guess_server, tiny_path):
    from gymnasium.utils.env_checker import check_env

    from agentlab.policy import load_policy

    remote = RemoteEnv(guess_server.url)
    for seed in (0, 5):  # the scripted expert, whose actions come from the server's state
        assert play(remote, expert, seed=seed).to_dict() == play(make(GUESS), expert, seed=seed).to_dict()
    remote.close()

    policy = load_policy(str(tiny_path), device="cpu")  # sampled tokens depend on every observation before them
    settings = SamplingSettings(max_new_tokens=8)
    trajs = {}
    for where, envs in [("remote", [RemoteEnv(guess_server.url) for _ in range(3)]),
                        ("local", [make(GUESS) for _ in range(3)])]:
        trajs[where] = rollout(envs, policy, settings, seeds=[1, 2, 3], generator=torch.Generator().manual_seed(0))
        for env in envs:
            env.close()
    assert [t.to_dict() for t in trajs["remote"]] == [t.to_dict() for t in trajs["local"]]
    assert sum(t.num_turns for t in trajs["remote"]) > 3

    env_id = register_remote(guess_server.url)  # the env table and Gymnasium know it by id
    import gymnasium as gym

    env = gym.make(env_id)
    check_env(env.unwrapped)
    env.close()


def test_the_playground_widget_plays_a_served_env(guess_server):
    from agentlab.widgets import EnvPlayground

    env = make(register_remote(guess_server.url))
    playground = EnvPlayground(env, seed=3)
    while not playground.done:
        playground.step(playground.base.expert_action())
    assert playground.info["success"] and playground.base.task.id == make(GUESS).reset(seed=3)[1]["task_id"]
    env.close()


# ---------------------------------------------------------------------------- 64 sessions at once

def test_64_sessions_play_whole_episodes_at_once_without_cross_talk(guess_server):
    n, baseline = 64, AgentlabEnvironment.live
    expected = {seed: play(make(GUESS), expert, seed=seed) for seed in range(n)}
    connected, counted = asyncio.Event(), asyncio.Event()

    async def session(seed: int, ready: list) -> dict:
        client = _Client(base_url=guess_server.url)
        await client.connect()
        ready.append(seed)
        if len(ready) == n:
            connected.set()
        await counted.wait()  # every session is open, and counted by the server, before any plays
        observations = [(await client.reset(seed=seed)).observation["text"]]
        while not (state := await client.state())["done"]:
            result = await client.step({"text": state["expert_action"]})
            observations.append(result.observation["text"])
        final = await client.state()
        await client.close()
        return {"observations": observations, "state": final}

    async def everyone():
        ready: list = []
        tasks = [asyncio.create_task(session(seed, ready)) for seed in range(n)]
        await connected.wait()
        # The server registers a session in its own thread, a moment after the client's connect returns.
        deadline = time.monotonic() + 10
        while guess_server.openenv.active_sessions < n and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        at_once = guess_server.openenv.active_sessions
        counted.set()
        return at_once, await asyncio.gather(*tasks)

    at_once, results = asyncio.run(everyone())
    assert at_once == n
    for seed, result in enumerate(results):
        want, state = expected[seed], result["state"]
        assert result["observations"] == [m["content"] for m in want.messages[1::2]]
        assert state["actions"] == want.actions and state["step_count"] == want.num_turns
        assert state["task"]["id"] == want.task_id
    assert len({r["state"]["episode_id"] for r in results}) == n
    assert wait_until(lambda: AgentlabEnvironment.live == baseline, 10)


# ---------------------------------------------------------------------------- bad input

def test_bad_requests_get_clear_4xx_and_the_server_keeps_serving(guess_server):
    import httpx
    from websockets.sync.client import connect

    http = httpx.Client(base_url=guess_server.url, timeout=30)

    def post(path, body):
        return http.post(path, content=body, headers={"content-type": "application/json"})

    answers = {
        "malformed JSON": post("/step", b'{"action": {"text": '),
        "wrong type": post("/step", json.dumps({"action": {"text": 5}})),
        "unknown field": post("/step", json.dumps({"action": {"txt": "guess(8)"}})),
        "oversized action": post("/step", json.dumps({"action": {"text": "x" * (MAX_WIRE_ACTION_CHARS + 1)}})),
        "oversized body": post("/step", b" " * (MAX_BODY_BYTES + 1)),
        "unknown reset argument": post("/reset", json.dumps({"sed": 3})),
        "bad task": post("/reset", json.dumps({"task": {"id": "x"}})),
        "step without a session": post("/step", json.dumps({"action": {"text": "guess(8)"}})),
    }
    status = {what: r.status_code for what, r in answers.items()}
    assert status == {"malformed JSON": 422, "wrong type": 422, "unknown field": 422, "oversized action": 422,
                      "oversized body": 413, "unknown reset argument": 400, "bad task": 400,
                      "step without a session": 409}
    assert "JSON decode error" in answers["malformed JSON"].text
    assert f"at most {MAX_WIRE_ACTION_CHARS} characters" in answers["oversized action"].text
    assert "send reset first" in answers["step without a session"].json()["detail"]
    assert "['sed']" in answers["unknown reset argument"].json()["detail"]
    unknown = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/close",
                                      "params": {"session_id": "no-such-session"}}).json()
    assert "Unknown session_id: no-such-session" in unknown["error"]["message"]  # JSON-RPC's error, not HTTP's

    with connect(guess_server.url.replace("http", "ws") + "/ws") as ws:  # one session, abused, then played
        for message in ['{"type": "step", "data": {"text"', json.dumps({"type": "step", "data": {"text": 5}}),
                        json.dumps({"type": "step", "data": {"text": "guess(8)"}}), json.dumps({"type": "jump"})]:
            ws.send(message)
            reply = json.loads(ws.recv())
            assert reply["type"] == "error" and reply["data"]["message"]
        ws.send(json.dumps({"type": "reset", "data": {"seed": 3}}))
        assert json.loads(ws.recv())["data"]["observation"]["text"].startswith("Find the hidden number")
    assert http.get("/health").json() == {"status": "healthy"}
    env = RemoteEnv(guess_server.url)
    assert play(env, expert, seed=4).success
    env.close()


# ---------------------------------------------------------------------------- clients that vanish

def test_a_vanished_client_leaks_no_env():
    baseline = AgentlabEnvironment.live
    with serve_in_thread(GUESS, session_timeout=1.0) as server:
        ws_url = server.url.replace("http", "ws") + "/ws"
        # a client process killed mid-episode: the kernel closes its socket and the session ends with it
        client = subprocess.Popen([sys.executable, "-c", (
            "import json, sys, time\nfrom websockets.sync.client import connect\n"
            f"ws = connect({ws_url!r})\nws.send(json.dumps({{'type': 'reset', 'data': {{'seed': 1}}}}))\nws.recv()\n"
            "ws.send(json.dumps({'type': 'step', 'data': {'text': 'guess(8)'}}))\nws.recv()\n"
            "print('mid-episode', flush=True)\ntime.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "mid-episode"
            assert AgentlabEnvironment.live == baseline + 1
        finally:
            client.kill()
            client.wait()
        assert wait_until(lambda: AgentlabEnvironment.live == baseline, 10), "the killed client's env was not freed"

        # a client that goes silent with its connection still open: the idle timeout ends its session
        from websockets.sync.client import connect

        silent = connect(ws_url)
        silent.send(json.dumps({"type": "reset", "data": {"seed": 2}}))
        silent.recv()
        assert AgentlabEnvironment.live == baseline + 1 and server.openenv.active_sessions == 1
        assert wait_until(lambda: AgentlabEnvironment.live == baseline, 15), "the silent client's env was not freed"
        assert server.openenv.active_sessions == 0
        silent.send(json.dumps({"type": "step", "data": {"text": "guess(8)"}}))
        assert "session was closed" in json.loads(silent.recv())["data"]["message"]
        silent.close()


# ---------------------------------------------------------------------------- the sandbox behind the server

@pytest.mark.skipif(sandbox_mode() != "namespace", reason="needs unshare namespaces (fallback is rlimits only)")
def test_the_code_env_behind_the_server_is_still_sandboxed(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTLAB_SERVER_SECRET", "hidden-answers")
    marker = tmp_path / "escaped"
    with serve_in_thread(CODE, env_kwargs={"timeout_s": 30.0}) as server:  # room for a busy machine
        port = int(server.url.rsplit(":", 1)[1])
        hostile = (f"import os, socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                   "    print('connected')\nexcept OSError:\n    print('refused')\n"
                   "print('secret', os.environ.get('AGENTLAB_SERVER_SECRET'))\n"
                   f"try:\n    open({str(marker)!r}, 'w').write('x')\n    print('wrote')\nexcept OSError:\n"
                   "    print('no write')\n")
        remote, local = RemoteEnv(server.url), make(CODE)
        task = local.generate_task(__import__("numpy").random.default_rng(0), 0)
        obs, _ = remote.reset(options={"task": task})
        fn = task.data["func"]
        reply, *_ = remote.step(f"run({hostile}def {fn}(*args):\n    return None)")
        remote.close()
    assert "refused" in reply and "connected" not in reply
    assert "secret None" in reply and "hidden-answers" not in reply
    assert not marker.exists()


# ---------------------------------------------------------------------------- any OpenEnv server

def test_any_openenv_server_is_an_agentlab_env(tiny_path):
    """A server that is not agentlab's: its reward arrives through rollout unchanged."""
    from openenv.core import Action, Environment, Observation, State, create_fastapi_app

    from agentlab.policy import load_policy

    class Shout(Action):
        message: str

    class Heard(Observation):
        heard: str = ""

    class LoudEnv(Environment):  # pays the share of capital letters; three turns
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.turns = 0

        def reset(self, seed=None, episode_id=None, **kwargs):
            self.turns = 0
            return Heard(heard="Shout something.")

        def step(self, action, timeout_s=None, **kwargs):
            self.turns += 1
            loud = sum(c.isupper() for c in action.message) / max(1, len(action.message))
            return Heard(heard=f"I heard {action.message!r}", reward=loud, done=self.turns == 3)

        @property
        def state(self):
            return State(step_count=self.turns)

    with run_in_thread(create_fastapi_app(LoudEnv, Shout, Heard, max_concurrent_envs=4)) as server:
        options = dict(action_field="message", text_field="heard", system_prompt="Shout.")
        scripted = play(RemoteEnv(server.url, **options), ["HEY", "hey you", "Hello"])
        envs = [RemoteEnv(server.url, **options) for _ in range(2)]
        policy = load_policy(str(tiny_path), device="cpu")
        trajs = rollout(envs, policy, SamplingSettings(max_new_tokens=6), seeds=[0, 1],
                        generator=torch.Generator().manual_seed(0))
        for env in envs:
            env.close()
    assert scripted.rewards == pytest.approx([1.0, 0.0, 0.2]) and scripted.terminated and scripted.success
    assert [m["content"] for m in scripted.messages[1::2]] == ["Shout something.", "I heard 'HEY'",
                                                               "I heard 'hey you'", "I heard 'Hello'"]
    for t in trajs:  # the policy's episodes: three turns each, under the system prompt given
        assert t.num_turns == 3 and t.terminated and t.messages[0] == {"role": "system", "content": "Shout."}


# ---------------------------------------------------------------------------- train and evaluate, unchanged

def test_train_and_evaluate_run_unchanged_on_a_served_env(guess_server, tiny_path, tmp_path):
    from agentlab.evaluate import evaluate
    from agentlab.policy import load_policy
    from agentlab.train import TrainConfig, load_training_policy, train

    env_id = register_remote(guess_server.url)
    assert url_of(env_id) == guess_server.url  # a run's config.json names its server
    policy = load_policy(str(tiny_path), device="cpu")
    remote = evaluate(policy, env_id, "eval", episodes=6, greedy=True, max_new_tokens=8)
    local = evaluate(policy, GUESS, "eval", episodes=6, greedy=True, max_new_tokens=8)
    assert [t.to_dict() for t in remote.trajectories] == [t.to_dict() for t in local.trajectories]

    runs = {}
    for where, env in [("remote", env_id), ("local", GUESS)]:
        cfg = TrainConfig(env_id=env, profile="ci", policy=str(tiny_path), updates=1, tasks_per_update=2, group_size=2,
                          eval_episodes=2, max_new_tokens=8, out_dir=str(tmp_path / where))
        runs[where] = train(cfg, load_training_policy(cfg), progress=False)
    keep = lambda record: {k: v for k, v in record.items() if not k.startswith(("seconds", "tokens_per_s"))}  # noqa
    assert [keep(r) for r in runs["remote"].history] == [keep(r) for r in runs["local"].history]
    assert runs["remote"].evals == runs["local"].evals
    with pytest.raises(RemoteEnvError, match="may set only"):  # what a client may not change on the server
        env = make(env_id, tasks="/etc/passwd")
        try:
            env.reset(seed=0)
        finally:
            env.close()


def test_remote_env_says_what_went_wrong():
    with pytest.raises(RemoteEnvError, match="127.0.0.1:9"):  # nothing listens on the discard port
        RemoteEnv("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(ValueError, match="server's address"):
        RemoteEnv()


def test_agentlab_serve_listens_on_loopback_and_serves(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "agentlab.cli", "serve", "--env", "GuessNumber", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = server.stdout.readline()
        assert f"serving agentlab/GuessNumber-v0 over OpenEnv on http://127.0.0.1:{port}" in banner, banner
        url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: server.poll() is not None or _answers(url), 120) and server.poll() is None
        env = RemoteEnv(url)
        assert play(env, expert, seed=2).to_dict() == play(make(GUESS), expert, seed=2).to_dict()
        env.close()
        for ip in _own_addresses():  # the default host answers this machine only
            with pytest.raises(OSError):
                socket.create_connection((ip, port), timeout=2).close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _own_addresses() -> list[str]:
    """This machine's address on its default route, if it has one (a UDP "connect" sends nothing)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return []
        ip = s.getsockname()[0]
    return [] if ip.startswith("127.") else [ip]
