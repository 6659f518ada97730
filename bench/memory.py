"""Memory: peak RSS of `agentlab demo --profile ci`, and the bytes of a policy's weights in fp32 vs NF4.

* The demo runs as a child process of a small launcher, which reads its peak resident set
  size with ``getrusage(RUSAGE_CHILDREN)`` (see `LAUNCHER` for why not directly).
* The weights are counted tensor by tensor after `load_policy(path)` and
  `load_policy(path, quantization="4bit")` of the same tiny config. A 4-bit weight is stored
  as packed uint8 (two 4-bit codes per byte) plus its `QuantState`: one absmax per block of
  64 weights — itself quantised to 8 bits with one float32 scale per 256 absmaxes (double
  quantisation, as `load_policy` configures it) — and the small NF4 code tables.
  Theory: 4 + 8/64 + 32/(64*256) = 4.127 bits per weight (4.5 without double quantisation).
  Only the linear layers inside the transformer blocks are quantised; the embeddings (tied
  with the output head), RMSNorm weights and rotary buffers stay in the compute dtype.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from bench.common import table, tiny_path

BLOCK, ABSMAX_BLOCK = 64, 256
NF4_BITS = 4 + 8 / BLOCK + 32 / (BLOCK * ABSMAX_BLOCK)  # with double quantisation
NF4_BITS_PLAIN = 4 + 32 / BLOCK  # absmax kept in float32
DEMO_TIMEOUT_S = 3600


# ---------------------------------------------------------------------------- peak RSS of a child

# Runs the command and reports RUSAGE_CHILDREN. It is needed because Linux carries a process's
# peak RSS across fork and exec: a child started straight from this (large) Python process would
# report at least this process's RSS. The launcher is exec'd fresh and small, so the peak of *its*
# child is the command's own.
LAUNCHER = """
import json, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    json.dump({"returncode": rc, "max_rss_kib": usage.ru_maxrss}, f)
"""


def peak_rss(cmd: list[str], env: dict | None = None, timeout_s: float = DEMO_TIMEOUT_S,
             log_path: str | None = None) -> dict:
    """Run ``cmd`` to the end; its peak RSS in bytes, wall seconds and exit code."""
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
        report = os.path.join(tmp, "rusage.json")
        log = open(log_path, "w") if log_path else subprocess.DEVNULL
        start = time.perf_counter()
        try:
            subprocess.run([sys.executable, "-c", LAUNCHER, report, *cmd], env=env, stdout=log,
                           stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        finally:
            if log_path:
                log.close()
        seconds = time.perf_counter() - start
        with open(report) as f:
            usage = json.load(f)
    return {"max_rss_bytes": usage["max_rss_kib"] * 1024, "seconds": seconds,  # ru_maxrss is in KiB on Linux
            "returncode": usage["returncode"]}


def demo_peak_rss(out_dir: str) -> dict:
    """`agentlab demo --profile ci` in a child process; its peak RSS and the demo's own summary."""
    json_path = os.path.join(out_dir, "demo.json")
    cmd = [sys.executable, "-m", "agentlab.cli", "demo", "--profile", "ci", "--json", json_path,
           "--out", os.path.join(out_dir, "run")]
    result = peak_rss(cmd, env={**os.environ, "AGENTLAB_PROFILE": "ci"}, log_path=os.path.join(out_dir, "demo.log"))
    if os.path.exists(json_path):
        with open(json_path) as f:
            result["summary"] = json.load(f)
    else:
        with open(os.path.join(out_dir, "demo.log")) as f:
            result["log_tail"] = f.read()[-2000:]
    return result


# ---------------------------------------------------------------------------- bytes of weights

def quant_state_bytes(state) -> int:
    """Bytes held by a bitsandbytes `QuantState`: absmax, code table, offset, and the nested state."""
    if state is None:
        return 0
    total = 0
    for name in ("absmax", "code", "offset"):
        t = getattr(state, name, None)
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total + quant_state_bytes(getattr(state, "state2", None))


def kind_of(name: str) -> str:
    """Which group a parameter belongs to, by its name."""
    if "embed" in name or "lm_head" in name:
        return "embeddings (tied with the output head)"
    if "norm" in name:
        return "RMSNorm weights"
    if name.endswith(".weight") and "_proj" in name:
        return "linear layers in the blocks"
    return "other"


def weight_bytes(model) -> dict[str, dict]:
    """Per group: logical parameters, bytes actually stored (quantisation state included), quantised?"""
    groups: dict[str, dict] = {}
    tensors = [(n, p) for n, p in model.named_parameters()] + [(n, b) for n, b in model.named_buffers()]
    for name, t in tensors:
        state = getattr(t, "quant_state", None)
        logical = state.shape.numel() if state is not None else t.numel()
        stored = t.numel() * t.element_size() + quant_state_bytes(state)
        g = groups.setdefault(kind_of(name), {"params": 0, "bytes": 0, "quantised": False})
        g["params"] += logical
        g["bytes"] += stored
        g["quantised"] |= state is not None
    return groups


def weights_table() -> tuple[str, dict]:
    """fp32 vs NF4 bytes of the tiny policy, per group, against the theoretical bits per parameter."""
    from agentlab.policy import load_policy

    fp32 = weight_bytes(load_policy(tiny_path()).model)
    nf4 = weight_bytes(load_policy(tiny_path(), quantization="4bit").model)
    rows = []
    for kind in fp32:
        a, b = fp32[kind], nf4.get(kind, {"params": 0, "bytes": 0, "quantised": False})
        theory = NF4_BITS if b["quantised"] else 32.0
        rows.append([kind, f"{a['params']:,}", f"{a['bytes']:,}", f"{b['bytes']:,}",
                     f"{8 * b['bytes'] / max(b['params'], 1):.3f}", f"{theory:.3f}",
                     "NF4" if b["quantised"] else "no (fp32)"])
    total_a, total_b = sum(g["bytes"] for g in fp32.values()), sum(g["bytes"] for g in nf4.values())
    n_params = sum(g["params"] for g in fp32.values())
    rows.append(["**total**", f"{n_params:,}", f"{total_a:,}", f"{total_b:,}", f"{8 * total_b / n_params:.3f}",
                 "", f"{total_a / total_b:.2f}x smaller"])
    md = table(["weights", "parameters", "fp32 bytes", "4-bit bytes", "4-bit bits/param (measured)",
                "bits/param (theory)", "quantised"], rows)
    quantised = [g for g in nf4.values() if g["quantised"]]
    bits = 8 * sum(g["bytes"] for g in quantised) / max(1, sum(g["params"] for g in quantised))
    return md, {"fp32": total_a, "nf4": total_b, "quantised_bits": bits}


def qwen_table() -> str:
    """The same arithmetic for Qwen2.5 shapes: what fp32, bf16 and NF4 weights would take."""
    from bench.gpu import QWEN2_5, parameter_counts

    rows = []
    for size in QWEN2_5:
        c = parameter_counts(size)
        rest = c["total"] - c["linear"]
        nf4 = c["linear"] * NF4_BITS / 8 + rest * 2  # the unquantised rest in bf16, as on a GPU
        rows.append([f"Qwen2.5-{size}", f"{c['total'] / 1e9:.2f} B", f"{100 * c['linear'] / c['total']:.0f}%",
                     f"{4 * c['total'] / 2**30:.2f}", f"{2 * c['total'] / 2**30:.2f}", f"{nf4 / 2**30:.2f}"])
    return table(["model", "parameters", "share quantised (block linears)", "fp32 GiB", "bf16 GiB",
                  "NF4 + bf16 rest GiB"], rows)


# ---------------------------------------------------------------------------- report

def run(quick: bool = False) -> str:
    """Measure, and return the RESULTS.md section (the demo runs at full size even with --quick)."""
    weights_md, weights = weights_table()
    print(weights_md, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as out_dir:
        demo = demo_peak_rss(out_dir)
    print(f"  demo: peak RSS {demo['max_rss_bytes'] / 2**20:.0f} MiB in {demo['seconds']:.0f} s "
          f"(exit {demo['returncode']})", flush=True)
    s = demo.get("summary", {})
    demo_rows = [["peak RSS", f"{demo['max_rss_bytes'] / 2**20:,.0f} MiB"],
                 ["wall time", f"{demo['seconds']:.0f} s"], ["exit code", demo["returncode"]]]
    if s:
        demo_rows += [["SFT warm-up (0 when cached)", f"{s.get('warmup_seconds', 0):.0f} s"],
                      ["RL updates", s.get("updates", "")],
                      ["greedy success before -> after",
                       f"{s['before']['success_rate']:.2f} -> {s['after']['success_rate']:.2f}"]]
    body = ["### Peak memory of `agentlab demo --profile ci`", "",
            "The demo as a child process (SFT warm-up, unless cached, then GRPO and greedy evals); peak resident "
            "set size from `getrusage(RUSAGE_CHILDREN)` in a small launcher process.", "",
            table(["", "value"], demo_rows), ""]
    if demo["returncode"] != 0:
        body += ["The demo failed; the end of its log:", "", "```", demo.get("log_tail", "").strip(), "```", ""]
    body += ["### Weights: fp32 vs 4-bit NF4 (bitsandbytes) for the tiny policy", "",
             "Counted tensor by tensor after `load_policy(path)` and `load_policy(path, quantization=\"4bit\")`. "
             f"Theory for NF4 with double quantisation: 4 bits + an 8-bit absmax per {BLOCK} weights + a float32 "
             f"scale per {ABSMAX_BLOCK} absmaxes = {NF4_BITS:.3f} bits ({NF4_BITS_PLAIN:.1f} without double "
             f"quantisation). The quantised layers measure {weights['quantised_bits'] - NF4_BITS:.2f} bits more "
             "because each also stores the 16-entry NF4 code table and the 256-entry float32 code table of the nested "
             "quantisation, about 1.1 KB per layer: a lot next to this model's layers of a few thousand weights, "
             "nothing next to a real model's millions. Embeddings, the tied output head and the norms stay fp32; "
             "in a model this small they are most of the bytes, so the total shrinks far less than the 8x of the "
             "quantised layers.", "", weights_md, "",
             "The same arithmetic for the Qwen2.5 shapes of `bench/gpu.py` (nothing loaded):", "", qwen_table()]
    return "\n".join(body)
