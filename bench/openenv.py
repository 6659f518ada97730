"""An agentlab env served over OpenEnv: requests per second and the latency of ``step`` on loopback.

``agentlab serve --env GuessNumber`` runs in its own process (its own interpreter, as in use).
In this process, C clients (openenv's async WebSocket client, one session each) play at once in
a loop: reset, then ``guess(8)`` until the episode ends, then reset again. Every request is
timed; the loop stops after a fixed number of steps or seconds, whichever comes first. For
scale, the same step in-process (`TextEnv.step` called directly) and through `RemoteEnv`, the
synchronous client that rollout uses, one session at a time.

    python -m bench.openenv            # or: python -m bench.run --only openenv
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import subprocess
import sys
import time

from bench.common import table

ENV = "agentlab/GuessNumber-v0"
ACTION = "guess(8)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, sessions: int) -> subprocess.Popen:
    import httpx

    server = subprocess.Popen([sys.executable, "-m", "agentlab.cli", "serve", "--env", ENV, "--port", str(port),
                               "--max-sessions", str(sessions)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("agentlab serve did not answer /health within 120 s")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def load(url: str, clients: int, max_steps: int, max_seconds: float) -> dict:
    """``clients`` sessions stepping at once until ``max_steps`` steps in all or ``max_seconds``."""
    from agentlab.integrations.openenv import _Client

    steps: list[float] = []  # seconds per step request
    requests = 0
    stop = time.perf_counter() + max_seconds

    async def one(seed: int) -> None:
        nonlocal requests
        client = _Client(base_url=url)
        await client.connect()
        done, episode = True, 0
        while len(steps) < max_steps and time.perf_counter() < stop:
            if done:
                await client.reset(seed=seed * 100_000 + episode)
                episode, requests = episode + 1, requests + 1
            t = time.perf_counter()
            done = (await client.step({"text": ACTION})).done
            steps.append(time.perf_counter() - t)
            requests += 1
        await client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(seed) for seed in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "steps": len(steps), "requests": requests, "seconds": wall,
            "requests_per_s": requests / wall, "steps_per_s": len(steps) / wall,
            "p50_ms": 1000 * percentile(steps, 50), "p99_ms": 1000 * percentile(steps, 99)}


def median_step_seconds(env, n: int) -> float:
    """The median time of ``env.step(ACTION)`` over ``n`` steps, resetting as episodes end."""
    times, done = [], True
    for i in range(n):
        if done:
            env.reset(seed=i)
        t = time.perf_counter()
        _, _, term, trunc, _ = env.step(ACTION)
        times.append(time.perf_counter() - t)
        done = term or trunc
    env.close()
    return statistics.median(times)


def run(quick: bool) -> str:
    levels = (1, 8, 64)
    max_steps, max_seconds = (1000, 10.0) if quick else (5000, 30.0)
    port = free_port()
    server = start_server(port, max(levels))
    url = f"http://127.0.0.1:{port}"
    try:
        results = [asyncio.run(load(url, c, max_steps, max_seconds)) for c in levels]
        from agentlab.integrations.openenv import RemoteEnv

        remote_ms = 1000 * median_step_seconds(RemoteEnv(url), 200 if quick else 1000)
    finally:
        server.terminate()
        server.wait(timeout=30)
    from agentlab.envs import make

    local_us = 1e6 * median_step_seconds(make(ENV), 2000 if quick else 10000)
    rows = [[r["clients"], r["steps"], f"{r['seconds']:.1f}", f"{r['requests_per_s']:.0f}", f"{r['steps_per_s']:.0f}",
             f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"] for r in results]
    body = table(["sessions at once", "steps", "seconds", "requests/s", "steps/s", "step p50 (ms)", "step p99 (ms)"],
                 rows)
    print(body)
    notes = (f"\n\nBounded at {max_steps} steps or {max_seconds:.0f} s per row, whichever came first; requests "
             "count resets and steps. One `agentlab serve` process, clients in one asyncio loop of another "
             f"process, loopback only. For scale: `RemoteEnv.step` (the synchronous client rollout uses, one "
             f"session) took {remote_ms:.2f} ms per step (median); the same `step` in-process "
             f"{local_us:.1f} µs.")
    return body + notes


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
