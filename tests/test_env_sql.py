"""SQL-v0: the database stays read-only whatever the agent writes; budgets; the renamed variant (S6)."""

import hashlib
import time

import numpy as np
import pytest

import agentlab
from agentlab.envs.sql import SQLEnv, same_result


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def env():
    env = SQLEnv(max_steps=200)
    env.reset(seed=0)
    yield env
    env.close()


WRITES = [
    "INSERT INTO customers VALUES (999, 'x', 'y', 2020)",
    "UPDATE customers SET city = 'Nowhere'",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE t (x)",
    "CREATE INDEX i ON orders(status)",
    "CREATE VIEW v AS SELECT 1",
    "ALTER TABLE customers ADD COLUMN evil TEXT",
    "ALTER TABLE customers RENAME TO gone",
    "ATTACH DATABASE '/tmp/agentlab-attack.db' AS evil",
    "DETACH DATABASE main",
    "PRAGMA writable_schema = ON",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = DELETE",
    "VACUUM",
    "VACUUM INTO '/tmp/agentlab-copy.db'",
    "REPLACE INTO customers VALUES (1, 'x', 'y', 2020)",
    "INSERT OR REPLACE INTO products VALUES (1, 'x', 'y', 1.0)",
    "REINDEX",
    "ANALYZE",
    "BEGIN",
    "BEGIN IMMEDIATE; DELETE FROM orders; COMMIT",
    "COMMIT",
    "SAVEPOINT s",
    "SELECT 1; DROP TABLE orders",
    "SELECT 1; SELECT 2",
    "WITH x AS (SELECT 1) INSERT INTO customers SELECT 998, 'a', 'b', 2020 FROM x",
    "WITH x AS (SELECT 1) DELETE FROM orders",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT * FROM pragma_table_info('orders')",
    "SELECT randomblob(1000000000)",
    "SELECT printf('%.*c', 100000000, 'x')",
    "-- comment\nDELETE FROM orders",
    "/* x */ DROP TABLE customers",
]


@pytest.mark.parametrize("tool", ["query", "answer"])
def test_every_write_is_refused_and_the_file_is_unchanged(env, tool):
    before = digest(env.unwrapped.db_path)
    for sql in WRITES:
        if env.done:
            env.reset(seed=0)
        obs, reward, term, trunc, info = env.step(f"{tool}({sql})")
        assert not info["valid"], (sql, obs)
        assert "Invalid action" in obs and ("refused" in obs or "read-only" in obs), (sql, obs)
        assert reward < 0
    env.reset(seed=0)
    obs, *_ = env.step("query(SELECT COUNT(*) FROM orders)")
    assert "no such" not in obs
    assert digest(env.unwrapped.db_path) == before


def test_the_connection_itself_is_read_only(env):
    conn = env.unwrapped._conn
    for sql in ["DELETE FROM orders", "CREATE TABLE t (x)", "PRAGMA query_only = OFF"]:
        with pytest.raises(Exception):
            conn.execute(sql)


def test_runaway_query_is_interrupted_within_budget():
    env = SQLEnv(time_budget_s=0.3)
    env.reset(seed=0)
    for sql in ["WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
                "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d"]:
        start = time.perf_counter()
        obs, reward, *_ , info = env.step(f"query({sql})")
        assert time.perf_counter() - start < 1.5
        assert "interrupted" in obs and info["valid"] and reward < 0
    env.close()


def test_row_budget_and_row_count():
    env = SQLEnv(max_rows=50)
    env.reset(seed=0)
    obs, *_ = env.step("query(SELECT * FROM orders a, customers b)")
    assert obs.startswith("more than 50 row(s)")
    obs, *_ = env.step("query(SELECT * FROM customers LIMIT 12)")
    assert obs.startswith("12 row(s)") and "(2 more)" in obs
    env.close()


def run_policy(env, task, policy):
    env.reset(seed=0, options={"task": task})
    while True:
        _, _, term, trunc, info = env.step(policy())
        if term or trunc:
            return info["success"]


def test_renamed_variant_breaks_memorised_queries_but_not_the_expert():
    plain, renamed = SQLEnv(), SQLEnv(renamed=True)
    tasks = [plain.generate_task(np.random.default_rng(s), d) for d in range(4) for s in range(5)]
    for task in tasks:
        memorised = task.answer  # the gold query with the original names
        assert run_policy(plain, task, lambda: f"answer({memorised})")
        assert not run_policy(renamed, task, lambda: f"answer({memorised})")
        assert run_policy(renamed, task, renamed.expert_action)
    renamed.reset(seed=0, options={"task": tasks[0]})
    obs, *_ = renamed.step("schema()")
    assert "clients(" in obs and "full_name" in obs and "customers" not in obs
    plain.close(), renamed.close()


def test_renamed_task_data_field():
    env = SQLEnv(renamed=True)
    task = env.generate_task(np.random.default_rng(0), 1)
    assert task.data["renamed"] and "-renamed" in task.id
    other = SQLEnv()  # follows the task's own field
    other.reset(seed=0, options={"task": task})
    assert other.unwrapped.is_renamed
    env.close(), other.close()


def test_rewards_and_order():
    env = SQLEnv()
    task = next(t for t in (env.generate_task(np.random.default_rng(s), 3) for s in range(50))
                if t.data["template"] == "category_revenue")  # several rows, ordered
    assert task.data["ordered"]
    env.reset(seed=0, options={"task": task})
    _, r, *_ = env.step("schema()")
    assert r == pytest.approx(0.05)
    _, r, *_ = env.step("schema()")
    assert r == pytest.approx(-0.05)  # repeated, and the schema bonus is paid once
    _, r, *_ = env.step("query(SELECT * FROM nope)")
    assert r == pytest.approx(-0.05)
    _, r, *_ = env.step("query(SELECT 1)")
    assert r == pytest.approx(0.05)
    reversed_gold = f"SELECT * FROM ({task.answer}) ORDER BY 2 ASC"
    _, r, term, _, info = env.step(f"answer({reversed_gold})")
    assert term and not info["success"] and r == pytest.approx(-0.2)
    assert same_result([(1, "a"), (2.0, "b")], [(2, "b"), (1.0, "a")], ordered=False)
    assert not same_result([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], ordered=True)
    env.close()


def test_close_removes_the_database():
    import os

    env = agentlab.make("agentlab/SQL-v0")
    env.reset(seed=0)
    path = env.unwrapped.db_path
    assert os.path.exists(path)
    env.close()
    assert not os.path.exists(os.path.dirname(path))


def test_deterministic_given_seed():
    a, b = SQLEnv(difficulty=[0, 1, 2, 3]), SQLEnv(difficulty=[0, 1, 2, 3])
    for seed in range(5):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        assert digest(a.db_path) == digest(b.db_path)
    a.close(), b.close()
