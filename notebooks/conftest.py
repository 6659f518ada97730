"""Under `make test-notebooks` two workers take whole notebooks from one queue (pytest-xdist,
--dist loadscope --no-loadscope-reorder): the longest go first, so that the last ones left while
a worker waits are short. Cells keep their order (the sort is stable).

Each notebook run in full also leaves an executed copy behind for `make book` (below)."""

import base64
import copy
import html
import os
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import IPyNbCell

# the slowest notebooks on the ci profile from a clean clone, slowest first; the rest follow in file order.
# 08 and 14 build their own warm-ups first (08's analysis warm-up takes eight minutes on one
# thread): started last, such a build kept one worker busy while the other waited. 10 trains seven
# GuessNumber runs and builds a warm-up of its own for its §2, the collapse (about 9 minutes alone on one thread).
# 07b builds SmolLM2's SQL warm-up and trains it: 396 s and 192 s under make test from a clean clone, and §8's
# one-update collapse run about 200 s more.
LONGEST_FIRST = ["04_returns_and_gae", "07b_a_real_model_on_your_laptop", "10_failure_modes_lab", "03_rewards",
                 "08_verifiable_rewards", "14_real_tasks", "06_grpo", "05_ppo_with_a_critic", "00_setup_and_tour"]


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        stem = item.path.stem
        return LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


# ---------------------------------------------------------------------------------------------- executed copies
# The nbval run leaves an executed copy of each notebook it ran in full, build/executed/<name>.ipynb, outputs
# included, from which `make book` renders the course without executing anything again (docs/book.md). Under
# xdist each worker writes the notebooks it ran (--dist loadscope keeps a notebook on one worker). nbval keeps
# each cell's outputs (IPyNbCell.test_outputs) but reads past the widget messages; a widget's state is taken
# here from the same message stream and its final view written as static HTML, since a static page has no
# kernel to draw it and the widget manager that could would come from the network.

EXECUTED = Path(__file__).resolve().parents[1] / "build" / "executed"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _record_widgets(nb_file) -> dict:
    """Wrap this notebook's nbval message reader so that widget comm messages also update ``states``.

    nbval has no hook for the messages it skips; wrapping this one file's reader, not nbval's class, is
    the narrowest way to see them, and it changes nothing nbval reads or checks."""
    states: dict[str, dict] = {}
    read = nb_file.get_kernel_message

    def get_kernel_message(*args, **kwargs):
        msg = read(*args, **kwargs)
        content, kind = msg.get("content", {}), msg.get("msg_type")
        opened = kind == "comm_open" and content.get("target_name") == "jupyter.widget"
        if opened or (kind == "comm_msg" and content.get("comm_id") in states):
            data = content.get("data", {})
            if opened or data.get("method") in ("update", "echo_update"):
                state = dict(data.get("state", {}))
                for path, buf in zip(data.get("buffer_paths", []), msg.get("buffers", [])):
                    if len(path) == 1:  # e.g. an Image's value; nested paths are not shown here
                        state[path[0]] = bytes(buf)
                states.setdefault(content["comm_id"], {}).update(state)
        return msg

    nb_file.get_kernel_message = get_kernel_message
    return states


def _ref(x) -> str:
    return x[len("IPY_MODEL_"):] if isinstance(x, str) and x.startswith("IPY_MODEL_") else ""


def _output_html(out: dict) -> str:
    data = out.get("data", {})
    if "text/html" in data:
        return "".join(data["text/html"])
    if "image/png" in data:
        return f"<img src='data:image/png;base64,{''.join(data['image/png']).strip()}'>"
    text = out.get("text") or "".join(data.get("text/plain", ""))
    return f"<pre>{html.escape(text)}</pre>" if text else ""


def widget_html(model_id: str, states: dict, depth: int = 0) -> str:
    """The static HTML of a widget's last state: text, tables and images as drawn, controls disabled."""
    s = states.get(model_id)
    if s is None or depth > 50:
        return ""
    layout = states.get(_ref(s.get("layout"))) or {}
    if layout.get("display") == "none" or layout.get("visibility") == "hidden":
        return ""
    name, value = s.get("_model_name", ""), s.get("value")
    desc = s.get("description")
    label = f"<span class='al-static-label'>{html.escape(str(desc))}</span> " if desc else ""
    kids = [widget_html(_ref(c), states, depth + 1) for c in s.get("children", [])]
    options = s.get("_options_labels") or []
    if name in ("HTMLModel", "HTMLMathModel"):
        body = label + (value or "")
    elif name == "ImageModel":
        body = f"<img src='data:image/{s.get('format', 'png')};base64,{base64.b64encode(value or b'').decode()}'>"
    elif name in ("HBoxModel", "VBoxModel", "BoxModel", "GridBoxModel"):
        direction = "row" if name == "HBoxModel" else "column"
        body = f"<div style='display:flex;flex-direction:{direction};flex-wrap:wrap;gap:4px'>{''.join(kids)}</div>"
    elif name in ("TabModel", "AccordionModel", "StackModel"):
        titles = s.get("titles") or [""] * len(kids)
        body = "".join(f"<div><b>{html.escape(str(t or ''))}</b>{k}</div>" for t, k in zip(titles, kids))
    elif name == "OutputModel":
        body = "".join(_output_html(o) for o in s.get("outputs", []))
    elif name == "ButtonModel":
        body = f"<button disabled>{html.escape(str(desc or ''))}</button>"
    elif name == "CheckboxModel":
        body = f"<input type='checkbox' disabled{' checked' if value else ''}> " + label
    elif name in ("FloatProgressModel", "IntProgressModel"):
        body = label + f"<progress value='{value}' max='{s.get('max', 100)}'></progress>"
    elif options and isinstance(s.get("index"), int):
        body = label + f"<select disabled><option>{html.escape(str(options[s['index']]))}</option></select>"
    elif value is not None:
        body = label + f"<code>{html.escape(str(value))}</code>"
    else:
        body = label
    classes = " ".join(["al-static-widget", *s.get("_dom_classes", [])])
    return f"<div class='{classes}'>{body}</div>" if body else ""


def _static(outputs: list, states: dict) -> list:
    """Copies of a cell's outputs in which each widget view is replaced by its static HTML."""
    shown = []
    for out in copy.deepcopy(outputs):
        view = out.get("data", {}).pop(WIDGET_VIEW, None)
        if view is not None:
            out["data"]["text/html"] = widget_html(view.get("model_id", ""), states) or out["data"].get("text/html", "")
        shown.append(out)
    return shown


def _cells(item) -> list:
    return [i for i in item.session.items if i.parent is item.parent and isinstance(i, IPyNbCell)]


def write_executed(nb_file, cells: list, states: dict) -> Path | None:
    """Write ``nb_file``'s notebook with the outputs its cells received; None where some cell did not run."""
    if len(cells) != sum(c.cell_type == "code" for c in nb_file.nb.cells):
        return None  # part of the notebook was deselected (-k, a cell id): a partial copy would mislead
    nb = copy.deepcopy(nb_file.nb)
    nb.metadata["agentlab"] = {"profile": os.environ.get("AGENTLAB_PROFILE") or "default"}  # docs/book/build.py
    code = [c for c in nb.cells if c.cell_type == "code"]
    for count, (cell, item) in enumerate(zip(code, sorted(cells, key=lambda i: i.cell_num)), start=1):
        ran = item.test_outputs is not None
        cell.outputs = [nbformat.from_dict(o) for o in _static(item.test_outputs, states)] if ran else []
        cell.execution_count = count if ran else None
        for out in cell.outputs:
            if out.output_type == "execute_result":
                out.execution_count = count
    name = Path(nb_file.path).relative_to(Path(__file__).resolve().parent)
    path = EXECUTED / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    nb_file = item.parent
    if isinstance(item, IPyNbCell) and not hasattr(nb_file, "agentlab_widget_states"):
        nb_file.agentlab_widget_states = _record_widgets(nb_file)


def pytest_runtest_teardown(item, nextitem):
    nb_file = item.parent
    last = nextitem is None or nextitem.parent is not nb_file
    if last and hasattr(nb_file, "agentlab_widget_states"):
        write_executed(nb_file, _cells(item), nb_file.agentlab_widget_states)
