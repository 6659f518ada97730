"""agentlab inside TRL's GRPOTrainer, and trajectories as Hugging Face datasets (the TRL issue's checks).

Runs on the CPU with no network, mostly with the untrained tiny model, which writes no valid
action: those tests check where TRL's rewards come from, not that anything learns. The
two-process run starts from the warmed policy, whose episodes earn different rewards.
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest
import torch

from agentlab.envs import env_class, make
from agentlab.integrations.trl import (TASK_KEY, EpisodeRollout, build_dataset, episode_batch, from_dataset,
                                       reward_funcs, task_of_prompt, to_dataset, tool_environment)
from agentlab.policy import LoraSettings, Policy, load_policy
from agentlab.rollout import (ACTION, PROMPT, SamplingSettings, Trajectory, load_jsonl, make_envs, pad_batch, rollout,
                              save_jsonl)
from agentlab.tasks import Task

GUESS, MATH = "agentlab/GuessNumber-v0", "agentlab/Math-v0"
GUESS_8 = Task(id="guess-8", type="guess", query="Find the hidden number between 1 and 16. You have 5 guesses.",
               answer=8, tools=["guess"], max_steps=5, data={"lo": 1, "hi": 16})


def assistant(text):
    return [{"role": "assistant", "content": text}]


def score(env_id, task_json, texts, completion_ids=None):
    """{component: [value per text]} from the reward adapter."""
    funcs = reward_funcs(env_id, eot_id=7)
    prompts = [[{"role": "user", "content": "?"}]] * len(texts)
    kwargs = {"task": [task_json] * len(texts)}
    if completion_ids is not None:
        kwargs["completion_ids"] = completion_ids
    return {f.__name__: f(prompts, [assistant(t) for t in texts], **kwargs) for f in funcs}, funcs[0].scorer


# ---------------------------------------------------------------------------- dataset of prompts

def test_dataset_prompt_is_what_rollout_shows_the_policy():
    ds = build_dataset("GuessNumber", limit=5)
    assert ds.column_names == ["prompt", "task", "task_id", "env_id"] and len(ds) == 5
    env = make(GUESS)
    for row in ds:
        task = Task.from_dict(json.loads(row["task"]))
        obs, _ = env.reset(options={"task": task})
        assert [(m["role"], m["content"]) for m in row["prompt"]] == [("system", env.system_prompt), ("user", obs)]
        assert task_of_prompt(row["prompt"]) == task.to_dict() and row["task_id"] == task.id
        assert row["prompt"][0][TASK_KEY] is None  # only the user message carries the task
    with pytest.raises(ValueError, match="build_dataset"):
        task_of_prompt([{"role": "user", "content": "no task here"}])


# ---------------------------------------------------------------------------- the reward adapter

def test_expert_action_gets_the_correct_component():
    task_json = json.dumps(GUESS_8.to_dict())
    env = make(GUESS)
    env.reset(options={"task": GUESS_8})
    expert = env.expert_action()
    rewards, _ = score(GUESS, task_json, [f"think: bisect\n{expert}", "guess(3)"])
    assert expert == "guess(8)"
    assert rewards["correct"] == [1.0, 0.0] and rewards["consistent"] == [0.1, 0.1]
    assert rewards["format"] == [0.0, 0.0]

    math_task = build_dataset(MATH, limit=1)[0]["task"]
    answer = json.loads(math_task)["answer"]
    rewards, _ = score(MATH, math_task, [f"answer({answer})", f"answer({answer + 1})"])
    assert rewards["correct"] == [0.6, 0.0] and rewards["wrong"] == [0.0, -0.2]


def test_malformed_or_unfinished_action_pays_the_format_penalty():
    task_json = json.dumps(GUESS_8.to_dict())
    texts = ["guess eight", "", "guess(8) and more", "ask(8)", "guess(8)"]
    finished = [[5, 7]] * 4 + [[5, 6]]  # the last one hit the token limit: no end-of-turn id (7)
    rewards, _ = score(GUESS, task_json, texts, completion_ids=finished)
    assert rewards["format"] == [-0.1] * 5
    assert rewards["correct"] == [0.0] * 5


def test_component_functions_sum_to_the_env_reward_and_replay_once():
    task_json = build_dataset(MATH, limit=1)[0]["task"]
    env = make(MATH)
    env.reset(options={"task": json.loads(task_json)})
    texts = [env.expert_action(), "step(1 + 1 = 3)", "nonsense", "answer(0)"]
    rewards, scorer = score(MATH, task_json, texts)
    for i, text in enumerate(texts):
        env.reset(options={"task": json.loads(task_json)})
        _, reward, *_ = env.step(text)
        assert sum(values[i] for values in rewards.values()) == pytest.approx(reward)
    assert list(rewards) == list(env.default_weights)  # one function per component, named after it
    assert scorer.replays == len(texts)  # memoised: seven functions, one replay per completion


def test_reward_without_the_task_column_says_how_to_fix_it():
    func = reward_funcs(GUESS)[0]
    with pytest.raises(ValueError, match="build_dataset"):
        func([[{"role": "user", "content": "?"}]], [assistant("guess(8)")])


# ---------------------------------------------------------------------------- TRL training

@pytest.fixture(scope="module")
def trl():
    return pytest.importorskip("trl")


def test_trl_grpo_logs_the_agentlab_reward_components(trl, tiny_path, tmp_path):
    """Two GRPO steps, single-turn: TRL's logged reward is the sum of the env's components."""
    policy = load_policy(str(tiny_path), lora=LoraSettings(r=4, alpha=8), device="cpu")
    policy.tokenizer.padding_side = "left"
    funcs = reward_funcs(MATH, eot_id=policy.eot_id)
    scorer, seen = funcs[0].scorer, []
    records = scorer.records
    scorer.records = lambda *a: seen.append(records(*a)) or seen[-1]  # spy: what the env paid, per call
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=12, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, seed=0, disable_tqdm=True, dataloader_pin_memory=False,
    )
    trainer = trl.GRPOTrainer(model=policy.model, processing_class=policy.tokenizer, reward_funcs=funcs,
                              args=args, train_dataset=build_dataset(MATH, limit=8))
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    assert len(logs) == 2
    assert scorer.replays > 0 and len(seen) == 2 * len(funcs)  # every function, every step, through the env
    for step, log in enumerate(logs):
        paid = seen[step * len(funcs)]  # the records all functions of this step shared
        for name in scorer.components:
            expected = sum(r["components"].get(name, 0.0) for r in paid) / len(paid)
            assert log[f"rewards/{name}/mean"] == pytest.approx(expected, abs=1e-6)
        total = sum(log[f"rewards/{name}/mean"] for name in scorer.components)
        assert log["reward"] == pytest.approx(total, abs=1e-5)
        assert "agentlab/success" in log and "agentlab/valid" in log


def test_trl_with_episode_rollout_trains_on_the_episode_outcome(trl, tiny_path, tmp_path):
    """Multi-turn through rollout_func: TRL's reward is the episode's return, observations are masked."""
    from agentlab.integrations.trl_train import TRLRun, build_trainer

    run = TRLRun(env_id="GuessNumber", model=str(tiny_path), steps=2, out=str(tmp_path), limit=8,
                 prompts_per_step=1, num_generations=4, max_new_tokens=8, max_completion_length=96, cpu=True)
    trainer, episodes = build_trainer(run)
    # called as TRL calls it: the stored logprobs are the sampling model's (the KV cache worked inside TRL)
    episodes([trainer.train_dataset[0]["prompt"]] * 2, trainer)
    policy = Policy(trainer.model, trainer.processing_class)
    batch = pad_batch(episodes.last_trajectories, policy.pad_id)
    with torch.no_grad():
        fresh = policy.token_logprobs(batch["ids"], batch["attn"])  # (B, L-1)
    mask = batch["loss_mask"].bool()
    assert torch.allclose(fresh[mask], batch["old_logp"][mask], atol=1e-4)

    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    trajs = episodes.last_trajectories
    assert len(logs) == 2 and len(trajs) == 4
    assert logs[-1]["reward"] == pytest.approx(sum(t.total_reward for t in trajs) / 4, abs=1e-5)
    assert len({t.task_id for t in trajs}) == 1  # one group = one task
    # the tokens TRL trained on are the episode's, with loss only on the policy's action tokens
    action_tokens = sum(t.roles.count(ACTION) for t in trajs)
    assert logs[-1]["completions/mean_length"] == pytest.approx(action_tokens / 4)


def test_episode_batch_splits_prompt_and_masks_observations(tiny_path):
    policy = load_policy(str(tiny_path), device="cpu")
    trajs = rollout(make_envs(GUESS, 3), policy, SamplingSettings(max_new_tokens=6), seeds=range(3),
                    generator=torch.Generator().manual_seed(0))
    batch = episode_batch(trajs)
    for i, t in enumerate(trajs):
        prompt, completion, mask = batch["prompt_ids"][i], batch["completion_ids"][i], batch["env_mask"][i]
        assert prompt == t.token_ids[:t.roles.count(PROMPT)]
        assert prompt + completion == t.token_ids[:len(prompt) + len(completion)]
        assert sum(mask) == t.roles.count(ACTION) and len(mask) == len(completion) == len(batch["logprobs"][i])
        assert mask[-1] == 1  # ends with the last action, not the env's reply to it
        assert sum(batch["agentlab_components"][i].values()) == pytest.approx(t.total_reward)


def test_episode_rollout_refuses_vllm():
    class Trainer:
        use_vllm = True

    with pytest.raises(ValueError, match="use_vllm=False"):
        EpisodeRollout(GUESS)([], Trainer())


def test_turn_budget_defaults_to_the_envs_action_tokens(trl):
    from agentlab.integrations.trl_train import TRLRun, grpo_config

    for env_id in (GUESS, MATH, "agentlab/SQL-v0", "agentlab/Code-v0"):  # 24 tokens cut SQL's and Code's actions
        budget = env_class(env_id).action_tokens
        assert EpisodeRollout(env_id).max_new_tokens == budget
        assert grpo_config(TRLRun(env_id=env_id, mode="single"), "cpu").max_completion_length == budget
    assert EpisodeRollout("SQL", max_new_tokens=7).max_new_tokens == 7
    assert grpo_config(TRLRun(env_id="SQL", mode="single", max_new_tokens=7), "cpu").max_completion_length == 7


def test_trl_train_runs_two_data_parallel_processes_on_the_cpu(trl, warm_path, tmp_path):
    """The command line under ``accelerate launch``: two processes meeting over gloo, each playing its
    own prompts, from a warmed policy whose episodes earn different rewards (so GRPO has a signal)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--main_process_port", "0", "-m", "agentlab.integrations.trl_train", "--cpu", "--env", "GuessNumber",
               "--model", str(warm_path), "--steps", "2", "--out", str(out), "--limit", "8", "--prompts-per-step", "1",
               "--num-generations", "4", "--max-completion-length", "160"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})  # one core per process
    assert run.returncode == 0, run.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["run"]["env_id"] == GUESS
    shares = summary["per_process"]
    assert [s["process"] for s in shares] == [0, 1]
    assert [s["episodes"] for s in shares] == [2 * 4, 2 * 4]  # steps x prompts per step x generations, each
    assert len(shares[0]["tasks"]) == len(shares[1]["tasks"]) == 2 and not set(shares[0]["tasks"]) & set(shares[1]["tasks"])
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all("rewards/correct/mean" in line for line in lines)
    assert max(line["reward_std"] for line in lines) > 0 and min(line["frac_reward_zero_std"] for line in lines) < 1
    assert (out / "final" / "adapter_config.json").exists()


def test_trl_train_refuses_accelerates_one_process_cpu_launch(trl, monkeypatch, capsys):
    from agentlab.integrations.trl_train import main

    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")  # what accelerate launch --cpu --num_processes 2 leaves
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="accelerate launch --multi_gpu --num_processes N"):
        main(["--env", "GuessNumber", "--model", "tiny", "--steps", "1"])


def test_trl_train_flags_are_trlruns_fields():
    from agentlab.integrations.trl_train import TRLRun, parse_args

    run = parse_args(["--env", "Math", "--lora_r", "0", "--difficulty", "none", "--no-cpu", "--beta", "0.02"])
    assert run == TRLRun(env_id="Math", lora_r=0, difficulty=None, cpu=False, beta=0.02)


# ---------------------------------------------------------------------------- tool environment

def test_tool_environment_plays_an_episode_through_tool_calls():
    from transformers.utils import get_json_schema

    Tools = tool_environment("GuessNumber")
    public = sorted(m for m in dir(Tools) if not m.startswith("_") and callable(getattr(Tools, m)))
    assert public == ["guess", "reset"]  # TRL turns every public method into a tool
    schema = get_json_schema(Tools().guess)["function"]
    assert schema["name"] == "guess" and list(schema["parameters"]["properties"]) == ["arg"]

    episode = Tools()
    assert episode.reset(task=json.dumps(GUESS_8.to_dict()), prompt=[], task_id="guess-8") is None
    assert "too low" in episode.guess("4")
    assert "correct" in episode.guess(8)
    assert "over" in episode.guess("9")  # nothing is paid after the end
    funcs = reward_funcs(GUESS)
    rewards = {f.__name__: f([[]], [assistant("done")], environments=[episode])[0] for f in funcs}
    assert rewards == {"correct": 1.0, "consistent": pytest.approx(0.2), "format": 0.0, "repeat": 0.0}
    assert episode.episode["turns"] == 2 and episode.episode["success"]


# ---------------------------------------------------------------------------- trajectories <-> datasets

@pytest.fixture(scope="module")
def trajectories(tiny_path):
    policy = load_policy(str(tiny_path), device="cpu")
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for env_id in [GUESS, MATH, "agentlab/Maze-v0"]:
        envs = make_envs(env_id, 2, max_steps=3)
        trajs += rollout(envs, policy, SamplingSettings(max_new_tokens=6), seeds=[0, 1], generator=gen)
    trajs[0].values, trajs[0].group = [0.5, -0.25, 0.125][:trajs[0].num_turns], 3  # a critic's values
    trajs[1].sample_key = 2 ** 62 - 1  # as an episode with its own sampling stream records it
    return trajs


def test_trajectories_round_trip_through_a_dataset(trajectories, tmp_path):
    ds = to_dataset(trajectories)
    assert len(ds) == 6 and len({t.env_id for t in trajectories}) == 3
    assert {"messages", "token_ids", "roles", "rewards", "components", "logprobs", "infos"} <= set(ds.column_names)
    save_jsonl(trajectories, tmp_path / "t.jsonl")
    reference = [t.to_dict() for t in load_jsonl(tmp_path / "t.jsonl")]  # Trajectory's own JSONL form
    assert [t.to_dict() for t in from_dataset(ds)] == reference == [t.to_dict() for t in trajectories]
    ds.save_to_disk(str(tmp_path / "ds"))
    from datasets import load_from_disk

    assert [t.to_dict() for t in from_dataset(load_from_disk(str(tmp_path / "ds")))] == reference
    assert ds[0]["components"][0][0].keys() == {"name", "value"}  # components stay queryable


def test_from_dataset_names_what_is_missing(trajectories):
    ds = to_dataset(trajectories).remove_columns(["logprobs"])
    with pytest.raises(ValueError, match="logprobs"):
        from_dataset(ds)
    with pytest.raises(ValueError, match="role, content"):
        to_dataset([Trajectory(env_id=GUESS, task_id="x", messages=[{"role": "user", "content": "", "name": "a"}])])


def test_trl_refuses_a_per_turn_advantage_and_says_where_it_runs():
    from agentlab.integrations.trl_train import TRLRun, build_trainer

    with pytest.raises(ValueError, match="agentlab train --env agentlab/Maze-v0 --grpo.advantage gigpo"):
        build_trainer(TRLRun(env_id="agentlab/Maze-v0", advantage="gigpo"))
