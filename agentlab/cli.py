"""The `agentlab` command: evaluate a policy, play an env yourself, size and run training.

    agentlab eval --env GuessNumber --policy expert --json out.json
    agentlab play --env Maze --seed 3
    agentlab budget --prompts 80000 --candidates 8 --length 1200 --epochs 2
    agentlab train --env GuessNumber --algo grpo --profile ci --steps 30 --out runs/g
    agentlab demo --profile ci --json runs/demo/demo.json

Each subcommand is a pair of functions, ``setup_<name>(parser)`` adding its arguments and
``run_<name>(args) -> exit code``, listed once in `COMMANDS`; the first line of the run
function's docstring is its help. Heavy imports (torch, models) happen inside the run
functions, so ``agentlab budget`` and ``agentlab --help`` answer at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PROFILES = ("ci", "cpu", "real-cpu", "gpu")  # as agentlab.profiles.PROFILES, without importing torch for --help


# ---------------------------------------------------------------------------- eval

def setup_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. agentlab/GuessNumber-v0 or GuessNumber")
    p.add_argument("--policy", default=None,
                   help="a saved model folder, 'tiny' (untrained), or 'expert' (scripted, no model); "
                        "default: the profile's tiny policy SFT-warmed on --env")
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
        budget = args.max_new_tokens or prof.turn_tokens(args.env)
        result = evaluate(policy, args.env, args.split, args.episodes, greedy=not args.sample,
                          temperature=args.temperature, max_new_tokens=budget, seed=args.seed)
    report = {**result.to_dict(), "policy": name, "profile": prof.name, "seconds": round(time.time() - t0, 2)}
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

def setup_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="agentlab/GuessNumber-v0", help="env id, e.g. agentlab/WebSearch-v0")
    p.add_argument("--algo", default="grpo", choices=["grpo", "ppo"])
    p.add_argument("--profile", default=None, choices=PROFILES, help="default: AGENTLAB_PROFILE, else by device")
    p.add_argument("--steps", type=int, default=None, help="number of updates; default: the profile's")
    p.add_argument("--difficulty", type=int, default=0)
    p.add_argument("--policy", default=None, help="model folder or hub id; default: the profile's")
    p.add_argument("--imperfect-share", type=float, default=None,
                   help="tiny profiles: share of biased demonstrations in the SFT warm-up the run starts from "
                        "(default: the env's plan; the demo warms GuessNumber with 0.6)")
    p.add_argument("--out", default=None, help="run folder; default: runs/<env>-<algo>")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--seed", type=int, default=0)


def run_train(args: argparse.Namespace) -> int:
    """Train a policy with GRPO or PPO; metrics, checkpoints and the adapter go to --out."""
    from agentlab.envs import env_class, full_id
    from agentlab.profiles import profile
    from agentlab.train import TrainConfig, train
    from agentlab.warmup import profile_policy_source

    name = f"{env_class(args.env).name.lower()}-{args.algo}"
    policy = args.policy
    if policy is None and args.imperfect_share is not None:  # a warm-up of its own: start from that policy
        policy = profile_policy_source(profile(args.profile), envs=[full_id(args.env)], imperfect_share=args.imperfect_share)
    cfg = TrainConfig(env_id=full_id(args.env), algo=args.algo, profile=args.profile, updates=args.steps,
                      difficulty=args.difficulty, policy=policy, name=name, out_dir=args.out or f"runs/{name}",
                      seed=args.seed)
    result = train(cfg, resume=args.resume)
    first, last = result.evals[0], result.evals[-1]
    print(f"greedy held-out success: {first['success_rate']:.2f} (update {first['update']}) -> "
          f"{last['success_rate']:.2f} (update {last['update']}); run folder {result.out_dir}")
    return 0


def setup_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None, choices=PROFILES, help="default: AGENTLAB_PROFILE, else by device")
    p.add_argument("--json", default=None, help="write the before/after summary here")
    p.add_argument("--out", default="runs/demo", help="run folder")


def run_demo(args: argparse.Namespace) -> int:
    """Warm up the tiny policy, train it with GRPO, and show success before and after."""
    from agentlab.demo import run_demo as demo

    demo(args.profile, args.json, args.out)
    return 0


# ---------------------------------------------------------------------------- the command

# name -> (add the arguments, run). To add a subcommand, write the two functions and a line here.
COMMANDS = {
    "eval": (setup_eval, run_eval),
    "play": (setup_play, run_play),
    "budget": (setup_budget, run_budget),
    "train": (setup_train, run_train),
    "demo": (setup_demo, run_demo),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (setup, run) in COMMANDS.items():
        help_line = (run.__doc__ or "").strip().splitlines()[0].replace("%", "%%")  # argparse formats help with %
        p = sub.add_parser(name, help=help_line, description=help_line)
        setup(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
