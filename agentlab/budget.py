"""How many tokens will an RL run process, and how long will that take? (S24)

Every update samples ``candidates`` trajectories for each prompt, and each trajectory is
``length`` tokens long (prompt, actions and observations together). Over ``epochs`` passes
through the prompts that is

    tokens ≈ prompts × candidates × length × epochs

e.g. 80,000 prompts × 8 candidates × 1,200 tokens × 2 epochs = 1,536,000,000 ≈ 1.5 B tokens.
Dividing by a measured throughput (tokens per second, generation and update together) gives
wall-clock time. Measure the throughput on your own machine with a short run first: the
tiny policy on two CPU cores does about 2,000 tokens/s; a 1.5 B model in 4-bit on one GPU
does far more per second but also has far longer trajectories.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

DEFAULT_TOKENS_PER_S = 2000.0  # the tiny policy on 2 CPU cores, measured (bench/RESULTS.md: rollout, GRPO step)


@dataclass
class Budget:
    """The inputs of the estimate and what follows from them (tokens, seconds, hours: derived)."""

    prompts: int
    candidates: int  # samples per prompt (the GRPO group size)
    length: int  # tokens per trajectory
    epochs: float
    tokens_per_s: float
    tokens: float  # derived: prompts * candidates * length * epochs
    seconds: float  # derived: tokens / tokens_per_s

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    def to_dict(self) -> dict:
        return {**asdict(self), "hours": self.hours}


def compute_budget(prompts: int, candidates: int, length: int, epochs: float = 1.0,
                   tokens_per_s: float = DEFAULT_TOKENS_PER_S) -> Budget:
    """tokens = prompts × candidates × length × epochs; seconds = tokens / tokens_per_s."""
    for name, value in [("prompts", prompts), ("candidates", candidates), ("length", length),
                        ("epochs", epochs), ("tokens_per_s", tokens_per_s)]:
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    tokens = float(prompts) * candidates * length * epochs
    return Budget(prompts, candidates, length, epochs, tokens_per_s, tokens, tokens / tokens_per_s)


def human(n: float) -> str:
    """1536000000 -> '1.54 B' (K, M, B, T)."""
    for unit, size in [("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)]:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:g}"


def describe(b: Budget) -> str:
    """A few lines a person can read: the arithmetic, the total and the time."""
    epochs = f"{b.epochs:g}"
    days = b.hours / 24
    return (
        f"tokens = prompts x candidates x length x epochs\n"
        f"       = {b.prompts:,} x {b.candidates:,} x {b.length:,} x {epochs}\n"
        f"       = {b.tokens:,.0f} tokens ({human(b.tokens)})\n"
        f"at {b.tokens_per_s:,.0f} tokens/s: {b.seconds:,.0f} s = {b.hours:,.1f} hours ({days:,.1f} days)"
    )
