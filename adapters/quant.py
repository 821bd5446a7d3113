"""QLoRA's frozen base: the decoder's linear layers stored in 4-bit NF4 (bitsandbytes), each
dequantized to the compute dtype inside its matmul; LoRA's adapters (adapters/lora.py) train over it.

    policy.load_policy(..., quantize="nf4")   # from_pretrained with quantization_config(...)
    quant.is_quantized(param)                  # a 4-bit weight (bitsandbytes' Params4bit)
    quant.dequantized(param)                   # its [out, in] matrix in fp32: what the engine is pushed

What is quantized is transformers' choice for bitsandbytes: every nn.Linear but the output head,
so the head's log-probs and eq:readout's two rows are read from the full-precision matrix. The
embedding and norms stay as loaded. The engine (vLLM) loads the full-precision base from disk and
is then pushed lora.merged_weights, whose projections are dequantized(W) + (alpha / r) B A: the
rollouts are sampled from the policy the trainer scores. The adapters a QLoRA run saves are PEFT's,
as LoRA's; over the full-precision base (how PEFT loads them by default) they give a slightly
different model than the trained one, by the base's quantization error.

bitsandbytes is imported only in `dequantized` (its import takes seconds and only a QLoRA run
needs it); `quantization_config` is transformers' class, which imports bitsandbytes itself when a
model loads. Not here: the config key (schema.py lora_quant; config.py checks that bitsandbytes is
installed before torch loads), the memory estimate (infra/memfit.py).
"""

from __future__ import annotations

import copy

import torch
from transformers import BitsAndBytesConfig

QUANT_TYPES = ("none", "nf4")  # lora_quant's values: the base as loaded, or QLoRA's 4-bit NormalFloat


def quantization_config(quantize: str, compute_dtype: torch.dtype) -> BitsAndBytesConfig:
    """transformers' settings for loading a base in `quantize` (nf4): QLoRA's 4-bit NormalFloat with
    the quantization constants quantized too (double quantization), matmuls in `compute_dtype`."""
    if quantize != "nf4":
        raise ValueError(f"lora_quant={quantize!r} is not a 4-bit type; choose from {QUANT_TYPES[1:]}")
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def is_quantized(weight: torch.Tensor) -> bool:
    """Whether `weight` is a packed 4-bit weight (it carries its quantization state)."""
    return getattr(weight, "quant_state", None) is not None


def dequantized(weight: torch.Tensor) -> torch.Tensor:
    """[out, in] fp32: the matrix a packed 4-bit weight stands for, as its layer's matmul sees it."""
    import bitsandbytes.functional  # deferred: seconds to import, and only a QLoRA run gets here

    return bitsandbytes.functional.dequantize_4bit(weight.data, weight.quant_state).float()


def plain_config(config):
    """A copy of a model's config without its quantization settings: what the engine is told the
    model is (vLLM loads the full-precision base and is pushed dequantized weights)."""
    plain = copy.deepcopy(config)
    if hasattr(plain, "quantization_config"):
        del plain.quantization_config
    return plain
