"""Where gradient compression is used, priced with the cost model.

    >>> s = federated()
    >>> s["dense upload s"] > 10 * s["compressed upload s"]
    True
"""
from __future__ import annotations

import math

import torch

from .. import cost
from ..advice import advise, memory_bound_codecs
from ..compressors import Chain, Quantize, TopK
from ..i18n import _, count
from ..tables import word

GPU_GBPS = 2000.0   # memory bandwidth assumed for the codecs on a data-centre GPU (HBM, ~2 TB/s)


def _ratio(compressor, numel: int = 1_000_000) -> float:
    """Wire ratio of a compressor's real packet on a random gradient."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    return compressor.compress(x).ratio


def cross_datacenter(params: float = 7e9, sites: int = 2, wan_gbit: float = 100.0, compute_s: float = 2.0,
                     accumulate: int = 8, codec_ns: dict | None = None) -> dict:
    """LLM pre-training split over `sites` data centres: inside a site the links are fast,
    between sites one WAN link of `wan_gbit`. Every step the sites exchange the gradient
    (after reducing it inside each site). Compute is the per-step time of one site. Codecs:
    `codec_ns`, by default memory-bound GPU kernels (advice.memory_bound_codecs)."""
    codec_ns = codec_ns or memory_bound_codecs(GPU_GBPS)
    link = cost.Link.gbit(wan_gbit, latency=5e-3)          # ~1000 km of fibre
    M = cost.gradient_bytes(params)
    dense = cost.ring_allreduce_time(M, sites, link)
    a = advise(params, sites, wan_gbit, compute_s, latency_us=5000, codec_ns=codec_ns, overlap=True)
    choice = next(r for r in a.rows if r["scheme"] == a.choice)
    return {"params": params, "gradient GB": M / 1e9, "dense exchange s": dense, "compute s": compute_s,
            "waiting share": dense / (dense + compute_s), "advice": a, "choice": a.choice,
            "choice step s": choice["step s"], "dense step s": a.rows[0]["step s"],
            "accumulate": accumulate,
            "exchange s per micro-step with accumulation": dense / accumulate}


def federated(params: float = 5e6, phones: int = 100, up_mbit: float = 10.0, ratio: float = 0.01) -> dict:
    """Federated learning: each phone uploads its update over a `up_mbit` Mbit/s uplink to a
    server (a parameter-server round); Top-K + int8 with the ledger kept on the phone."""
    link = cost.Link.gbit(up_mbit / 1000, latency=50e-3)
    M = cost.gradient_bytes(params)
    R = _ratio(Chain(TopK(ratio), Quantize(8)))
    return {"params": params, "update MB": M / 1e6, "ratio": R, "compressed MB": M / R / 1e6,
            "dense upload s": link.transfer_time(M), "compressed upload s": link.transfer_time(M / R),
            "phones": phones, "server GB per round, dense": phones * M / 1e9,
            "server GB per round, compressed": phones * M / R / 1e9}


def cross_region_finetune(params: float = 1.3e9, workers: int = 8, gbit: float = 10.0, compute_s: float = 0.8,
                          adapter_share: float = 0.005, codec_ns: dict | None = None) -> dict:
    """Fine-tuning on GPUs rented in several regions: a full fine-tune exchanges every
    gradient; a low-rank adapter (LoRA) trains `adapter_share` of the parameters."""
    codec_ns = codec_ns or memory_bound_codecs(GPU_GBPS)
    a = advise(params, workers, gbit, compute_s, codec_ns=codec_ns)
    lora = advise(params * adapter_share, workers, gbit, compute_s, codec_ns=codec_ns)
    return {"params": params, "workers": workers, "gbit": gbit, "full advice": a, "full choice": a.choice,
            "full dense step s": a.rows[0]["step s"],
            "full best step s": min(r["step s"] for r in a.rows),
            "adapter params": params * adapter_share, "adapter advice": lora, "adapter choice": lora.choice,
            "adapter dense step s": lora.rows[0]["step s"]}


def transformer_mix(n_layer: int = 12, n_embd: int = 768, vocab: int = 50257, block: int = 1024,
                    ratio: float = 100.0, min_size: int = 1024) -> dict:
    """A GPT's gradient (milktea.gpt's layout, GPT-2 small by default) by kind: embedding
    rows (zero for tokens a batch lacks), the other matrices (near low rank), and the tensors
    under `min_size` numbers (LayerNorms, biases) that cross dense. With the rest sent
    `ratio` times smaller, the whole gradient shrinks by `effective ratio`.

    >>> round(100 * transformer_mix()["dense share"], 3)     # GPT-2 small: % of the numbers sent dense
    0.035
    """
    C, L = n_embd, n_layer
    shapes = [(vocab, C), (block, C)]                                   # token and position embeddings
    for _layer in range(L):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,),       # LayerNorm, attention
                   (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]   # LayerNorm, MLP
    shapes += [(C,), (C,), (vocab, C)]                                  # final LayerNorm, output layer
    sizes = [math.prod(s) for s in shapes]
    total = sum(sizes)
    dense = sum(n for n in sizes if n < min_size)
    return {"params": total, "embedding share": vocab * C / total,
            "matrix share": sum(n for s, n in zip(shapes, sizes) if len(s) == 2 and n >= min_size) / total - vocab * C / total,
            "dense share": dense / total, "dense tensors": sum(n < min_size for n in sizes), "tensors": len(sizes),
            "effective ratio": 1.0 / (dense / total + (1 - dense / total) / ratio)}


def cross_datacenter_sentence(dc: dict) -> str:
    """`cross_datacenter` in words, with what accumulation is and what DiLoCo does instead."""
    from . import verdicts
    text = _("One fp32 gradient is **{gb:.0f} GB**. Exchanging it between the sites takes {ex:.2f} s against {c:.1f} s "
             "of compute: {share:.0%} of a serial step is waiting. The guide picks **{choice}** ({cs:.2f} s per step with "
             "overlap, against {ds:.2f} s dense). Accumulating {a} micro-steps per exchange (one optimizer step on a "
             "batch {a} times larger) brings the line's share down to {per:.2f} s per micro-step.").format(
        gb=dc["gradient GB"], ex=dc["dense exchange s"], c=dc["compute s"], share=dc["waiting share"],
        choice=dc["choice"], cs=dc["choice step s"], ds=dc["dense step s"], a=dc["accumulate"],
        per=dc["exchange s per micro-step with accumulation"])
    text += " " + _("The state of the art for exactly this case is another algorithm: DiLoCo lets each site take "
                    "hundreds of optimizer steps of its own (AdamW) and then exchanges only the change of the weights, "
                    "applied by an outer Nesterov step. Chapter 08 is about it.")
    return verdicts.tidy(text)


def finetune_sentence(ft: dict) -> str:
    """`cross_region_finetune` in words, the conclusion following the guide's choices."""
    from . import verdicts
    text = _("Full fine-tuning: dense steps take **{d:.2f} s**; the guide picks **{fc}** ({fb:.2f} s at best). With an "
             "adapter of {ap} parameters a dense step takes {ad:.2f} s and the guide picks **{ac}**.").format(
        d=ft["full dense step s"], fc=word(ft["full choice"]), fb=ft["full best step s"], ap=count(ft["adapter params"]),
        ad=ft["adapter dense step s"], ac=word(ft["adapter choice"]))
    if ft["adapter choice"] == "dense":
        text += " " + _("Once the thing you exchange is small, there is nothing left to compress.")
    else:
        text += " " + _("Even the adapter's exchange is worth compressing on this link.")
    return verdicts.tidy(text)

