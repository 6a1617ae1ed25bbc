"""How a scheme's id reads to a person, in the reader's language.

Code names a run by a short id built from the compressors' names: ``dense``, ``sign+ef``,
``topk-1%+ef``, ``approx-topk-1%+ef``, ``int4-stoch``, ``powersgd-r4-batched+ef``,
``sign+ef2/car`` (the compressed all-reduce), ``ddp topk-1%+ef``, ``ddp topk-1%+ef+mc`` (DGC's
momentum correction) and ``diloco H=50 P=4 int8+ef`` (milktea.local), ``1bit-adam(sign, warmup 20)``. English readers see the id as
it is; `scheme_id` says it in Chinese, piece by piece, for `milktea.tables.word`, the one
function tables, figures and sentences show names through::

    >>> from milktea.i18n import speaking
    >>> with speaking("zh"):
    ...     print(scheme_id("approx-topk-1%+ef"), "|", scheme_id("ddp int4-stoch"), "|", scheme_id("sign+ef2/car"))
    近似 Top-1%+EF | DDP（随机舍入的 int4） | 符号压缩+EF（压缩全归约）
    >>> scheme_id("partition") is None     # not an id: the caller shows it another way
    True

A name that holds a comma of its own takes brackets in Chinese (DDP（int8+EF）), so that a
list of names joined by 、 still reads as one item per name.
"""
from __future__ import annotations

import re

from .i18n import N_, _, language

# The words of an id, as the catalog has them (milktea.tables.VALUES holds dense and sign).
_WORDS = {"ef": "EF", "ef2": "EF", "ddp": "DDP", "adam": "Adam", "terngrad": "TernGrad"}
_SHARE = r"(\d+(?:\.\d+)?%|k=\d+)"
_TEMPLATES = (N_("approx {name}"), N_("{name}, momentum corrected"), N_("{name} with stochastic rounding"), N_("{name} (compressed all-reduce)"),
              N_("PowerSGD r{rank} batched"), N_("DDP ({scheme})"), N_("{name} ({scheme})"),
              N_("1-bit Adam ({scheme}, warm-up {n} steps)"))


def _piece(p: str) -> str | None:
    """One compressor's name (no + in it) as the reader says it, or None."""
    if p in _WORDS:
        return _WORDS[p]
    if p in ("dense", "sign", "none"):
        return _(p)
    if re.fullmatch(r"int\d+|fp16|bf16|fp32|fp8", p):
        return p
    m = re.fullmatch(r"(approx-)?(topk|randomk)-" + _SHARE, p)
    if m:
        share = m[3] if m[3].endswith("%") else m[3].removeprefix("k=")
        name = ("Top-" if m[2] == "topk" else "Random-") + share
        return _("approx {name}").format(name=name) if m[1] else name
    m = re.fullmatch(r"(int\d+)-stoch", p)
    if m:
        return _("{name} with stochastic rounding").format(name=m[1])
    m = re.fullmatch(r"qsgd-(\d+)", p)
    if m:
        return f"QSGD-{m[1]}"
    m = re.fullmatch(r"powersgd-r(\d+)(-batched)?", p)
    if m:
        return _("PowerSGD r{rank} batched").format(rank=m[1]) if m[2] else f"PowerSGD r{m[1]}"
    m = re.fullmatch(r"topk(\d+(?:\.\d+)?%)", p)        # milktea.advice's menu: topk1%+int8+EF
    if m:
        return f"Top-{m[1]}"
    return {"powersgd": "PowerSGD", "EF": "EF"}.get(p)


def _chain(text: str) -> str | None:
    """Compressor names joined by + (a chain, then +ef, then +mc: DGC's momentum correction),
    or None if a piece is not one."""
    if text.endswith("+mc"):
        inner = _chain(text[:-len("+mc")])
        return inner and _("{name}, momentum corrected").format(name=inner)
    parts = [_piece(p) for p in text.split("+")]
    return None if None in parts else "+".join(parts)


def scheme_id(name: str) -> str | None:
    """`name` (a scheme's id) as the reader's language says it; None when it is not an id."""
    if not isinstance(name, str) or not name or name != name.strip():
        return None
    if language() == "en":
        return name if _reads(name) else None
    return _reads(name)


def _reads(name: str) -> str | None:
    m = re.fullmatch(r"(.+)/car", name)
    if m:
        inner = _chain(m[1])
        return inner and _("{name} (compressed all-reduce)").format(name=inner)
    m = re.fullmatch(r"1bit-adam\((.+), warmup (\d+)\)", name)
    if m:
        inner = _chain(m[1])
        return inner and _("1-bit Adam ({scheme}, warm-up {n} steps)").format(scheme=inner, n=m[2])
    m = re.fullmatch(r"ddp(?: (.+))?", name)
    if m:
        inner = _chain(m[1]) if m[1] else None
        return "DDP" if not m[1] else inner and _("DDP ({scheme})").format(scheme=inner)
    m = re.fullmatch(r"diloco (H=\d+(?: P=\d+)?)(?: tau=(\d+))?(?: (.+))?", name)
    if m:
        head = "DiLoCo " + m[1] + (f" τ={m[2]}" if m[2] else "")
        inner = _chain(m[3]) if m[3] else None
        return head if not m[3] else inner and _("{name} ({scheme})").format(name=head, scheme=inner)
    return _chain(name)
