"""Under `make test-notebooks` two workers take whole notebooks from one queue (pytest-xdist,
--dist loadscope --no-loadscope-reorder): the longest go first, so that the last ones left while
a worker waits are short. Cells keep their order (the sort is stable)."""

# the slowest notebooks on the ci profile from a clean clone, slowest first; the rest follow in file order.
# 08 and 14 build their own warm-ups first (08's analysis warm-up takes eight minutes on one
# thread): started last, such a build kept one worker busy while the other waited. 10 trains six
# GuessNumber runs and builds a warm-up of its own since its §2 trained the collapse (11 minutes alone on one thread).
LONGEST_FIRST = ["04_returns_and_gae", "03_rewards", "08_verifiable_rewards",
                 "10_failure_modes_lab", "14_real_tasks", "06_grpo", "05_ppo_with_a_critic",
                 "07b_a_real_model_on_your_laptop", "00_setup_and_tour"]


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        stem = item.path.stem
        return LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)
