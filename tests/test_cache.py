"""The model cache: built once by processes started together (accelerate launch, two notebooks at once),
whole or absent (a manifest written last, checked before loading), and checkpoints a full disk cannot break."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import cache

BUILD = "from agentlab.profiles import profile; from agentlab.tiny import build_tiny; print(build_tiny(profile('ci')))"


def test_processes_started_together_build_the_tiny_policy_once(tmp_path):
    env = {**os.environ, "AGENTLAB_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    printed = "".join(out for out, _ in outs)
    assert printed.count("building the tiny policy") == 1  # the second process waited, then found it built
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1 and os.path.exists(os.path.join(paths.pop(), "config.json"))


# -- whole or absent: a manifest written last, checked before a cached folder is loaded -----------------------

def saved(folder: Path, files: dict[str, bytes]) -> Path:
    def write(tmp):
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
    cache.atomic_save(folder, write)
    return folder


def test_the_manifest_lists_every_file_with_its_size_and_digest(tmp_path):
    out = saved(tmp_path / "thing", {"weights.bin": b"w" * 1000, "sub/config.json": b"{}"})
    files = json.loads((out / cache.MANIFEST).read_text())["files"]
    assert sorted(files) == ["sub/config.json", "weights.bin"] and files["weights.bin"]["size"] == 1000
    assert all(len(f["sha256"]) == 64 for f in files.values())
    assert cache.manifest_problem(out) is None and cache.reusable(out, "the thing")
    assert [p.name for p in tmp_path.iterdir()] == ["thing"]  # no temporary folder left beside it


@pytest.mark.parametrize("fault, said", [
    (lambda out: (out / "weights.bin").unlink(), "weights.bin is missing"),
    (lambda out: (out / "weights.bin").write_bytes(b"w" * 10), "weights.bin is 10 bytes, the manifest says 1000"),
    (lambda out: (out / "weights.bin").write_bytes(b"x" * 1000), "weights.bin has changed since it was written"),
    (lambda out: (out / cache.MANIFEST).unlink(), "it has no manifest.json"),  # a folder from before manifests
    (lambda out: (out / cache.MANIFEST).write_text('{"files": '), "its manifest.json cannot be read"),
], ids=["missing", "truncated", "changed", "no-manifest", "broken-manifest"])
def test_a_damaged_folder_is_removed_with_a_message_never_loaded(tmp_path, capsys, fault, said):
    out = saved(tmp_path / "thing", {"weights.bin": b"w" * 1000, "config.json": b"{}"})
    fault(out)
    assert said in cache.manifest_problem(out)
    assert not cache.reusable(out, "the thing") and not out.exists()
    assert f"the thing in {out} is not whole: {said}" in capsys.readouterr().out


def test_files_above_the_hash_limit_are_checked_by_size(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "HASH_LIMIT", 100)
    out = saved(tmp_path / "thing", {"weights.bin": b"w" * 1000})
    assert "sha256" not in json.loads((out / cache.MANIFEST).read_text())["files"]["weights.bin"]
    (out / "weights.bin").write_bytes(b"x" * 1000)
    assert cache.manifest_problem(out) is None  # the price of not hashing gigabytes at every load
    (out / "weights.bin").write_bytes(b"x" * 999)
    assert "999 bytes" in cache.manifest_problem(out)


def test_the_tiny_policy_and_a_warm_up_are_rebuilt_when_not_whole(tiny_path, tmp_path, monkeypatch, capsys):
    from agentlab.profiles import profile
    from agentlab.tiny import build_tiny
    from agentlab.warmup import WarmUp, warm_policy_path

    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path))
    shutil.copytree(tiny_path, tmp_path / tiny_path.name)  # the shared one stays untouched
    assert build_tiny(profile("ci")) == tmp_path / tiny_path.name and "building" not in capsys.readouterr().out
    weights = tmp_path / tiny_path.name / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a copy cut short
    path = build_tiny(profile("ci"))
    printed = capsys.readouterr().out
    assert "model.safetensors is 1000 bytes" in printed and "building the tiny policy" in printed
    assert cache.manifest_problem(path) is None

    def warm():
        plan = WarmUp(levels=(0,), episodes=4, steps=2)
        return warm_policy_path(profile("ci"), envs="agentlab/GuessNumber-v0", plan=plan)
    (warm() / cache.MANIFEST).unlink()  # as a folder from before manifests would be
    capsys.readouterr()
    path = warm()
    printed = capsys.readouterr().out
    assert "the warmed policy" in printed and "it has no manifest.json" in printed and "warming up" in printed
    assert cache.manifest_problem(path) is None and (path / "sft.json").exists()


def test_a_converted_gguf_folder_is_converted_again_when_not_whole(tmp_path, monkeypatch, capsys):
    from agentlab import pretrained

    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path / "cache"))
    converted = []

    def convert(path, out, recipe, progress):  # stands in for the 20-second conversion
        converted.append(out)
        cache.atomic_save(out, lambda tmp: (tmp / "model.safetensors").write_bytes(b"w" * 100))
    monkeypatch.setattr(pretrained, "_convert", convert)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = pretrained.gguf_folder(gguf)
    assert pretrained.gguf_folder(gguf) == out and len(converted) == 1
    (out / "model.safetensors").write_bytes(b"w" * 7)
    assert pretrained.gguf_folder(gguf) == out and len(converted) == 2
    assert "model.safetensors is 7 bytes" in capsys.readouterr().out


def test_an_assembled_gguf_file_is_renamed_only_once_its_digest_matches(tmp_path, monkeypatch, capsys):
    import hashlib

    from agentlab import pretrained

    monkeypatch.setenv("AGENTLAB_CACHE", str(tmp_path / "cache"))
    parts = {f"part{k}": tmp_path / f"part{k}" for k in (1, 2)}
    for k, folder in enumerate(parts.values()):
        folder.mkdir()
        (folder / "data.bin").write_bytes(bytes([k]) * 1000)
    whole = b"\0" * 1000 + b"\1" * 1000
    model = pretrained.NamedModel(package="part1", install="pip install part1 part2", file="m.gguf", hub_id="x/m",
                                  license="MIT", parts=(("part1", "data.bin"), ("part2", "data.bin")),
                                  sha256=hashlib.sha256(whole).hexdigest(), size=len(whole))
    monkeypatch.setitem(pretrained.NAMED_MODELS, "m", model)
    monkeypatch.setattr(pretrained, "_package_dir", lambda name, model, package: parts[package])
    out = pretrained.assembled_file("m")
    assert out.read_bytes() == whole
    out.write_bytes(whole[:1500])  # cut short (a copy of the cache, a full disk elsewhere)
    assert pretrained.assembled_file("m").read_bytes() == whole and "1500 bytes, not 2000" in capsys.readouterr().out
    out.unlink()
    (parts["part2"] / "data.bin").write_bytes(b"\2" * 1000)  # another version of a part
    with pytest.raises(pretrained.PolicyLoadError, match="put together have sha256"):
        pretrained.assembled_file("m")
    assert not any(out.parent.iterdir())  # neither the file nor its temporary copy


def test_a_full_disk_while_checkpointing_leaves_the_previous_checkpoint_usable(tmp_path, monkeypatch):
    import types

    import torch

    from agentlab import train

    model = torch.nn.Linear(3, 2)
    policy, optimizer = types.SimpleNamespace(model=model), torch.optim.Adam(model.parameters())
    first = train.save_checkpoint(tmp_path, 10, policy, optimizer, None, cfg=None)
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):  # the weights were written; then the disk filled up
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)
    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match=r"could not write .*update-00020 \(No space left on device\): the partial") as err:
        train.save_checkpoint(tmp_path, 20, policy, optimizer, None, cfg=None)
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [first.name]  # no partial copy either
    assert train.latest_checkpoint(tmp_path) == first and cache.manifest_problem(first) is None
    assert train.load_checkpoint(first, policy, optimizer, None) == 10
