"""Chapter 09's view: bytes and memory per rank of a sharded step against the number of shards,
the stage, the gradients' and weights' wire formats and the ledger, priced by milktea.fsdp.cost."""
from __future__ import annotations

import ipywidgets as w

from ..fsdp import cost
from ..i18n import _
from .panel import slider_style, table, view

#: bytes per entry on the wire: fp32, bf16, int8 and int4 in blocks of 256 (a float32 scale each)
WIRE = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0 + 4 / 256, "int4": 0.5 + 4 / 256}


def grad_wire() -> dict:
    """The gradients' formats: WIRE's, and Top-1% (values and indices, as milktea packs them),
    its bytes per entry measured on a packet."""
    from ..compressors import TopK
    return {**WIRE, "Top-1%": cost.bytes_per_entry(TopK(0.01))}


def _mb(x: float) -> str:
    return f"{x / 1e9:.3g} GB" if x >= 1e9 else f"{x / 1e6:.3g} MB"


def sharding_view(params: float = 1e9, shards: int = 8, stage: int = 3, grads: str = "fp32",
                  weights: str = "fp32", ledger: str = "none", optimizer_bytes: float = 8.0) -> w.VBox:
    """Shards, stage, wire formats and ledger -> bytes one rank sends per step and bytes it holds,
    with a figure of both against the number of shards."""
    s = slider_style()
    gwire = grad_wire()
    controls = {
        "shards": w.IntSlider(value=shards, min=1, max=256, description=_("shards N"), **s),
        "stage": w.Dropdown(options=[(_("DDP"), 0), ("ZeRO-1", 1), ("ZeRO-2", 2), (_("ZeRO-3 / FSDP"), 3)],
                            value=stage, description=_("stage")),
        "grads": w.Dropdown(options=list(gwire), value=grads, description=_("gradients")),
        "weights": w.Dropdown(options=list(WIRE), value=weights, description=_("weights")),
        "ledger": w.Dropdown(options=[(_("none"), "none"), (_("before the reduce-scatter"), "worker"),
                                      (_("on the reduced shard"), "shard")], value=ledger, description=_("ledger")),
        "params": w.FloatLogSlider(value=params, base=10, min=6, max=11, description=_("parameters"),
                                   readout_format=".3g", **s),
    }

    def priced(params, n, stage, grads, weights, ledger):
        if stage == 0 and grads == "Top-1%":     # sparse packets cannot be summed on the way: DDP gathers them
            b = {"total": cost.all_gather_bytes(params * gwire[grads], n)}
        else:
            b = cost.step_bytes(params, n, stage=stage, grad_bytes=gwire[grads], weight_bytes=WIRE[weights])
        m = cost.memory_per_rank(params, n, stage=stage, optimizer_bytes=optimizer_bytes,
                                 ledger=None if ledger == "none" else ledger)
        return b, m

    def update(shards, stage, grads, weights, ledger, params):
        b, m = priced(params, shards, stage, grads, weights, ledger)
        ddp = cost.step_bytes(params, shards, stage=0)["total"]
        html = table([(_("sent per rank and step"), _mb(b["total"])),
                      (_("x DDP in fp32"), f"{b['total'] / ddp:.3g}" if ddp else "—"),
                      (_("held per rank"), _mb(m["total"])),
                      (_("of which the ledger"), _mb(m["ledger"])),
                      (_("of which the gradients"), _mb(m["grads"]))])
        ns = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, shards})

        def draw(fig):
            ax = fig.add_subplot()
            sent = [priced(params, n, stage, grads, weights, ledger)[0]["total"] / 1e9 for n in ns]
            held = [priced(params, n, stage, grads, weights, ledger)[1]["total"] / 1e9 for n in ns]
            ax.plot(ns, sent, marker="o", label=_("sent per rank and step (GB)"))
            ax.plot(ns, held, marker="s", label=_("held per rank (GB)"))
            ax.axvline(shards, color="grey", linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(_("shards N"))
            ax.set_ylabel("GB")
            ax.legend(fontsize=8)
        return html, draw

    return view(controls, update, figsize=(7.5, 3.2), title=_("A sharded step, per rank"),
                margins=dict(left=0.1, right=0.98, bottom=0.16, top=0.95))
