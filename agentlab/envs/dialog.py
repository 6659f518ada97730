"""Dialog-v0: ask a scripted user the right questions, then act on their hidden goal.

Description:
    A user wants something (a restaurant table, a pizza, a taxi) and says only part of it:
    "Book me a table in Oslo." The rest of the goal (time, party size, ...) is hidden. The
    agent asks about the missing slots, one question per turn, and then performs the action
    with every slot filled. Asking what was already said wastes the user's time; acting on a
    guess usually gets it wrong. Higher levels hide more slots, draw them from more values
    and add a distractor ("Last time it was at 8pm.") that is not the current goal.

Actions:
    ``ask(question)``: the user answers the slot the question is about, found by keyword
    (the slot's name or a synonym: "when" -> time, "how many" -> people); one slot per
    question, the first one named. An unrelated question gets "I'm not sure what you mean".
    ``act(slot=value, slot=value, ...)``: perform the request with every slot; ends the
    episode.

Observations:
    The user's request and the names of the slots ``act`` needs; then the user's replies.

Rewards (components):
    ``correct`` (outcome, +1.0) when every slot matches the goal, else ``wrong`` (outcome,
    -0.3). ``useful_question`` (process, +0.1) when a question reveals a slot not yet known;
    ``needless_question`` (process, -0.1) when it asks about a slot already stated or
    answered. ``repeat`` (-0.05) for the same action twice in a row; ``format`` (-0.1) for
    an invalid action (including ``act`` with a missing or unknown slot).

Episode end:
    terminated by ``act``; truncated after ``max_steps`` actions (3, 4, 6, 6 by level).

Info:
    ``checks["useful_question"]`` (ask steps): the question revealed a new slot.

Arguments:
    ``difficulty`` 0: one missing slot with 2 possible values; 1: two missing slots, 3
    values each; 2: three missing slots, 4 values each; 3: three missing slots, 8 values
    each, and a distractor. Plus the `TextEnv` arguments.

Version history:
    v0: first version.
"""

from __future__ import annotations

import re

import numpy as np

from agentlab.envs.base import Action, ActionError, Outcome, TextEnv
from agentlab.tasks import Task

# domain -> openers and slots; each slot: words that name it, values (the first few are the
# only ones used at low difficulty), how the user states it, how the user answers.
DOMAINS = {
    "restaurant": {
        "openers": ["Book me a table", "I need a table", "Please reserve a table"],
        "slots": {
            "city": dict(words=["city", "where", "town", "location"], say="in {v}", answer="In {v}.",
                         values=["Oslo", "Lima", "Cairo", "Quito", "Hanoi", "Dakar", "Perth", "Riga"]),
            "time": dict(words=["time", "when", "hour", "clock"], say="at {v}", answer="At {v}.",
                         values=["7pm", "8pm", "6pm", "9pm", "noon", "1pm", "2pm", "10pm"]),
            "people": dict(words=["people", "many", "guests", "party", "persons"], say="for {v} people",
                           answer="We are {v}.", values=["2", "4", "3", "6", "5", "8", "7", "10"]),
            "cuisine": dict(words=["cuisine", "food", "eat", "kind"], say="with {v} food", answer="{v} food, please.",
                            values=["thai", "italian", "sushi", "indian", "greek", "mexican", "korean", "french"]),
        },
    },
    "pizza": {
        "openers": ["Order me a pizza", "I want a pizza", "Get me a pizza"],
        "slots": {
            "size": dict(words=["size", "big", "small"], say="in size {v}", answer="Size {v}.",
                         values=["large", "medium", "small", "family", "personal", "xl", "mini", "party"]),
            "topping": dict(words=["topping", "toppings", "top"], say="with {v}", answer="With {v}.",
                            values=["cheese", "veggie", "ham", "mushroom", "pepperoni", "olive", "tuna", "onion"]),
            "crust": dict(words=["crust", "base", "dough"], say="on a {v} crust", answer="A {v} crust.",
                          values=["thin", "thick", "stuffed", "classic", "pan", "sourdough", "wholewheat", "crispy"]),
            "drink": dict(words=["drink", "beverage", "thirsty"], say="and {v} to drink", answer="{v} to drink.",
                          values=["cola", "water", "lemonade", "juice", "tea", "soda", "milk", "coffee"]),
        },
    },
    "taxi": {
        "openers": ["Call me a taxi", "I need a cab", "Get me a taxi"],
        "slots": {
            "pickup": dict(words=["pickup", "pick", "from", "start"], say="from the {v}", answer="From the {v}.",
                           values=["station", "airport", "hotel", "museum", "harbor", "stadium", "mall", "campus"]),
            "destination": dict(words=["destination", "where", "going", "drop"], say="going to the {v}",
                                answer="To the {v}.",
                                values=["airport", "station", "office", "beach", "zoo", "library", "park", "market"]),
            "time": dict(words=["time", "when", "hour", "clock"], say="at {v}", answer="At {v}.",
                         values=["7am", "8am", "9am", "6am", "noon", "5pm", "6pm", "11pm"]),
            "passengers": dict(words=["passengers", "many", "people", "persons", "riders"], say="for {v} people",
                               answer="{v} of us.", values=["1", "2", "3", "4", "5", "6", "7", "8"]),
        },
    },
}
# difficulty -> (slots stated, slots missing, values per missing slot, distractor, max steps)
LEVELS = {0: (1, 1, 2, False, 3), 1: (1, 2, 3, False, 4), 2: (1, 3, 4, False, 6), 3: (1, 3, 8, True, 6)}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def same(a: str, b: str) -> bool:
    return re.sub(r"[^a-z0-9]", "", a.lower()) == re.sub(r"[^a-z0-9]", "", b.lower())


def request_text(domain: str, opener: int, stated: list[str], goal: dict, distractor: dict | None) -> str:
    """The user's first message: an opener, the stated slots, and an optional distractor."""
    spec = DOMAINS[domain]
    parts = [spec["slots"][s]["say"].format(v=goal[s]) for s in stated]
    text = spec["openers"][opener] + (" " + " ".join(parts) if parts else "") + "."
    if distractor:
        said = spec["slots"][distractor["slot"]]["say"].format(v=distractor["value"])
        text += f" Last time it was {said}."
    return text


class DialogEnv(TextEnv):
    name = "Dialog"
    description = ("A user asks for something but leaves details out. Ask about each missing detail, one "
                   "question at a time, then act with every slot filled.")
    tools = {
        "ask": "ask(question): ask the user one question, e.g. ask(what time?)",
        "act": "act(slot=value, slot=value): do what the user wants with every slot filled; ends the dialogue",
    }
    default_weights = {"correct": 1.0, "wrong": -0.3, "useful_question": 0.1, "needless_question": -0.1,
                       "repeat": -0.05, "format": -0.1}
    component_kinds = {"correct": "outcome", "wrong": "outcome", "useful_question": "process",
                       "needless_question": "process", "repeat": "penalty", "format": "format"}
    default_max_steps = 6
    max_difficulty = 3
    example_action = "ask(what time?)"
    action_tokens = 40  # act(...) with four slots is up to 36 tiny-tokenizer tokens

    # -- tasks ---------------------------------------------------------------------------------
    def generate_task(self, rng: np.random.Generator, difficulty: int) -> Task:
        difficulty = int(np.clip(difficulty, 0, self.max_difficulty))
        n_stated, n_missing, n_values, distract, steps = LEVELS[difficulty]
        domain = str(rng.choice(list(DOMAINS)))
        spec = DOMAINS[domain]["slots"]
        names = list(spec)
        chosen = sorted(rng.choice(len(names), size=n_stated + n_missing, replace=False))
        slots = [names[i] for i in chosen]  # in the domain's order
        stated = [slots[i] for i in sorted(rng.choice(len(slots), size=n_stated, replace=False))]
        missing = [s for s in slots if s not in stated]
        values = {s: spec[s]["values"][:n_values] for s in missing}  # what a missing slot can be
        goal = {s: str(rng.choice(spec[s]["values"])) for s in stated}
        goal.update({s: str(rng.choice(values[s])) for s in missing})
        goal = {s: goal[s] for s in slots}
        distractor = None
        if distract:
            slot = missing[int(rng.integers(len(missing)))]
            other = [v for v in values[slot] if v != goal[slot]]
            distractor = {"slot": slot, "value": str(rng.choice(other))}
        opener = int(rng.integers(len(DOMAINS[domain]["openers"])))
        return Task(
            id=f"dialog-d{difficulty}-{domain}-" + "-".join(f"{s}.{goal[s]}" + ("*" if s in stated else "")
                                                            for s in slots),
            type="dialog",
            query=request_text(domain, opener, stated, goal, distractor),
            answer=goal,
            tools=list(self.tools),
            max_steps=steps,
            difficulty=difficulty,
            data={"domain": domain, "slots": slots, "stated": stated, "missing": missing, "values": values,
                  "opener": opener, "distractor": distractor},
        )

    def paraphrase(self, task: Task, rng: np.random.Generator) -> Task:
        """Another opener and, where several slots are stated, another order of them."""
        d = task.data
        openers = len(DOMAINS[d["domain"]]["openers"])
        opener = (d["opener"] + 1 + int(rng.integers(openers - 1))) % openers
        stated = [d["stated"][i] for i in rng.permutation(len(d["stated"]))]
        query = request_text(d["domain"], opener, stated, task.answer, d["distractor"])
        return Task(**{**task.to_dict(), "query": query, "data": {**d, "opener": opener}})

    # -- episode -------------------------------------------------------------------------------
    def _start(self) -> str:
        d = self.task.data
        self.slot_spec = DOMAINS[d["domain"]]["slots"]
        self.known = set(d["stated"])  # slots the agent has been told
        return f'User: "{self.task.query}"\nSlots: {", ".join(d["slots"])}.'

    def _act(self, action: Action) -> Outcome:
        if action.tool == "ask":
            return self._ask(action.arg)
        return self._perform(action.arg)

    def topic(self, question: str) -> str | None:
        """The slot of this domain a question is about: the first word that names one."""
        for word in words(question):
            for slot, spec in self.slot_spec.items():
                if word == slot or word in spec["words"]:
                    return slot
        return None

    def _ask(self, question: str) -> Outcome:
        if not words(question):
            raise ActionError("ask needs a question in words, e.g. ask(what time?)")
        w, slot = self.weights, self.topic(question)
        if slot is None:
            return Outcome("User: I'm not sure what you mean.", {}, checks={"useful_question": False})
        if slot not in self.task.data["slots"]:
            return Outcome(f"User: I don't mind about the {slot}.", {}, checks={"useful_question": False})
        reply = self.slot_spec[slot]["answer"].format(v=self.task.answer[slot])
        reply = reply[0].upper() + reply[1:]
        if slot in self.known:
            return Outcome(f"User: I already said. {reply}", {"needless_question": w["needless_question"]},
                           checks={"useful_question": False})
        self.known.add(slot)
        return Outcome(f"User: {reply}", {"useful_question": w["useful_question"]}, checks={"useful_question": True})

    def parse_slots(self, arg: str) -> dict[str, str]:
        """``slot=value, slot=value`` -> {slot: value}; every slot of the task exactly once."""
        slots, filled = self.task.data["slots"], {}
        for part in filter(None, (p.strip() for p in arg.split(","))):
            key, sep, value = part.partition("=")
            key, value = key.strip().lower(), value.strip().strip("'\"").strip()
            if not sep or not value:
                raise ActionError(f"act takes slot=value pairs, got {part[:30]!r}")
            if key not in slots:
                raise ActionError(f"unknown slot {key[:20]!r}; the slots are {', '.join(slots)}")
            if key in filled:
                raise ActionError(f"slot {key!r} given twice")
            filled[key] = value
        missing = [s for s in slots if s not in filled]
        if missing:
            raise ActionError(f"act needs every slot; missing {', '.join(missing)}")
        return filled

    def _perform(self, arg: str) -> Outcome:
        filled, w = self.parse_slots(arg), self.weights
        wrong = [s for s in filled if not same(filled[s], self.task.answer[s])]
        if not wrong:
            return Outcome("Done. That is exactly what I wanted, thanks!", {"correct": w["correct"]},
                           terminated=True, success=True)
        return Outcome(f"Done, but that is not what I wanted ({len(wrong)} detail(s) wrong).",
                       {"wrong": w["wrong"]}, terminated=True)

    # -- demonstrators -------------------------------------------------------------------------
    def _act_string(self, values: dict) -> str:
        return "act(" + ", ".join(f"{s}={values[s]}" for s in self.task.data["slots"]) + ")"

    def expert_action(self) -> str:
        for slot in self.task.data["missing"]:
            if slot not in self.known:
                return f"ask(what {slot}?)"
        return self._act_string(self.task.answer)

    def imperfect_action(self, rng: np.random.Generator) -> str:
        """A systematically impatient assistant: asks about every missing slot but the last,
        and fills that one with its most common value instead of asking."""
        missing = self.task.data["missing"]
        for slot in missing[:-1]:
            if slot not in self.known:
                return f"ask(what {slot}?)"
        last = missing[-1]
        guess = self.task.answer[last] if last in self.known else self.task.data["values"][last][0]
        return self._act_string({**self.task.answer, last: guess})
