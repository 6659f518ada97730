"""The `agentlab` command: evaluate a policy, play an env yourself, size and run training.

    agentlab eval --env GuessNumber --policy expert --json out.json
    agentlab play --env Maze --seed 3
    agentlab budget --prompts 80000 --candidates 8 --length 1200 --epochs 2
    agentlab train --env GuessNumber --algo grpo --profile ci --steps 30 --lr 3e-4 --grpo.beta 0.02 --out runs/g
    agentlab train --config runs/g/config.json --out runs/g2      # the same run again
    agentlab demo --profile ci --json runs/demo/demo.json
    agentlab serve --env GuessNumber --port 8000                  # an OpenEnv server

Each subcommand is a pair of functions, ``setup_<name>(parser)`` adding its arguments and
``run_<name>(args) -> exit code``, listed once in `COMMANDS`; the first line of the run
function's docstring is its help. Heavy imports (torch, models) happen inside the run
functions, so ``agentlab budget`` and ``agentlab --help`` answer at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

PROFILES = ("ci", "cpu", "real-cpu", "gpu")  # as agentlab.profiles.PROFILES, without importing torch for --help


# ---------------------------------------------------------------------------- eval

def setup_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. agentlab/GuessNumber-v0 or GuessNumber")
    p.add_argument("--policy", default=None,
                   help="a saved model folder, a packaged model (smollm2-135m, qwen2.5-coder-0.5b), a .gguf file, "
                        "'tiny' (untrained), or 'expert' (scripted, no model); default: the profile's tiny policy "
                        "SFT-warmed on --env")
    p.add_argument("--action-format", default=None, choices=("call", "tool_call"),
                   help="how the model writes its tool calls: name(argument) or its chat template's <tool_call> "
                        "JSON; default: the model's own (tool_call where its template renders tools, as Qwen2.5's)")
    p.add_argument("--episodes", type=int, default=None, help="default: one per task of the split")
    p.add_argument("--split", default="eval", choices=["train", "eval", "paraphrase"])
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument("--profile", default=None, choices=PROFILES, help="default: AGENTLAB_PROFILE, else by device")
    p.add_argument("--sample", action="store_true", help="sample at --temperature instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=None, help="per turn; default: the profile's on --env")
    p.add_argument("--seed", type=int, default=0)


def run_eval(args: argparse.Namespace) -> int:
    """Success rate of a policy on an env's held-out tasks, with a 95% interval."""
    from agentlab.evaluate import evaluate, run_expert
    from agentlab.profiles import profile

    prof = profile(args.profile)
    t0 = time.time()
    if args.policy == "expert":
        result, name = run_expert(args.env, args.split, args.episodes), "expert"
    else:
        policy, name = load_cli_policy(args.policy, prof, args.env)
        policy.action_format = args.action_format or policy.action_format
        budget = args.max_new_tokens or prof.turn_tokens(args.env)
        result = evaluate(policy, args.env, args.split, args.episodes, greedy=not args.sample,
                          temperature=args.temperature, max_new_tokens=budget, seed=args.seed, progress=True)
    report = {**result.to_dict(), "policy": name, "profile": prof.name, "seconds": round(time.time() - t0, 2),
              "action_format": "call" if args.policy == "expert" else policy.action_format}
    if args.json:  # written before printing, so a closed stdout cannot lose it
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    lo, hi = result.success_ci95
    print(f"{result.env} [{result.split}] policy={name}: success {result.success_rate:.3f} "
          f"(95% CI {lo:.3f}-{hi:.3f}, {result.episodes} episodes, {result.tasks} tasks), "
          f"mean return {result.mean_return:.3f}, mean turns {result.mean_turns:.2f}, "
          f"invalid {result.invalid_rate:.3f}")
    for check, rate in result.step_rates.items():
        print(f"  step check {check}: {rate:.3f} over {result.step_counts[check]} steps")
    return 0


def load_cli_policy(arg: str | None, prof, env_id: str):
    """``None`` -> the profile's tiny policy warmed on ``env_id``; ``"tiny"`` or a folder -> that model."""
    from agentlab.policy import load_policy

    if arg is None:
        from agentlab.warmup import warm_policy_path

        arg = str(warm_policy_path(prof, envs=[env_id]))
        return load_policy(arg), f"warm-tiny ({arg})"
    return load_policy(arg), arg


# ---------------------------------------------------------------------------- play

PLAY_HELP = ("Type an action such as the example and press Enter. End a line with \\ to continue the "
             "action on the next line. Commands: :expert (the expert's suggestion), :help, :q (quit).")


def setup_play(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. agentlab/GuessNumber-v0 or GuessNumber")
    p.add_argument("--seed", type=int, default=0, help="picks the task; each new episode adds 1")
    p.add_argument("--difficulty", type=int, default=None, help="task difficulty (default: the lowest)")
    p.add_argument("--split", default="train", choices=["train", "eval", "paraphrase"],
                   help="train: generated tasks; eval/paraphrase: tasks from the task file")


def run_play(args: argparse.Namespace) -> int:
    """Play an env yourself in the terminal: see each observation and reward component."""
    from agentlab.envs import make

    env = make(args.env, difficulty=args.difficulty, split=args.split)
    seed = args.seed
    print(env.system_prompt)
    print(PLAY_HELP)
    try:
        while True:
            obs, info = env.reset(seed=seed)
            print(f"\n=== episode (seed {seed}, task {info['task_id']}, difficulty {info['difficulty']}, "
                  f"at most {info['max_steps']} steps) ===\n{obs}")
            total, done = 0.0, False
            while not done:
                action = read_action()
                if action is None or action.strip() in (":q", ":quit"):
                    return 0
                if action.strip() == ":expert":
                    print(f"expert: {env.expert_action()}")
                    continue
                if action.strip() in (":help", ":h", "?"):
                    print(PLAY_HELP)
                    continue
                if not action.strip():
                    continue
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                done = terminated or truncated
                print(obs)
                print(format_reward(reward, info))
            print(f"=== episode over: success={info['success']}, return {total:+.2f}, {env.t} steps ===")
            seed += 1
    finally:
        env.close()


def read_action(prompt: str = "> ") -> str | None:
    """One action from stdin; a line ending in a backslash continues. None at end of input."""
    lines = []
    while True:
        try:
            line = input(prompt if not lines else "... ")
        except EOFError:
            print()
            return None if not lines else "\n".join(lines)
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


def format_reward(reward: float, info: dict) -> str:
    """'reward +0.10 = consistent +0.10 | valid, tool guess, checks consistent_guess=True'."""
    parts = " + ".join(f"{name} {value:+.2f}" for name, value in info["reward_components"].items()) or "nothing"
    checks = ", ".join(f"{k}={v}" for k, v in (info.get("checks") or {}).items())
    status = "valid" if info["valid"] else "INVALID"
    return f"reward {reward:+.2f} = {parts} | {status}, tool {info['tool']}" + (f", checks {checks}" if checks else "")


# ---------------------------------------------------------------------------- budget

def setup_budget(p: argparse.ArgumentParser) -> None:
    from agentlab.budget import DEFAULT_TOKENS_PER_S

    p.add_argument("--prompts", type=int, required=True, help="distinct prompts (tasks) per epoch")
    p.add_argument("--candidates", type=int, required=True, help="samples per prompt (group size)")
    p.add_argument("--length", type=int, required=True, help="tokens per trajectory")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--tokens-per-s", type=float, default=DEFAULT_TOKENS_PER_S,
                   help=f"measured throughput (default {DEFAULT_TOKENS_PER_S:g}: the tiny policy on 2 CPU cores)")
    p.add_argument("--json", default=None, help="also write the numbers here")


def run_budget(args: argparse.Namespace) -> int:
    """Tokens an RL run processes (prompts x candidates x length x epochs) and the hours it takes."""
    from agentlab.budget import compute_budget, describe

    budget = compute_budget(args.prompts, args.candidates, args.length, args.epochs, args.tokens_per_s)
    print(describe(budget))
    if args.json:
        Path(args.json).write_text(json.dumps(budget.to_dict(), indent=1) + "\n")
    return 0


# ---------------------------------------------------------------------------- train and demo

# The flags of ``agentlab train`` are TrainConfig's fields (`agentlab.flags`), plus these short forms.
TRAIN_ALIASES = {"env_id": "--env", "updates": "--steps", "out_dir": "--out"}


def add_train_flags(p: argparse.ArgumentParser, usage: str, about: str) -> None:
    """Every `TrainConfig` field as a flag (`agentlab.flags`), for ``train`` and ``demo`` alike."""
    from agentlab.algos.grpo import ADVANTAGES
    from agentlab.algos.losses import IS_CORRECTIONS
    from agentlab.flags import add_flags
    from agentlab.sampler import SAMPLERS
    from agentlab.train import TrainConfig

    p.usage = f"{usage}   (--help lists every field)"
    p.description = f"{p.description} {about}"
    add_flags(p, TrainConfig, aliases=TRAIN_ALIASES,
              choices={"algo": ("grpo", "ppo"), "profile": PROFILES, "grpo.advantage": ADVANTAGES,
                       "sampler": (*SAMPLERS, None), "grpo.is_correction": (*IS_CORRECTIONS, None),
                       "ppo.is_correction": (*IS_CORRECTIONS, None)})


def setup_train(p: argparse.ArgumentParser) -> None:
    add_train_flags(p, "agentlab train [--config FILE] [--FIELD VALUE ...] [--resume]",
                    "Every field of agentlab.train.TrainConfig is a flag (nested ones as --grpo.beta); a field left "
                    "out keeps the --config file's value, else its default, and a None takes the profile's value. "
                    "--env also takes a short name (GuessNumber) or an OpenEnv server's address (http://host:port). "
                    "Lists: 0,1 or [0,1]; None: none; dicts: JSON. The run writes its whole config to "
                    "<out>/config.json, which --config takes back to repeat the run.")
    p.add_argument("--config", default=None, help="a JSON file of TrainConfig fields, e.g. a run's config.json")
    p.add_argument("--imperfect-share", type=float, default=None,
                   help="tiny profiles: share of biased demonstrations in the SFT warm-up the run starts from "
                        "(default: the env's plan; the demo warms GuessNumber with 0.6); sets --policy")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last checkpoint (says which; starts at 0 if there is none)")


def train_config(args: argparse.Namespace):
    """The run's TrainConfig: the --config file (if any), the flags given on top, then the names the
    command derives: ``--env`` as a short name or a server address, name ``<env>-<algo>``, out ``runs/<name>``."""
    from agentlab.envs import env_class
    from agentlab.flags import build, given
    from agentlab.integrations import env_id_of
    from agentlab.train import TrainConfig

    base = json.loads(Path(args.config).read_text()) if args.config else {}
    values = given(args, TrainConfig)
    cfg = build(TrainConfig, values, base, source=args.config or "config")
    env_id = env_id_of(cfg.env_id)
    name = cfg.name if "name" in values or "name" in base else f"{env_class(env_id).name.lower()}-{cfg.algo}"
    out_dir = cfg.out_dir or f"runs/{name}"
    policy = cfg.policy
    if policy is None and args.imperfect_share is not None:  # a warm-up of its own: start from that policy
        from agentlab.profiles import profile
        from agentlab.warmup import profile_policy_source

        policy = profile_policy_source(profile(cfg.profile), envs=[env_id], imperfect_share=args.imperfect_share)
    return dataclasses.replace(cfg, env_id=env_id, name=name, out_dir=out_dir, policy=policy)


def run_train(args: argparse.Namespace) -> int:
    """Train a policy with GRPO or PPO; metrics, checkpoints and the adapter go to --out."""
    from agentlab.memory import MemoryBudgetError
    from agentlab.train import TrainingDiverged, load_training_policy, train

    try:
        cfg = train_config(args)
    except (OSError, ValueError, TypeError, KeyError) as err:  # a config file or flag that does not fit TrainConfig
        print(f"agentlab train: {err}", file=sys.stderr)
        return 2
    try:
        result = train(cfg, load_training_policy(cfg), resume=args.resume)
    except FileExistsError as err:
        print(f"agentlab train: {err} (on the command line: --resume, or --out DIR to repeat the run elsewhere)",
              file=sys.stderr)
        return 1
    except (MemoryBudgetError, TrainingDiverged) as err:  # the message says what to change: no traceback
        print(f"agentlab train: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # train() has said what was kept and how to resume; a traceback adds nothing
        return 130
    first, last = result.evals[0], result.evals[-1]
    print(f"greedy held-out success: {first['success_rate']:.2f} (update {first['update']}) -> "
          f"{last['success_rate']:.2f} (update {last['update']}); run folder {result.out_dir}")
    return 0


def setup_demo(p: argparse.ArgumentParser) -> None:
    add_train_flags(p, "agentlab demo [--profile NAME] [--env ENV] [--json FILE] [--FIELD VALUE ...]",
                    "The run is the demo's recipe (agentlab.demo.demo_config): GRPO on GuessNumber from the lazy "
                    "warm-up on the tiny profiles, the real model's recipe on real-cpu (e.g. --profile real-cpu "
                    "--env Dialog). Every TrainConfig field is a flag, as for agentlab train, and a flag given "
                    "replaces the recipe's value; the run folder is runs/demo unless --out says otherwise.")
    p.add_argument("--json", default=None, help="write the before/after summary here")


def run_demo(args: argparse.Namespace) -> int:
    """Warm up the profile's policy, train it with GRPO, and show success before and after."""
    from agentlab.demo import DEMO_ENV
    from agentlab.demo import run_demo as demo
    from agentlab.flags import given
    from agentlab.train import TrainConfig

    overrides = given(args, TrainConfig)
    demo(overrides.pop("profile", None), args.json, overrides.pop("out_dir", None) or "runs/demo",
         env_id=overrides.pop("env_id", DEMO_ENV), **overrides)
    return 0


# ---------------------------------------------------------------------------- serve

def setup_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. agentlab/GuessNumber-v0 or GuessNumber")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; the default answers this machine only (the server has no "
                        "authentication: open it to a network you trust, e.g. --host 0.0.0.0 inside a cluster)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=64,
                   help="concurrent sessions (WebSocket connections), one env each; TRL needs at least its "
                        "generation batch")
    p.add_argument("--session-timeout", type=float, default=300.0,
                   help="seconds without a message after which a session is closed and its env freed")
    p.add_argument("--env-kwargs", type=json.loads, default=None,
                   help="env arguments fixed for every session, as JSON, e.g. '{\"reward_mode\": \"outcome\"}'")


def run_serve(args: argparse.Namespace) -> int:
    """Serve an env over OpenEnv (HTTP and WebSocket) for TRL, other machines and other tools."""
    from agentlab.envs import full_id
    from agentlab.integrations.openenv import serve

    env_id = full_id(args.env)
    where = f"{args.host}:{args.port}"
    print(f"serving {env_id} over OpenEnv on http://{where} (sessions on ws://{where}/ws, up to {args.max_sessions}); "
          f"play it with agentlab.integrations.openenv.register_remote('http://{where}'); Ctrl-C stops",
          flush=True)
    serve(env_id, host=args.host, port=args.port, max_sessions=args.max_sessions,
          session_timeout=args.session_timeout, env_kwargs=args.env_kwargs)
    return 0


# ---------------------------------------------------------------------------- the command

# name -> (add the arguments, run). To add a subcommand, write the two functions and a line here.
COMMANDS = {
    "eval": (setup_eval, run_eval),
    "play": (setup_play, run_play),
    "budget": (setup_budget, run_budget),
    "train": (setup_train, run_train),
    "demo": (setup_demo, run_demo),
    "serve": (setup_serve, run_serve),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command; with ``only``, just that subcommand gets its arguments (``agentlab budget``
    need not import torch to build ``train``'s flags)."""
    parser = argparse.ArgumentParser(prog="agentlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (setup, run) in COMMANDS.items():
        line = (run.__doc__ or "").strip().splitlines()[0]
        # argparse %-formats a help string but prints a description as it is: escape the help only
        p = sub.add_parser(name, help=line.replace("%", "%%"), description=line)
        if only in (None, name):
            setup(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from agentlab.flags import normalize_flag

    argv = [normalize_flag(a) for a in (sys.argv[1:] if argv is None else argv)]
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else "")  # "": no subcommand's arguments needed
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
