"""SQL-v0: answer a question about a small shop database by writing one SELECT.

Description:
    The kit builds a SQLite database from a seed (customers, products, orders: tens to
    hundreds of rows). The agent reads the schema, tries queries, and submits one SELECT;
    the reward compares its result set with the gold query's (a verifiable reward, S10).
    With ``renamed=True`` the tables and columns get other names (customers -> clients,
    name -> full_name, ...): a policy that memorised names fails, one that reads the schema
    does not (S6: "84% -> 31%" when field names changed).

    The database is opened read-only three times over: a ``mode=ro`` URI, ``PRAGMA
    query_only``, and an authorizer that allows nothing but reading. Every query has a time
    budget (a progress handler interrupts it) and a row budget.

Actions:
    ``schema()`` shows the tables and columns; ``query(SELECT ...)`` runs a query and shows
    the first rows and the row count; ``answer(SELECT ...)`` submits the final query.

Observations:
    The question, then the schema, query results or the error of each query.

Rewards (components):
    ``correct`` (outcome, +1.0) when the answer's rows equal the gold rows (as a multiset,
    or as a list when the question asks for an order); ``wrong`` (outcome, -0.2) otherwise;
    ``schema_seen`` (process, +0.05, once); ``query_ok`` (process, +0.05 per query that runs,
    at most twice); ``query_error`` (process, -0.05 per query that fails); ``format`` (-0.1,
    e.g. a statement that is not a single SELECT); ``repeat`` (-0.05).

Episode end:
    terminated on ``answer``; truncated after ``max_steps`` actions.

Info:
    ``checks["query_ran"]`` for each query; ``checks["read_schema_first"]`` on answer.

Arguments:
    ``renamed``: None (the task decides), True or False (forced). ``time_budget_s`` per
    query (default 0.5), ``max_rows`` read per query (default 1000). ``difficulty`` 0: one
    table, filter or count; 1: aggregate and GROUP BY; 2: a join; 3: join + GROUP BY +
    HAVING / ORDER BY / LIMIT. Plus the `TextEnv` arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sqlite3
import tempfile
import weakref
import time
from collections import Counter

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv
from agentlab.tasks import Task

# ---------------------------------------------------------------------------- the database

ORIGINAL = {"customers": "customers", "c_name": "name", "city": "city", "signup_year": "signup_year",
            "products": "products", "p_name": "name", "category": "category", "price": "price",
            "orders": "orders", "customer_id": "customer_id", "product_id": "product_id",
            "quantity": "quantity", "order_year": "order_year", "status": "status"}
RENAMED = {"customers": "clients", "c_name": "full_name", "city": "town", "signup_year": "joined_in",
           "products": "items", "p_name": "title", "category": "kind", "price": "unit_price",
           "orders": "purchases", "customer_id": "client_id", "product_id": "item_id",
           "quantity": "qty", "order_year": "placed_in", "status": "state"}
CITIES = ["Lyon", "Oslo", "Porto", "Quito", "Dakar", "Hanoi", "Perth", "Tunis"]
FIRST = ["Ana", "Ben", "Chen", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kim", "Leo", "Mia", "Noor", "Omar"]
LAST = ["Abe", "Berg", "Cruz", "Diaz", "Eng", "Fox", "Gray", "Hill", "Ito", "Jain"]
CATEGORIES = ["books", "games", "garden", "kitchen", "music", "toys"]
ADJ = ["Blue", "Quick", "Small", "Royal", "Quiet", "Bright", "Old", "Green"]
NOUN = ["Lamp", "Kettle", "Puzzle", "Rake", "Drum", "Novel", "Robot", "Chair", "Atlas", "Flute"]
STATUSES = ["paid", "shipped", "cancelled"]


def make_rows(db_seed: int) -> dict[str, list[tuple]]:
    """The shop's rows, drawn from ``db_seed`` (the same seed always gives the same shop)."""
    rng = np.random.default_rng(db_seed)
    cities = [CITIES[i] for i in rng.choice(len(CITIES), size=int(rng.integers(4, 7)), replace=False)]
    names = [f"{FIRST[i // len(LAST)]} {LAST[i % len(LAST)]}"
             for i in rng.choice(len(FIRST) * len(LAST), size=int(rng.integers(20, 41)), replace=False)]
    customers = [(i + 1, n, cities[int(rng.integers(len(cities)))], int(rng.integers(2018, 2025)))
                 for i, n in enumerate(names)]
    titles = [f"{ADJ[i // len(NOUN)]} {NOUN[i % len(NOUN)]}"
              for i in rng.choice(len(ADJ) * len(NOUN), size=int(rng.integers(10, 21)), replace=False)]
    products = [(i + 1, t, CATEGORIES[int(rng.integers(len(CATEGORIES)))], round(float(rng.uniform(2, 200)), 2))
                for i, t in enumerate(titles)]
    orders = [(i + 1, int(rng.integers(1, len(customers) + 1)), int(rng.integers(1, len(products) + 1)),
               int(rng.integers(1, 6)), int(rng.integers(2020, 2025)), STATUSES[int(rng.choice(3, p=[0.5, 0.3, 0.2]))])
              for i in range(int(rng.integers(60, 151)))]
    return {"customers": customers, "products": products, "orders": orders}


def schema_sql(n: dict) -> list[str]:
    return [
        f"CREATE TABLE {n['customers']} (id INTEGER PRIMARY KEY, {n['c_name']} TEXT, {n['city']} TEXT, {n['signup_year']} INTEGER)",
        f"CREATE TABLE {n['products']} (id INTEGER PRIMARY KEY, {n['p_name']} TEXT, {n['category']} TEXT, {n['price']} REAL)",
        f"CREATE TABLE {n['orders']} (id INTEGER PRIMARY KEY, {n['customer_id']} INTEGER REFERENCES {n['customers']}(id), "
        f"{n['product_id']} INTEGER REFERENCES {n['products']}(id), {n['quantity']} INTEGER, {n['order_year']} INTEGER, {n['status']} TEXT)",
    ]


@functools.lru_cache(maxsize=256)
def db_image(db_seed: int, renamed: bool) -> bytes:
    """The database file's bytes, built in memory (no fsync per statement) and cached."""
    conn = sqlite3.connect(":memory:")
    build_db(conn, db_seed, renamed)
    image = conn.serialize()
    conn.close()
    return image


def build_db(conn: sqlite3.Connection, db_seed: int, renamed: bool) -> None:
    n = RENAMED if renamed else ORIGINAL
    rows = make_rows(db_seed)
    for stmt in schema_sql(n):
        conn.execute(stmt)
    for key, width in (("customers", 4), ("products", 4), ("orders", 6)):
        conn.executemany(f"INSERT INTO {n[key]} VALUES ({', '.join('?' * width)})", rows[key])
    conn.commit()


# ---------------------------------------------------------------------------- questions

# difficulty -> list of (key, question, gold SQL, near miss SQL, ordered). Names in braces
# are filled from ORIGINAL or RENAMED; {a}, {b} are parameters drawn from the database.
TEMPLATES = {
    0: [("city_count", "How many customers live in {a}? Return one number.",
         "SELECT COUNT(*) FROM {customers} WHERE {city} = '{a}'", "SELECT COUNT(*) FROM {customers}", False),
        ("category_names", "List the names of the products in the category '{a}'. Return one column: the product name.",
         "SELECT {p_name} FROM {products} WHERE {category} = '{a}'", "SELECT {p_name} FROM {products} WHERE {category} != '{a}'", False),
        ("status_count", "How many orders have the status '{a}'? Return one number.",
         "SELECT COUNT(*) FROM {orders} WHERE {status} = '{a}'", "SELECT COUNT(*) FROM {orders} WHERE {status} != '{a}'", False),
        ("signup_since", "How many customers signed up in {a} or later? Return one number.",
         "SELECT COUNT(*) FROM {customers} WHERE {signup_year} >= {a}", "SELECT COUNT(*) FROM {customers} WHERE {signup_year} > {a}", False)],
    1: [("avg_price", "What is the average price of the products in the category '{a}', rounded to 2 decimals? Return one number.",
         "SELECT ROUND(AVG({price}), 2) FROM {products} WHERE {category} = '{a}'", "SELECT ROUND(AVG({price}), 2) FROM {products}", False),
        ("per_city", "For each city, how many customers live there? Return two columns: city and count.",
         "SELECT {city}, COUNT(*) FROM {customers} GROUP BY {city}", "SELECT {city}, COUNT(DISTINCT {signup_year}) FROM {customers} GROUP BY {city}", False),
        ("qty_per_status", "What is the total quantity ordered for each order status? Return two columns: status and total quantity.",
         "SELECT {status}, SUM({quantity}) FROM {orders} GROUP BY {status}", "SELECT {status}, COUNT(*) FROM {orders} GROUP BY {status}", False),
        ("max_per_category", "What is the highest product price in each category? Return two columns: category and price.",
         "SELECT {category}, MAX({price}) FROM {products} GROUP BY {category}", "SELECT {category}, MIN({price}) FROM {products} GROUP BY {category}", False)],
    2: [("buyers_status", "Which customers have at least one order with the status '{a}'? Return one column: the customer name, each name once.",
         "SELECT DISTINCT c.{c_name} FROM {customers} c JOIN {orders} o ON o.{customer_id} = c.id WHERE o.{status} = '{a}'",
         "SELECT c.{c_name} FROM {customers} c JOIN {orders} o ON o.{customer_id} = c.id WHERE o.{status} = '{a}'", False),
        ("orders_from_city", "How many orders were placed by customers who live in {a}? Return one number.",
         "SELECT COUNT(*) FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id WHERE c.{city} = '{a}'",
         "SELECT COUNT(DISTINCT c.id) FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id WHERE c.{city} = '{a}'", False),
        ("qty_category", "What is the total quantity ordered of products in the category '{a}'? Return one number.",
         "SELECT SUM(o.{quantity}) FROM {orders} o JOIN {products} p ON o.{product_id} = p.id WHERE p.{category} = '{a}'",
         "SELECT COUNT(*) FROM {orders} o JOIN {products} p ON o.{product_id} = p.id WHERE p.{category} = '{a}'", False)],
    3: [("top_spenders", "Who are the 3 customers who spent the most (quantity times price) on orders that were not cancelled? "
         "Return two columns: name and amount spent rounded to 2 decimals, highest first (ties by name).",
         "SELECT c.{c_name}, ROUND(SUM(o.{quantity} * p.{price}), 2) AS spent FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id "
         "JOIN {products} p ON o.{product_id} = p.id WHERE o.{status} != 'cancelled' GROUP BY c.id ORDER BY spent DESC, c.{c_name} LIMIT 3",
         "SELECT c.{c_name}, ROUND(SUM(o.{quantity} * p.{price}), 2) AS spent FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id "
         "JOIN {products} p ON o.{product_id} = p.id GROUP BY c.id ORDER BY spent DESC, c.{c_name} LIMIT 3", True),
        ("busy_cities", "Which cities have more than {a} orders in total? Return two columns: city and number of orders, most orders first (ties by city).",
         "SELECT c.{city}, COUNT(*) AS n FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id GROUP BY c.{city} HAVING COUNT(*) > {a} ORDER BY n DESC, c.{city}",
         "SELECT c.{city}, COUNT(*) AS n FROM {orders} o JOIN {customers} c ON o.{customer_id} = c.id GROUP BY c.{city} HAVING COUNT(*) >= {a} ORDER BY n DESC, c.{city}", True),
        ("category_revenue", "What is the revenue (quantity times price) of each product category over paid and shipped orders? "
         "Return two columns: category and revenue rounded to 2 decimals, highest first.",
         "SELECT p.{category}, ROUND(SUM(o.{quantity} * p.{price}), 2) AS revenue FROM {orders} o JOIN {products} p ON o.{product_id} = p.id "
         "WHERE o.{status} IN ('paid', 'shipped') GROUP BY p.{category} ORDER BY revenue DESC",
         "SELECT p.{category}, ROUND(SUM(p.{price}), 2) AS revenue FROM {orders} o JOIN {products} p ON o.{product_id} = p.id "
         "WHERE o.{status} IN ('paid', 'shipped') GROUP BY p.{category} ORDER BY revenue DESC", True)],
}
PARAPHRASES = ["{q}", "Question about the shop database: {q}", "Using the shop's database, answer this with one SELECT. {q}"]


def fill(sql: str, renamed: bool, params: dict) -> str:
    return sql.format(**(RENAMED if renamed else ORIGINAL), **params)


def _normal(value):
    """Numbers compare by value (3 == 3.0, rounding noise ignored); text and NULL as they are."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = round(float(value), 4)
        return int(value) if value.is_integer() else value
    return value


def same_result(got: list[tuple], gold: list[tuple], ordered: bool) -> bool:
    got = [tuple(_normal(v) for v in row) for row in got]
    gold = [tuple(_normal(v) for v in row) for row in gold]
    return got == gold if ordered else Counter(got) == Counter(gold)


# ---------------------------------------------------------------------------- read-only access

class QueryRefused(Exception):
    """A statement that is not a single read-only SELECT."""


ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
# Functions that load code, touch files or can build huge values in a single VM step
# (which the progress handler cannot interrupt).
DENIED_FUNCTIONS = {"load_extension", "randomblob", "zeroblob", "readfile", "writefile", "edit", "fts3_tokenizer",
                    "printf", "format", "char"}
_COMMENT = re.compile(r"--[^\n]*|/\*.*?(\*/|$)", re.DOTALL)


def _authorizer(action, arg1, arg2, db_name, trigger):
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


def open_readonly(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)  # no giant strings or blobs
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.set_authorizer(_authorizer)
    return conn


def run_select(conn: sqlite3.Connection, sql: str, time_budget_s: float, max_rows: int) -> tuple[list[str], list[tuple], bool]:
    """Run one SELECT within the budgets: (column names, rows, more rows than max_rows)."""
    text = _COMMENT.sub(" ", sql).strip().rstrip(";").strip()
    first = text.split(None, 1)[0].upper() if text else ""
    if first not in ("SELECT", "WITH"):
        raise QueryRefused(f"only a single read-only SELECT (or WITH ... SELECT) is allowed, not {first or 'an empty statement'}")
    deadline = time.perf_counter() + time_budget_s
    conn.set_progress_handler(lambda: int(time.perf_counter() > deadline), 1000)
    try:
        cur = conn.execute(sql)
        rows = cur.fetchmany(max_rows + 1)
        columns = [d[0] for d in cur.description or []]
    except (sqlite3.ProgrammingError, sqlite3.Warning) as err:
        if "one statement" in str(err):
            raise QueryRefused("one statement at a time: remove everything after the first ';'") from None
        raise
    except sqlite3.OperationalError as err:
        if "interrupted" in str(err):
            raise sqlite3.OperationalError(f"interrupted: the query ran longer than its {time_budget_s:g} s budget") from None
        raise
    finally:
        conn.set_progress_handler(None, 0)
    return columns, rows[:max_rows], len(rows) > max_rows


# ---------------------------------------------------------------------------- the env

class SQLEnv(TextEnv):
    name = "SQL"
    description = ("Answer a question about a shop's SQLite database with one SELECT query. "
                   "Read the schema first: table and column names differ between databases.")
    tools = {"schema": "schema(): show the tables and their columns",
             "query": "query(SELECT ...): run a query and see the first rows",
             "answer": "answer(SELECT ...): submit the query whose result answers the question (final)"}
    default_weights = {"correct": 1.0, "wrong": -0.2, "schema_seen": 0.05, "query_ok": 0.05, "query_error": -0.05,
                       "format": -0.1, "repeat": -0.05}
    component_kinds = {"correct": "outcome", "wrong": "outcome", "schema_seen": "process", "query_ok": "process",
                       "query_error": "process", "format": "format", "repeat": "penalty"}
    default_max_steps = 6
    max_difficulty = 3
    example_action = "query(SELECT COUNT(*) FROM some_table)"
    action_tokens = 112  # the gold query of a level-3 task is up to 98 tiny-tokenizer tokens
    MAX_QUERY_REWARDS = 2  # query_ok is paid at most this often per episode
    SHOW_ROWS = 10

    def __init__(self, *args, renamed: bool | None = None, time_budget_s: float = 0.5, max_rows: int = 1000, **kwargs):
        super().__init__(*args, **kwargs)
        self.renamed = renamed
        self.time_budget_s = time_budget_s
        self.max_rows = max_rows
        self._dir = tempfile.mkdtemp(prefix="agentlab-sql-")
        # removed on close(), or when the env is garbage-collected (safe at interpreter exit, unlike __del__)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self.db_path = os.path.join(self._dir, "shop.db")
        self._built: tuple | None = None
        self._conn: sqlite3.Connection | None = None

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        d = int(np.clip(difficulty, 0, self.max_difficulty))
        renamed = bool(self.renamed)
        while True:  # draw until the gold query returns something
            db_seed = int(rng.integers(1_000_000))
            key, question, gold, near, ordered = TEMPLATES[d][int(rng.integers(len(TEMPLATES[d])))]
            rows = make_rows(db_seed)
            params = {"a": self._draw_param(key, rows, rng)}
            mem = sqlite3.connect(":memory:")
            mem.deserialize(db_image(db_seed, renamed))
            result = mem.execute(fill(gold, renamed, params)).fetchall()
            mem.close()
            if result and result[0][0] is not None:
                break
        return Task(
            id=f"sql-d{d}-{key}-{db_seed:06d}" + (f"-{params['a']}" if params["a"] != "" else "") + ("-renamed" if renamed else ""), type="sql",
            query=question.format(**params), answer=fill(gold, renamed, params), tools=list(self.tools),
            max_steps=self.default_max_steps, difficulty=d,
            data={"db_seed": db_seed, "renamed": renamed, "template": key, "params": params, "ordered": ordered},
        )

    @staticmethod
    def _draw_param(key: str, rows: dict, rng: np.random.Generator):
        def pick(values):
            options = sorted(set(values))
            return options[int(rng.integers(len(options)))]

        if key in ("city_count", "orders_from_city"):
            return pick(c[2] for c in rows["customers"])
        if key in ("category_names", "avg_price", "qty_category"):
            return pick(p[2] for p in rows["products"])
        if key in ("status_count", "buyers_status"):
            return pick(o[5] for o in rows["orders"])
        if key == "signup_since":
            return int(rng.integers(2019, 2024))
        if key == "busy_cities":
            return int(rng.integers(10, 30))
        return ""

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        query = PARAPHRASES[1 + int(rng.integers(len(PARAPHRASES) - 1))].format(q=task.query)
        return Task(**{**task.to_dict(), "query": query})

    def _template(self):
        return next(t for t in TEMPLATES[self.task.difficulty] if t[0] == self.task.data["template"])

    # -- episode -------------------------------------------------------------------------------
    def _start(self) -> str:
        self.is_renamed = bool(self.task.data.get("renamed", False)) if self.renamed is None else self.renamed
        self._open(int(self.task.data["db_seed"]), self.is_renamed)
        _, _, gold, _, ordered = self._template()
        self.gold = fill(gold, self.is_renamed, self.task.data.get("params", {}))
        self.ordered = bool(self.task.data.get("ordered", ordered))
        self.schema_seen = False
        self.queries_paid = 0
        self.queried = False
        return f"{self.task.query}\nUse schema(), query(SELECT ...) and finally answer(SELECT ...)."

    def _open(self, db_seed: int, renamed: bool) -> None:
        """(Re)build the database file when the task needs another one, and open it read-only."""
        if self._built == (db_seed, renamed):
            return
        if self._conn is not None:
            self._conn.close()
        tmp = self.db_path + ".new"
        with open(tmp, "wb") as f:
            f.write(db_image(db_seed, renamed))
        os.replace(tmp, self.db_path)
        writer = sqlite3.connect(":memory:")
        writer.deserialize(db_image(db_seed, renamed))
        self._schema = self._describe_schema(writer)
        writer.close()
        self._conn = open_readonly(self.db_path)
        self._built = (db_seed, renamed)

    def _act(self, action: Action) -> Outcome:
        w = self.weights
        if action.tool == "schema":
            if action.arg:
                raise ActionError("schema takes no argument: write schema()")
            components = {} if self.schema_seen else {"schema_seen": w["schema_seen"]}
            self.schema_seen = True
            return Outcome(self._schema_text(), components)
        sql = action.arg.strip().strip("`").strip()
        if not sql:
            raise ActionError(f"{action.tool} needs a SELECT statement between the parentheses")
        try:
            columns, rows, more = run_select(self._conn, sql, self.time_budget_s, self.max_rows)
            error = None
        except QueryRefused as err:
            raise ActionError(f"refused: {err}") from None
        except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError, MemoryError) as err:
            columns, rows, more, error = [], [], False, str(err)[:300]
            if "not authorized" in error or "prohibited" in error or "readonly" in error:
                raise ActionError(f"refused: the database is read-only and only SELECT may run ({error})") from None
        if action.tool == "query":
            self.queried = True
            if error is not None:
                return Outcome(f"Error: {error}", {"query_error": w["query_error"]}, checks={"query_ran": False})
            paid = self.queries_paid < self.MAX_QUERY_REWARDS
            self.queries_paid += paid
            return Outcome(self._table(columns, rows, more), {"query_ok": w["query_ok"] if paid else 0.0},
                           checks={"query_ran": True})
        gold_rows = self._conn.execute(self.gold).fetchall()
        correct = error is None and not more and same_result(rows, gold_rows, self.ordered)
        checks = {"read_schema_first": self.schema_seen}
        if correct:
            return Outcome("Correct: your result matches the expected rows.", {"correct": w["correct"]},
                           terminated=True, success=True, checks=checks)
        why = f"the query failed: {error}" if error else (
            f"your result ({len(rows)}{'+' if more else ''} row(s)) is not the expected one ({len(gold_rows)} row(s))")
        return Outcome(f"Wrong: {why}.", {"wrong": w["wrong"]}, terminated=True, checks=checks)

    def _schema_text(self) -> str:
        return self._schema

    @staticmethod
    def _describe_schema(conn: sqlite3.Connection) -> str:
        """Tables, columns and row counts (read with the builder's connection: the read-only
        one may not run PRAGMAs)."""
        lines = ["Tables:"]
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
            cols = conn.execute(f"PRAGMA table_info({name})").fetchall()
            count = conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]
            lines.append(f"  {name}({', '.join(f'{c[1]} {c[2]}' for c in cols)})  -- {count} rows")
        return "\n".join(lines)

    def _table(self, columns: list[str], rows: list[tuple], more: bool) -> str:
        total = f"more than {self.max_rows}" if more else str(len(rows))
        shown = [" | ".join(columns)] + [" | ".join(str(v)[:40] for v in row) for row in rows[: self.SHOW_ROWS]]
        tail = f"\n... ({len(rows) - self.SHOW_ROWS} more)" if len(rows) > self.SHOW_ROWS else ""
        return f"{total} row(s):\n" + "\n".join(shown) + tail

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        shutil.rmtree(self._dir, ignore_errors=True)
        self._built = None
        super().close()

    # -- demonstrators -------------------------------------------------------------------------
    def expert_action(self) -> str:
        if not self.schema_seen:
            return "schema()"
        if self.task.difficulty >= 2 and not self.queried:
            return f"query({self.gold})"
        return f"answer({self.gold})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematically careless demonstrator: never reads the schema, writes table and column
        names from memory (the original ones), and makes the template's typical mistake."""
        _, _, _, near, _ = self._template()
        return f"answer({fill(near, False, self.task.data.get('params', {}))})"
