"""bitsandbytes' 4-bit CPU path, patched for this process: exact weights, one weight layout, a quiet log.

bitsandbytes 0.50 misbehaves on CPUs with AVX512, and the tiny policy's 96-wide layers show it:

* `fix_bitsandbytes_cpu` registers a torch kernel for ``bitsandbytes::dequantize_4bit`` on the CPU,
  since bitsandbytes' own reads 4-bit weights back in blocks cut per row, though it wrote them in
  blocks of the flattened matrix (wrong weights where a row is not a whole number of blocks);
* `keep_cpu_4bit_layout` keeps 4-bit layers in one weight layout, since on CPUs with AVX512-BF16
  bitsandbytes repacks them for a faster kernel, and the repacking fails on small layers;
* importing this module drops one log message that bitsandbytes gives on such CPUs (below).

`agentlab.policy` imports this module, and calls both fixes when it loads a quantised model on a CPU.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings

import torch
import torch.nn.functional as F

# Importing peft imports bitsandbytes, which on CPUs with AVX512-BF16 tries to fetch an optional
# 4-bit kernel from the model hub and logs "Failed to load CPU gemm_4bit_forward from
# kernels-community" when it cannot (always, offline or without the `kernels` package). agentlab
# cannot skip that import, and the kernel serves a weight layout agentlab switches off
# (`keep_cpu_4bit_layout`), so exactly that message is dropped; the logger's others still show.
logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(
    lambda record: not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward"))


@functools.cache
def fix_bitsandbytes_cpu() -> bool:
    """Make bitsandbytes' 4-bit dequantisation exact on CPUs with AVX512; True if it was needed.

    bitsandbytes 0.50 quantises a weight matrix in blocks of 64 consecutive weights of the
    flattened matrix, but its AVX512 CPU kernel that turns the codes back into weights cuts
    each *row* into blocks. The two agree only when a row is a whole number of blocks: the
    tiny model's rows of 96 inputs are not, and on such a CPU every 4-bit layer computed with
    weights up to 0.47 block-absmax off (measured; a real model's rows of 896 or 1,536 inputs
    are whole blocks). This replaces that CPU kernel, for this process, by the plain reading of
    the format below. Loading in 4-bit calls it; call it yourself before using
    `bitsandbytes.functional.dequantize_4bit` directly.
    """
    import bitsandbytes.functional as bnbf
    from bitsandbytes.backends.cpu import ops as cpu_ops

    if not getattr(cpu_ops, "_has_avx512", False):  # the row-blocked kernel is registered only there
        return False

    def dequantize_4bit(A, absmax, blocksize, quant_type, shape, dtype):
        n = math.prod(shape)
        levels = bnbf.get_4bit_type(quant_type, device=A.device)  # (16,) the NF4 or FP4 values
        byte = torch.arange(256, device=A.device)
        # two 4-bit codes per byte, the first in the high half: one lookup per byte gives both weights, which
        # halves the time of reading the codes one by one, with the same products (bench/NOTES.md)
        pairs = torch.stack([levels[byte >> 4], levels[byte & 15]], dim=1)  # (256, 2)
        weights = pairs.index_select(0, A.view(torch.uint8).reshape(-1).int()).reshape(-1)  # (2 x bytes,)
        scales = absmax.float()  # (blocks,) each block's absmax
        size = scales.numel() * blocksize
        weights = F.pad(weights, (0, size - weights.numel())) if weights.numel() < size else weights[:size]
        return (weights.view(-1, blocksize) * scales[:, None]).reshape(-1)[:n].reshape(shape).to(dtype)

    with warnings.catch_warnings():  # torch warns that a kernel is overridden: that is the point
        warnings.simplefilter("ignore", UserWarning)
        try:
            torch.library.register_kernel("bitsandbytes::dequantize_4bit", "cpu", dequantize_4bit)
            return True
        except RuntimeError as err:  # torch 2.11 (seen) refuses to override a kernel registered from Python
            refused = err
    warnings.warn(f"4-bit weights on this CPU may be dequantised inexactly: torch {torch.__version__} would not "
                  f"replace bitsandbytes' CPU kernel ({refused}); torch 2.13 does", stacklevel=2)
    return False


def keep_cpu_4bit_layout(model) -> None:
    """Keep bitsandbytes' 4-bit CPU layers in the one weight layout that both sampling and
    training use.

    On CPUs with AVX512-BF16, bitsandbytes 0.50 repacks a 4-bit layer's weights for a faster
    kernel the first time the layer runs in eval mode without gradients, and RL alternates such
    passes (sampling, the reference) with training ones. With double quantization on the tiny
    model's 96-wide layers the repacking itself fails: measured on a Xeon with AVX512-BF16, the
    first 4-bit pass under ``torch.no_grad()`` raised "shape '[96, 1]' is invalid for input of
    size 144"; CPUs without AVX512-BF16 never repack."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
