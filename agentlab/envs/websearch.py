"""WebSearch-v0: answer a question by searching and reading a small offline encyclopedia.

Description:
    The search / read / finish agent of the reference article (A 3.1), run over an offline
    corpus instead of the web. Each task carries its own corpus of short documents about
    fictional countries, people and companies, generated from the task's seed. Questions are
    single-hop ("What is the capital of Valdoria?") or multi-hop ("What is the capital of
    the country where the founder of Zento Works was born?"). Search results show only ids,
    titles and relevance, so the answer has to be read, hop by hop.

Actions:
    ``search(query)``: up to 3-5 documents ranked by relevance (0..1), the share of the
    query's idf weight that the document matches (title words count fully, body words half).
    ``read(doc_id)``: the text of one document, e.g. ``read(d42)``.
    ``finish(answer)``: give the answer; ends the episode.

Observations:
    The question; then the ranked hits of a search, or the text of the document read.
    Difficulty 0 keeps both short (3 hits, 4 one-line documents).

Rewards (components):
    Process rewards pay for useful actions only (S8), and each document pays once:
    ``search_valid`` (process, +0.2) when a hit with relevance above ``relevance_threshold``
    is a document the question needs (one hop of the answer's chain) not found before;
    ``read_valid`` (process, +0.3) when the document read is such a document, first time.
    ``correct`` (outcome, +1.0) / ``wrong`` (outcome, -0.2) for the final answer;
    ``repeat`` (-0.05) for the same action twice in a row; ``format`` (-0.1) for an invalid
    or refused action.

Episode end:
    terminated by ``finish``; truncated after ``max_steps`` actions (5, 6, 8, 10 by level).

Info:
    ``checks["search_hit"]`` (search steps): a needed document was among the hits above the
    threshold (a title match; a document that only mentions the words scores at most 0.5).
    ``checks["read_after_search"]`` (read steps): the action before was a search and the
    document read holds the answer or a needed hop.

Arguments:
    ``require_evidence`` (default True): the S5 constraint, ``finish`` is refused until at
    least one search and one read happened. With False, "search once, then finish with a
    guess" is possible (the S18 shortcut); at difficulty 0 some answers come from a set of 3,
    so guessing sometimes wins. ``relevance_threshold`` (default 0.5).
    ``difficulty`` 0: a country's capital, language or currency; 1: a fact about a person or
    company, among look-alike names; 2: two hops; 3: three hops with more distractors.
    Plus the `TextEnv` arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import math
import re

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv
from agentlab.tasks import Task

RELEVANT = 0.5  # default relevance a hit needs before a search counts as useful
LANGUAGES = ["Orvish", "Tamic", "Belari", "Kessan", "Umbric", "Solene"]
CURRENCIES = ["crown", "mark", "florin", "tael", "dinar", "shell"]
OCCUPATIONS = ["painter", "chemist", "pilot", "baker", "architect", "sailor"]
INDUSTRIES = ["shipping", "software", "mining", "textile", "farming"]
STOPWORDS = set("a an the of in on at to for by is was are do does did what which who whom where "
                "when how and or it its there their this that name give".split())

# difficulty -> question kinds, corpus size, vocabulary size, hits shown, max steps, look-alike names
LEVELS = {
    0: dict(kinds=["capital", "language", "currency"], countries=3, people=1, companies=0, vocab=3, hits=3, steps=5,
            lookalikes=False),
    1: dict(kinds=["occupation", "birthplace", "industry"], countries=3, people=4, companies=2, vocab=6, hits=3, steps=6,
            lookalikes=True),
    2: dict(kinds=["birth_capital", "birth_language", "founder_occupation", "founder_birthplace"],
            countries=4, people=4, companies=2, vocab=6, hits=4, steps=8, lookalikes=True),
    3: dict(kinds=["founder_capital", "founder_language", "founder_currency"],
            countries=5, people=5, companies=4, vocab=6, hits=5, steps=10, lookalikes=True),
}
# kind -> question templates (the first is the task's own; the others are paraphrases)
QUESTIONS = {
    "capital": ["What is the capital of {c}?", "Name the capital city of {c}.", "Which city is the capital of {c}?"],
    "language": ["What language is spoken in {c}?", "Which language do people speak in {c}?", "Name the language of {c}."],
    "currency": ["What is the currency of {c}?", "Which currency is used in {c}?", "Name the money of {c}."],
    "occupation": ["What is the job of {p}?", "What does {p} do for a living?", "Name the occupation of {p}."],
    "birthplace": ["In which country was {p} born?", "Where was {p} born? Name the country.", "Name the home country of {p}."],
    "industry": ["In which industry is {o}?", "What business is {o} in?", "Name the industry of {o}."],
    "birth_capital": ["What is the capital of the country where {p} was born?",
                      "{p} was born in a country. What is its capital?"],
    "birth_language": ["What language is spoken in the country where {p} was born?",
                       "{p} was born in a country. Which language is spoken there?"],
    "founder_occupation": ["What is the job of the founder of {o}?", "Who founded {o}, and what is their job? Give the job."],
    "founder_birthplace": ["In which country was the founder of {o} born?", "Name the country where the founder of {o} was born."],
    "founder_capital": ["What is the capital of the country where the founder of {o} was born?",
                        "The founder of {o} was born in a country. Name its capital."],
    "founder_language": ["What language is spoken in the country where the founder of {o} was born?",
                         "The founder of {o} was born in a country. Which language is spoken there?"],
    "founder_currency": ["What is the currency of the country where the founder of {o} was born?",
                         "The founder of {o} was born in a country. Name its currency."],
}
# kind -> (chain of entity kinds to read, fact that answers)
CHAINS = {
    "capital": (["country"], "capital"), "language": (["country"], "language"), "currency": (["country"], "currency"),
    "occupation": (["person"], "occupation"), "birthplace": (["person"], "born in"),
    "industry": (["company"], "industry"),
    "birth_capital": (["person", "country"], "capital"), "birth_language": (["person", "country"], "language"),
    "founder_occupation": (["company", "person"], "occupation"),
    "founder_birthplace": (["company", "person"], "born in"),
    "founder_capital": (["company", "person", "country"], "capital"),
    "founder_language": (["company", "person", "country"], "language"),
    "founder_currency": (["company", "person", "country"], "currency"),
}

ONSETS = "b d f g k l m n p r s t v z br dr gr kr st tr".split()
VOWELS = "a e i o u a o".split()


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def normalise(answer: str) -> str:
    return " ".join(tokens(answer))


# ---------------------------------------------------------------------------- the corpus

class _Names:
    """Fresh fictional names whose words never collide (so search can tell them apart)."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.used = rng, set()

    def word(self, syllables: int, endings: list[str]) -> str:
        while True:
            w = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(syllables))
            w = (w + self.rng.choice(endings)).capitalize()
            if w.lower() not in self.used and w.lower() not in STOPWORDS:
                self.used.add(w.lower())
                return w


def generate_world(rng: np.random.Generator, level: dict) -> dict:
    """Countries, people and companies with facts; look-alike names from difficulty 1 on."""
    names, k = _Names(rng), level["vocab"]
    countries = [dict(kind="country", name=names.word(2, ["ia", "land", "ora", "any"]),
                      facts=[["capital", names.word(2, ["", "ton", "by", "grad"])],
                             ["language", str(rng.choice(LANGUAGES[:k]))],
                             ["currency", str(rng.choice(CURRENCIES[:k]))]])
                 for _ in range(level["countries"])]
    firsts = [names.word(2, ["", "n"]) for _ in range(level["people"])]
    lasts = [names.word(2, ["", "son", "ov", "ez"]) for _ in range(level["people"])]
    people = []
    for i in range(level["people"]):
        # From difficulty 1 on, person i shares a first or last name with person 0 (distractors).
        first = firsts[0] if (level["lookalikes"] and i == 1) else firsts[i]
        last = lasts[0] if (level["lookalikes"] and i == 2) else lasts[i]
        people.append(dict(kind="person", name=f"{first} {last}",
                           facts=[["occupation", str(rng.choice(OCCUPATIONS[:k]))],
                                  ["born in", countries[int(rng.integers(len(countries)))]["name"]]]))
    stems = [names.word(2, [""]) for _ in range(level["companies"])]
    companies = [dict(kind="company",
                      name=f"{stems[i - 1 if i % 2 else i]} {['Works', 'Labs', 'Group', 'Systems'][i % 4]}",
                      facts=[["industry", str(rng.choice(INDUSTRIES[: min(k, len(INDUSTRIES))]))],
                             ["founder", people[int(rng.integers(len(people)))]["name"]]])
                 for i in range(level["companies"])]
    return {"country": countries, "person": people, "company": companies}


def render(entity: dict) -> str:
    f = dict(entity["facts"])
    if entity["kind"] == "country":
        return (f"{entity['name']} is a country. Its capital is {f['capital']}, its language is "
                f"{f['language']} and its currency is the {f['currency']}.")
    if entity["kind"] == "person":
        return f"{entity['name']} is {article(f['occupation'])} born in {f['born in']}."
    return f"{entity['name']} is {article(f['industry'])} company founded by {f['founder']}."


def article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


# ---------------------------------------------------------------------------- the env

class WebSearchEnv(TextEnv):
    name = "WebSearch"
    description = ("Answer a question using a small offline encyclopedia of fictional countries, people and "
                   "companies. Search it, read the documents that matter, then finish with the answer.")
    tools = {
        "search": "search(query): ranked documents, each with id, title and relevance 0..1",
        "read": "read(doc_id): the text of a document, e.g. read(d42)",
        "finish": "finish(answer): give the final answer and end the episode",
    }
    default_weights = {"search_valid": 0.2, "read_valid": 0.3, "correct": 1.0, "wrong": -0.2,
                       "repeat": -0.05, "format": -0.1}
    component_kinds = {"search_valid": "process", "read_valid": "process", "correct": "outcome",
                       "wrong": "outcome", "repeat": "penalty", "format": "format"}
    default_max_steps = 10
    max_difficulty = 3
    example_action = "search(Valdoria)"

    def __init__(self, tasks=None, *, require_evidence: bool = True, relevance_threshold: float = RELEVANT, **kwargs):
        super().__init__(tasks, **kwargs)
        self.require_evidence = require_evidence
        self.relevance_threshold = relevance_threshold

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        difficulty = int(np.clip(difficulty, 0, self.max_difficulty))
        level = LEVELS[difficulty]
        world = generate_world(rng, level)
        kind = str(rng.choice(level["kinds"]))
        chain, fact = CHAINS[kind]
        # Walk the chain from a random first entity: company -> founder -> birth country.
        by_name = {e["name"]: e for group in world.values() for e in group}
        hops = [world[chain[0]][int(rng.integers(len(world[chain[0]])))]]
        for _ in chain[1:]:
            link = dict(hops[-1]["facts"])
            hops.append(by_name[link.get("founder") or link["born in"]])
        answer = dict(hops[-1]["facts"])[fact]
        # Documents in a shuffled order with unguessable ids.
        entities = [e for group in world.values() for e in group]
        order = rng.permutation(len(entities))
        ids = rng.choice(np.arange(10, 100), size=len(entities), replace=False)
        docs = [dict(id=f"d{ids[j]}", title=entities[i]["name"], text=render(entities[i]),
                     facts=entities[i]["facts"]) for j, i in enumerate(order)]
        doc_of = {d["title"]: d["id"] for d in docs}
        first = hops[0]["name"]
        query = QUESTIONS[kind][0].format(c=first, p=first, o=first)
        return Task(
            id=f"web-d{difficulty}-{kind}-{normalise(first).replace(' ', '-')}-{len(docs)}",
            type="search_qa",
            query=query,
            answer=answer,
            tools=list(self.tools),
            max_steps=level["steps"],
            difficulty=difficulty,
            data={"kind": kind, "n_hits": level["hits"], "docs": docs,
                  "hops": [{"entity": e["name"], "doc": doc_of[e["name"]]} for e in hops]},
        )

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        kind, first = task.data["kind"], task.data["hops"][0]["entity"]
        text = QUESTIONS[kind][1 + int(rng.integers(len(QUESTIONS[kind]) - 1))]
        return Task(**{**task.to_dict(), "query": text.format(c=first, p=first, o=first)})

    # -- search engine -------------------------------------------------------------------------
    def rank(self, query: str) -> list[tuple[str, float]]:
        """All documents as (id, relevance), best first; relevance in [0, 1].

        relevance = sum over query words w of idf(w) * match(w) / sum of idf(w), where match
        is 1 for a title word, 0.5 for a body word, 0 otherwise: the share of the query's
        information that the document covers.
        """
        words = [w for w in dict.fromkeys(tokens(query)) if w not in STOPWORDS]
        if not words:
            return []
        n = len(self.docs)
        idf = {w: 1.0 + math.log((n + 1) / (self._df.get(w, 0) + 1)) for w in words}
        total = sum(idf.values())
        scored = []
        for i, (doc_id, (title, body)) in enumerate(self._index.items()):
            s = sum(idf[w] * (1.0 if w in title else 0.5 if w in body else 0.0) for w in words) / total
            scored.append((-round(s, 6), i, doc_id))
        return [(doc_id, -neg) for neg, _, doc_id in sorted(scored)]

    # -- episode -------------------------------------------------------------------------------
    def _start(self) -> str:
        data = self.task.data
        self.docs = {d["id"]: d for d in data["docs"]}
        self._index = {d["id"]: (set(tokens(d["title"])), set(tokens(d["text"]))) for d in data["docs"]}
        self._df: dict[str, int] = {}
        for title, body in self._index.values():
            for w in title | body:
                self._df[w] = self._df.get(w, 0) + 1
        self.needed = [h["doc"] for h in data["hops"]]
        self.surfaced: set[str] = set()  # ids shown by any search
        self.found: set[str] = set()  # needed ids already paid as a useful search
        self.read_ids: set[str] = set()
        self.n_search = self.n_read = 0
        self.prev_tool: str | None = None
        self.last_read: str | None = None
        return self.task.query

    def _constraint(self, action: Action) -> str | None:
        if self.require_evidence and action.tool == "finish" and (self.n_search == 0 or self.n_read == 0):
            return "finish needs at least one search and one read first"
        return None

    def _act(self, action: Action) -> Outcome:
        return {"search": self._search, "read": self._read, "finish": self._finish}[action.tool](action.arg)

    def _search(self, query: str) -> Outcome:
        if not query.strip():
            raise ActionError("search needs a query, e.g. search(Valdoria)")
        hits = [(d, s) for d, s in self.rank(query) if s > 0][: int(self.task.data["n_hits"])]
        useful = {d for d, s in hits if s > self.relevance_threshold and d in self.needed}
        new = useful - self.found
        self.found |= useful
        self.surfaced |= {d for d, _ in hits}
        self.n_search += 1
        self.prev_tool = "search"
        components = {"search_valid": self.weights["search_valid"] if new else 0.0}
        if not hits:
            return Outcome("No results. Search for the name of a country, person or company.", components,
                           checks={"search_hit": False})
        lines = [f"[{d}] {self.docs[d]['title']} ({s:.2f})" for d, s in hits]
        return Outcome("Results:\n" + "\n".join(lines), components, checks={"search_hit": bool(useful)})

    def _read(self, arg: str) -> Outcome:
        doc_id = arg.strip().strip("[]'\" ").lower()
        if doc_id not in self.docs:
            raise ActionError("no such document; read takes an id from the search results, such as d42")
        useful = doc_id in self.needed
        after_search = self.prev_tool == "search"
        components = {"read_valid": self.weights["read_valid"] if useful and doc_id not in self.read_ids else 0.0}
        self.read_ids.add(doc_id)
        self.n_read += 1
        self.prev_tool = "read"
        self.last_read = doc_id
        doc = self.docs[doc_id]
        return Outcome(f"[{doc_id}] {doc['text']}", components,
                       checks={"read_after_search": bool(useful and after_search)})

    def _finish(self, answer: str) -> Outcome:
        if not normalise(answer):
            raise ActionError("finish needs an answer, e.g. finish(Mirelton)")
        w = self.weights
        if normalise(answer) == normalise(str(self.task.answer)):
            return Outcome(f"{answer.strip()} is correct!", {"correct": w["correct"]}, terminated=True, success=True)
        return Outcome(f"{answer.strip()[:60]} is wrong.", {"wrong": w["wrong"]}, terminated=True)

    # -- demonstrators -------------------------------------------------------------------------
    def _next_hop(self) -> str | None:
        """Search for the next unread hop, read it once it was found; None when all are read."""
        for hop in self.task.data["hops"]:
            if hop["doc"] in self.read_ids:
                continue
            if hop["doc"] in self.surfaced:
                return f"read({hop['doc']})"
            return f"search({hop['entity']})"
        return None

    def expert_action(self) -> str:
        return self._next_hop() or f"finish({self.task.answer})"

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematic skimmer: searches and reads like the expert, but answers with the
        first fact of the last document read, whatever the question asked for."""
        step = self._next_hop()
        if step is not None:
            return step
        return f"finish({self.docs[self.last_read]['facts'][0][1]})"
