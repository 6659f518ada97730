"""agentlab speaks OpenEnv: serve an agentlab env as an OpenEnv server, play any OpenEnv server as an agentlab env.

    agentlab serve --env GuessNumber --port 8000            # a server (or serve_in_thread(...) in a notebook)

    env_id = register_remote("http://127.0.0.1:8000")      # -> "openenv/GuessNumber-127.0.0.1-8000-v0"
    train(cfg := TrainConfig(env_id=env_id), load_training_policy(cfg))   # rollout, train, evaluate, widgets, TRL: unchanged
    env = RemoteEnv("http://host:8000", action_field="message", text_field="echoed_message")   # any OpenEnv server

OpenEnv (openenv-core 0.3.0) is a client-server protocol for RL environments: a server holds
the env and answers reset / step / state, a client in the learner's process sends actions. It
lets an env run on another machine than the learner, and lets TRL, Unsloth or Oumi train on it.

**The server** is openenv-core's own `HTTPEnvServer` wrapped around `AgentlabEnvironment`:

- A session is a WebSocket connection to ``/ws`` (what openenv's `EnvClient` opens), with its
  own agentlab env, made when the connection opens and closed when it ends, when the client
  vanishes, or after ``session_timeout`` seconds without a message (openenv's idle reaper).
- ``reset(seed, task, env_kwargs)`` starts an episode: ``task`` is a task dict (as
  ``options={"task": ...}`` in-process), ``env_kwargs`` the few env arguments a client may set
  (`CLIENT_KWARGS`). ``step({"text": action})`` plays one action. The observation carries the
  env's text, ``terminated``, ``truncated``, the reward, and agentlab's whole ``info`` (reward
  components, valid, tool, checks, success): in ``metadata`` as OpenEnv intends, and as the field
  ``info`` too, because openenv-core's `serialize_observation` leaves ``metadata`` off the wire.
- ``state`` is the session's own: episode id, step count, the task, the actions so far, the
  scripted expert's next action (for demonstrations and widgets; a policy only sees
  observations) and ``spec``, which describes the env to a client (name, system prompt, tools).
- OpenEnv's HTTP ``/reset`` and ``/step`` are stateless: each request gets a fresh env. A step
  over HTTP therefore has no episode and is answered 409 with that explanation. Request bodies
  over `MAX_BODY_BYTES` get 413, actions over `MAX_WIRE_ACTION_CHARS` or of the wrong type 422.

**The client** `RemoteEnv` is a Gymnasium env with agentlab's `TextEnv` surface (``reset``,
``step``, ``info``, ``system_prompt``, ``tools``, ``expert_action``, ``task``). Over an agentlab
server an episode is the very episode the env plays in-process with the same seed or task.
`register_remote` gives a server an env id, so everything that builds envs by id (`train`,
`evaluate`, the TRL bridge) plays on the server without a change. Task generation stays in the
client (it is pure data): only the env's logic, its rewards and its sandbox run on the server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
import uuid
from typing import Any, ClassVar
from urllib.parse import urlparse

import gymnasium as gym
from openenv.core import Action, ConcurrencyConfig, Environment, GenericEnvClient, HTTPEnvServer, Observation, State
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field

from agentlab.envs import ENV_CLASSES, env_class, full_id, make
from agentlab.envs.base import MAX_ACTION_CHARS, MAX_OBS_CHARS, TextSpace
from agentlab.tasks import Task

# The env itself refuses actions over MAX_ACTION_CHARS with its format penalty, as in-process; the
# wire takes a good deal more so that refusal stays the env's. Anything larger is not an action.
MAX_WIRE_ACTION_CHARS = 16 * MAX_ACTION_CHARS
MAX_BODY_BYTES = 1 << 20  # HTTP bodies and WebSocket messages
CLIENT_KWARGS = ("reward_mode", "max_steps", "difficulty", "split", "weights")  # what train/evaluate pass


# ============================================================================ the wire format

class TextAction(Action):
    """One agentlab action: the text the policy wrote, e.g. ``think: ...\\nguess(8)``."""

    text: str = Field(max_length=MAX_WIRE_ACTION_CHARS, description="the action, in the env's tool(arg) grammar")


class TextObservation(Observation):
    """What the env answered: its text, how the episode stands, and agentlab's info."""

    text: str = Field(default="", description="the env's reply (after reset: the task)")
    info: dict[str, Any] = Field(default_factory=dict, description="agentlab's info: reward_components, valid, "
                                 "tool, checks, and success at the end (after reset: task_id, difficulty, max_steps)")
    terminated: bool = Field(default=False, description="the task decided the episode")
    truncated: bool = Field(default=False, description="the step limit cut the episode off")


class TextState(State):
    """One session's state (``episode_id`` and ``step_count`` come from OpenEnv's `State`)."""

    env_id: str = ""
    spec: dict[str, Any] = Field(default_factory=dict, description="the env described for a client (see describe)")
    task: dict[str, Any] | None = None
    actions: list[str] = Field(default_factory=list, description="this episode's actions so far")
    done: bool = True
    expert_action: str | None = Field(default=None, description="the scripted expert's next action")


def plain(info: dict) -> dict:
    """``info`` as JSON values (numpy scalars become numbers), without importing torch into the server."""
    return json.loads(json.dumps(info, default=lambda x: x.item() if hasattr(x, "item") else str(x)))


def describe(env, env_id: str) -> dict:
    """What a client needs to play ``env`` (served as ``env_id``) as agentlab would in-process."""
    cls = type(env)
    return {"env_id": env_id, "name": cls.name, "description": cls.description,
            "system_prompt": env.system_prompt, "tools": dict(cls.tools), "example_action": cls.example_action,
            "default_weights": dict(cls.default_weights), "component_kinds": dict(cls.component_kinds),
            "default_max_steps": cls.default_max_steps, "max_difficulty": cls.max_difficulty,
            "action_tokens": cls.action_tokens}


# ============================================================================ the server

class NoEpisode(RuntimeError):
    """A step in a session with no running episode (answered 409 over HTTP)."""


class BadRequest(ValueError):
    """A reset with arguments the server does not take (answered 400 over HTTP)."""


NO_EPISODE = ("no episode is running in this session: send reset first. OpenEnv's HTTP /reset and /step are "
              "stateless (each request gets a fresh env), so play episodes over the WebSocket /ws, as openenv's "
              "EnvClient and agentlab's RemoteEnv do")


class AgentlabEnvironment(Environment):
    """One session's agentlab env behind openenv-core's server (see the module docstring)."""

    # Every session makes its own TextEnv and agentlab envs share no mutable state (SQL's database
    # is opened read-only), so sessions may run side by side.
    SUPPORTS_CONCURRENT_SESSIONS = True
    live = 0  # envs held by sessions right now: the leak check of tests and benchmarks
    steps_served = 0  # steps played by every session of this process so far
    _live_lock = threading.Lock()

    def __init__(self, env_id: str, env_kwargs: dict | None = None):
        super().__init__()
        self.env_id = full_id(env_id)
        self.fixed = dict(env_kwargs or {})  # set by whoever started the server, for every session
        self.chosen: dict = {}  # set by this session's client (CLIENT_KWARGS only)
        self.env = make(self.env_id, **self.fixed)
        self.episode_id: str | None = None
        self.actions: list[str] = []
        with AgentlabEnvironment._live_lock:
            AgentlabEnvironment.live += 1

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: dict | None = None,
              env_kwargs: dict | None = None, **unknown) -> TextObservation:
        if unknown:
            raise BadRequest(f"unknown reset argument(s) {sorted(unknown)}; this server takes seed, episode_id, "
                             "task and env_kwargs")
        env = self._session_env(env_kwargs or {})
        try:
            options = None if task is None else {"task": Task.from_dict(task, where="reset task")}
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise BadRequest(f"the task sent with reset is not a valid task: {err}") from err
        obs, info = env.reset(seed=seed, options=options)
        self.episode_id, self.actions = episode_id or uuid.uuid4().hex, []
        info = plain(info)
        return TextObservation(text=obs, info=info, metadata=info)

    def _session_env(self, chosen: dict):
        if self.env is None:
            raise NoEpisode("this session was closed (idle past the server's session timeout): connect again")
        refused = sorted(set(chosen) - set(CLIENT_KWARGS))
        if refused:
            raise BadRequest(f"a client may set only {list(CLIENT_KWARGS)} of the env, not {refused}; fix other "
                             "arguments for every session with agentlab serve --env-kwargs '{...}'")
        if chosen != self.chosen:  # rebuilt only when they change: the env's random state carries on otherwise
            self.env.close()
            self.env, self.chosen = make(self.env_id, **{**self.fixed, **chosen}), dict(chosen)
        return self.env

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs) -> TextObservation:
        if self.env is None:
            raise NoEpisode("this session was closed (idle past the server's session timeout): connect again")
        if self.episode_id is None:
            raise NoEpisode(NO_EPISODE)
        if self.env.done:
            raise NoEpisode("the episode is over: send reset to start the next one")
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self.actions.append(action.text)
        with AgentlabEnvironment._live_lock:
            AgentlabEnvironment.steps_served += 1
        info = plain(info)
        return TextObservation(text=obs, info=info, metadata=info, terminated=terminated, truncated=truncated,
                               done=terminated or truncated, reward=float(reward))

    @property
    def state(self) -> TextState:
        env = self.env
        if env is None:
            return TextState(episode_id=self.episode_id, env_id=self.env_id)
        running = self.episode_id is not None and not env.done
        return TextState(episode_id=self.episode_id, step_count=env.t, env_id=self.env_id, spec=describe(env, self.env_id),
                         task=env.task.to_dict() if env.task is not None and self.episode_id else None,
                         actions=list(self.actions), done=not running, expert_action=_expert(env) if running else None)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=f"agentlab {self.env_id}", description=env_class(self.env_id).description)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
            with AgentlabEnvironment._live_lock:
                AgentlabEnvironment.live -= 1


def _expert(env) -> str | None:
    try:
        return env.expert_action()
    except Exception:  # noqa: BLE001 - a state request must not fail because an expert has nothing to say
        return None


def create_server(env_id: str, max_sessions: int = 64, session_timeout: float | None = 300.0,
                  env_kwargs: dict | None = None):
    """A FastAPI app serving ``env_id`` over OpenEnv; ``app.state.openenv`` is openenv's `HTTPEnvServer`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    env_id = full_id(env_id)
    make(env_id, **(env_kwargs or {})).close()  # wrong env_kwargs fail now, not in the first session
    server = HTTPEnvServer(functools.partial(AgentlabEnvironment, env_id, env_kwargs), TextAction, TextObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=session_timeout))
    app = FastAPI(title=f"agentlab {env_id} over OpenEnv", description=__doc__.split("\n\n")[0])
    server.register_routes(app)
    app.state.openenv = server

    @app.exception_handler(NoEpisode)
    async def no_episode(request: Request, err: NoEpisode):
        return JSONResponse(status_code=409, content={"detail": str(err)})

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, err: BadRequest):
        return JSONResponse(status_code=400, content={"detail": str(err)})

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length", "0")
        if not size.isdigit() or int(size) > MAX_BODY_BYTES:
            return JSONResponse(status_code=413, content={
                "detail": f"the request body is {size} bytes; this server takes at most {MAX_BODY_BYTES}"})
        return await call_next(request)

    return app


def serve(env_id: str, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning", **options) -> None:
    """Serve ``env_id`` until interrupted (``agentlab serve``); options go to `create_server`."""
    import uvicorn

    uvicorn.run(create_server(env_id, **options), host=host, port=port, log_level=log_level,
                ws_max_size=MAX_BODY_BYTES)


class RunningServer:
    """A server running in a background thread of this process; ``stop()`` or ``with`` ends it."""

    def __init__(self, url: str, app, server, thread: threading.Thread):
        self.url, self.app, self._server, self._thread = url, app, server, thread

    @property
    def openenv(self) -> HTTPEnvServer:
        return self.app.state.openenv

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_in_thread(env_id: str, host: str = "127.0.0.1", port: int = 0, **options) -> RunningServer:
    """Serve ``env_id`` from a background thread (port 0: any free port); for notebooks and tests."""
    return run_in_thread(create_server(env_id, **options), host, port)


def run_in_thread(app, host: str = "127.0.0.1", port: int = 0) -> RunningServer:
    """Run any ASGI app (an OpenEnv server of any env) with uvicorn in a background thread."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           ws_max_size=MAX_BODY_BYTES))
    thread = threading.Thread(target=server.run, name=f"uvicorn {app.title}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server for {app.title!r} did not start on {host}:{port} (port in use?)")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(f"http://{host}:{bound}", app, server, thread)


# ============================================================================ the client

class RemoteEnvError(RuntimeError):
    """The server refused a request or could not be reached; the message says which and why."""


class _Client(GenericEnvClient):
    """openenv's dict-based client, closing gently.

    openenv's server closes its side of the WebSocket when a session ends and logs a traceback
    when the client has closed it already, which the stock client does at once after its
    ``close`` message. This one waits for the server to close first.
    """

    async def disconnect(self) -> None:
        if self._ws is None:
            return
        try:
            await self._send({"type": "close"})
            await asyncio.wait_for(self._ws.wait_closed(), timeout=5)
        except Exception:  # noqa: BLE001 - the connection is going away either way
            pass
        finally:
            await self._ws.close()
            self._ws = None


class RemoteEnv(gym.Env):
    """An OpenEnv server played as an agentlab env (see the module docstring).

    Over an agentlab server everything comes from the server: the system prompt, tools, info.
    Over any other OpenEnv server, ``action_field`` names the action field that carries the text,
    ``text_field`` the observation field that is the reply (else the observation is shown as
    JSON), ``system_prompt`` what the policy is told; the reward is the server's, ``success`` the
    observation's own field or a positive final reward, and ``max_steps`` cuts long episodes.
    ``env_kwargs`` (reward_mode, max_steps, ... as `make` takes them) go to an agentlab server
    with every reset. Each instance holds one session: `close` it when done (a dropped instance
    closes on collection, and the server's timeout ends sessions that are never closed).
    """

    metadata = {"render_modes": []}
    base_url: ClassVar[str | None] = None  # set on the classes `register_remote` makes, with their spec
    served: ClassVar[dict | None] = None
    client_options: ClassVar[dict] = {}

    def __init__(self, base_url: str | None = None, action_field: str | None = None, text_field: str | None = None,
                 system_prompt: str | None = None, max_steps: int | None = None, timeout_s: float = 60.0,
                 **env_kwargs):
        self._client = None
        options = {**self.client_options, **{k: v for k, v in dict(
            action_field=action_field, text_field=text_field, system_prompt=system_prompt).items() if v is not None}}
        self.url = base_url or self.base_url
        if not self.url:
            raise ValueError("RemoteEnv needs the server's address, e.g. RemoteEnv('http://127.0.0.1:8000')")
        self.action_field = options.get("action_field", "text")
        self.text_field = options.get("text_field", "text")
        self.timeout_s = timeout_s
        self.env_kwargs = env_kwargs
        self.observation_space, self.action_space = TextSpace(MAX_OBS_CHARS), TextSpace(MAX_ACTION_CHARS)
        self._local = None  # the served env's class, here, for task generation
        if self.served is None:  # an unregistered server: ask it what it is
            spec = self._call("state").get("spec")
            self.agentlab = bool(spec)
            _adopt(self, spec or _foreign_spec(options.get("system_prompt", ""), max_steps))
        else:
            self.agentlab = bool(self.served.get("env_id"))
        self.t, self.done, self._info = 0, True, {}
        self._max_steps = max_steps or env_kwargs.get("max_steps")

    # -- the connection ---------------------------------------------------------------------------
    def _call(self, what: str, *args, **kwargs):
        if self._client is None:
            self._client = _Client(base_url=self.url, message_timeout_s=self.timeout_s).sync()
        try:
            result = getattr(self._client, what)(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - connection refused, timeout, or the server's error message
            raise RemoteEnvError(f"{self.url}: {what} failed: {err}") from err
        return result

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except Exception:  # noqa: BLE001 - the server may already be gone; nothing is left to free here
                pass

    def __del__(self):
        # close() waits on the client's own event-loop thread: collected on that thread, it would wait on itself
        if threading.current_thread().name != "openenv-sync-client-loop":
            self.close()

    # -- the Gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        data: dict[str, Any] = {} if seed is None else {"seed": int(seed)}
        if self.agentlab:
            task = (options or {}).get("task")
            if task is not None:
                data["task"] = task.to_dict() if isinstance(task, Task) else dict(task)
            if self.env_kwargs:
                data["env_kwargs"] = dict(self.env_kwargs)
        else:
            data.update(options or {})
        result = self._call("reset", **data)
        self.t, self.done = 0, False
        obs = result.observation
        if self.agentlab:
            self._info = obs["info"]
            return obs["text"], obs["info"]
        self._info = {}
        return self._text(obs), {"task_id": "", "difficulty": 0, "max_steps": self.max_steps}  # the reset contract

    def step(self, action: str):
        if self.done:
            raise RuntimeError(f"{self.name}: the episode is over; call reset() before step()")
        # The env refuses anything over MAX_ACTION_CHARS with its format penalty; longer text is cut
        # to what the wire takes (still refused, only the length the message quotes differs).
        text = action[:MAX_WIRE_ACTION_CHARS] if isinstance(action, str) else ""
        result = self._call("step", {self.action_field: text})
        self.t += 1
        obs = result.observation
        if self.agentlab:
            terminated, truncated, info = bool(obs["terminated"]), bool(obs["truncated"]), obs["info"]
            reward, text_out = float(result.reward), obs["text"]
        else:
            reward = float(result.reward or 0.0)
            terminated = bool(result.done)
            truncated = not terminated and self.t >= self.max_steps
            info = {"reward_components": {"reward": reward}, "valid": True, "tool": None, "checks": {}, "step": self.t}
            if terminated or truncated:
                info["success"] = bool(obs.get("success", reward > 0)) if terminated else False
            text_out = self._text(obs)
        self.done = terminated or truncated
        return text_out, reward, terminated, truncated, info

    def _text(self, obs: dict) -> str:
        return str(obs[self.text_field]) if self.text_field in obs else json.dumps(obs, sort_keys=True)

    # -- what agentlab reads off an env -------------------------------------------------------------
    @property
    def max_steps(self) -> int:
        return self._info.get("max_steps") or self._max_steps or self.default_max_steps

    @property
    def task(self) -> Task | None:
        """The current task, from the server's state (agentlab servers)."""
        task = self._call("state").get("task") if self.agentlab else None
        return None if task is None else Task.from_dict(task)

    def expert_action(self) -> str:
        expert = self._call("state").get("expert_action") if self.agentlab else None
        if expert is None:
            raise RuntimeError(f"{self.url} offers no expert action (no episode running, or not an agentlab server)")
        return expert

    def generate_task(self, rng, difficulty: int) -> Task:
        """A task from the served env's own generator, run here: tasks are data, the server plays them."""
        if self._local is None:
            self._local = self._served_class()(**{k: v for k, v in self.env_kwargs.items() if k in CLIENT_KWARGS})
        return self._local.generate_task(rng, difficulty)

    @classmethod
    def _served_class(cls):
        served = (cls.served or {}).get("env_id")
        if served not in ENV_CLASSES:
            raise RuntimeError(f"{cls.base_url} serves {served or 'a foreign env'}, which this agentlab does not "
                               "know: its tasks cannot be generated or read here; reset it with tasks of your own")
        return env_class(served)

    @classmethod
    def task_file(cls) -> str:
        return cls._served_class().task_file()


def _adopt(target, spec: dict) -> None:
    """Give a class or an instance the env's description (`describe` on the server)."""
    for key in ("name", "description", "system_prompt", "tools", "example_action", "default_weights",
                "component_kinds", "default_max_steps", "max_difficulty", "action_tokens"):
        setattr(target, key, spec[key])


def _foreign_spec(system_prompt: str, max_steps: int | None) -> dict:
    return {"name": "Remote", "description": "", "system_prompt": system_prompt, "tools": {}, "example_action": "",
            "default_weights": {"reward": 1.0}, "component_kinds": {"reward": "outcome"},
            "default_max_steps": max_steps or 8, "max_difficulty": 0, "action_tokens": 24}


# ---------------------------------------------------------------------------- env ids for servers

_REMOTE_CLASSES: dict[str, type[RemoteEnv]] = {}


def __getattr__(name: str):  # the classes register_remote made, found by agentlab.envs.env_class
    if name in _REMOTE_CLASSES:
        return _REMOTE_CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_remote(base_url: str, **client_options) -> str:
    """Give an OpenEnv server an env id, ``"openenv/<Name>-<host>-<port>-v0"``, that `agentlab.envs.make`,
    ``gymnasium.make`` and everything built on them (train, evaluate, the TRL bridge) accept.
    ``client_options`` (action_field, text_field, system_prompt) are `RemoteEnv`'s, for foreign servers."""
    probe = RemoteEnv(base_url, **client_options)
    try:
        spec = {key: getattr(probe, key) for key in ("name", "description", "system_prompt", "tools",
                                                     "example_action", "default_weights", "component_kinds",
                                                     "default_max_steps", "max_difficulty", "action_tokens")}
        spec["env_id"] = (probe._call("state").get("spec") or {}).get("env_id") if probe.agentlab else None
    finally:
        probe.close()
    where = urlparse(base_url)  # no ':' in the id: gymnasium.make reads "module:Env" there
    env_id = f"openenv/{spec['name']}-{where.hostname}-{where.port or 80}-v0"
    attr = "Remote_" + re.sub(r"\W", "_", env_id)
    cls = type(attr, (RemoteEnv,), {"base_url": base_url, "served": spec, "client_options": client_options,
                                    "__doc__": f"{spec['name']} served at {base_url}. {spec['description']}"})
    _adopt(cls, spec)
    _REMOTE_CLASSES[attr] = cls
    ENV_CLASSES[env_id] = f"{__name__}:{attr}"  # the env table's own way in: an id -> "module:Class"
    if env_id not in gym.registry:  # registered again (a notebook cell rerun): the table above already points anew
        gym.register(id=env_id, entry_point=f"{__name__}:{attr}", disable_env_checker=True)
    return env_id


def url_of(env_id: str) -> str:
    """The server address in an id `register_remote` made (``openenv/GuessNumber-10.0.0.5-8000-v0`` ->
    ``http://10.0.0.5:8000``), so that a run's config.json finds its server again in a new process."""
    name_and_host, _, port = env_id.removeprefix("openenv/").removesuffix("-v0").rpartition("-")
    host = name_and_host.partition("-")[2]  # agentlab's env names have no '-'; host names may
    if not (env_id.startswith("openenv/") and host and port.isdigit()):
        raise ValueError(f"{env_id!r} is not an id made by register_remote (openenv/<Name>-<host>-<port>-v0)")
    return f"http://{host}:{port}"
