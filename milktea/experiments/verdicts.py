"""Words that follow numbers: the sentences that state a comparison, a sign, a winner or a
share of something measured, built from the measured values.

A chapter's numbers are computed on the reader's machine, so a sentence written in advance
("bucketed overlap made the step faster") can end up beside numbers that say the opposite.
Every such sentence in the course is made here instead: each function looks at the sign and
the size of what was measured, and at the run's noise, and says "faster", "slower" or "no
measurable difference"; "helped", "hurt" or "no measurable effect"; "inside" or "outside".
A missing value (NaN or None: a run that failed) is said as such, never compared.

Each function returns a `Said`: the sentence (a str, in the library's language, see
milktea.i18n) with `.kind`, the verdict it states, for code that branches on it::

    >>> speed(80.0, 100.0)                  # ms per step: this one against the reference
    '1.25x faster'
    >>> speed(120.0, 100.0).kind
    'slower'
    >>> speed(101.0, 100.0, noise=0.05)
    'no measurable difference (within ±5%)'
    >>> effect(with_it=0.91, without_it=0.95, noise=0.01)      # accuracies, 1 = 100%
    'hurt (-4.0 points with it)'
    >>> split(22.0, 24.4, "inside the collectives", "outside them")
    'of the +22.0 ms gap, +24.4 ms lies inside the collectives and -2.4 ms outside them'
"""
from __future__ import annotations

import math
import re
from typing import Callable

from ..i18n import N_, _, language
from ..tables import joined
from .noise import noise_of, paired  # noqa: F401  (the run's noise: verdicts.noise_of, verdicts.paired)

UNITS = (N_("points"), N_("ms"), N_("s"))   # units the sentences name, for the catalog

_CJK_GAP = re.compile(r"(?<=[\u4e00-\u9fff])[ ]+(?=[\u4e00-\u9fff])")


class Said(str):
    """A sentence and the verdict it states (`kind`): a str that code can branch on."""

    kind: str

    def __new__(cls, text: str, kind: str):
        text = tidy(text)            # a name filled into a template may be Chinese: no space between CJK
        obj = super().__new__(cls, text)
        obj.kind = kind
        return obj


_FULL_WIDTH_GAP = re.compile(r"(?<=[。；：，！？）])[ ]+")


def tidy(text: str) -> str:
    """Sentences joined with spaces, as English wants them; in Chinese no space follows a
    full-width punctuation mark or separates two CJK characters (d2l-zh's convention).

    >>> tidy("One. Two.")
    'One. Two.'
    """
    if language() != "zh":
        return text
    return _CJK_GAP.sub("", _FULL_WIDTH_GAP.sub("", text))


def missing(x) -> bool:
    """True for None and NaN: a value that a failed or skipped run left behind.

    >>> missing(float("nan")), missing(None), missing(0.0)
    (True, True, False)
    """
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def failed() -> Said:
    """What to say where a value is missing."""
    return Said(_("not measured (a run failed)"), "nan")


def _times(r: float) -> str:
    """A ratio for a sentence: 1.25, 12.3, 1,234, or the exponent form when huge."""
    if math.isinf(r):
        return "∞"
    if r < 10:
        return f"{r:.2f}"
    if r < 100:
        return f"{r:.1f}"
    if r < 1e6:
        return f"{r:,.0f}"
    return f"{r:.2g}"


def _check_noise(noise: float) -> float:
    if missing(noise) or noise < 0:
        raise ValueError(f"noise must be a number >= 0 (a relative spread, 0.05 = 5%), got {noise!r}")
    return float(noise)


def _speed_kind(t: float, ref: float, noise: float) -> tuple[str, float]:
    if t <= 0 or ref <= 0:
        raise ValueError(f"times must be > 0 to compare, got {t!r} and {ref!r}")
    r = t / ref if t >= ref else ref / t          # >= 1; inf where one is tiny next to the other
    if r - 1 <= noise or r == 1:
        return "same", r
    return ("slower" if t > ref else "faster"), r


def speed(t: float, ref: float, noise: float = 0.0) -> Said:
    """How a time `t` compares with a reference time `ref` (seconds or ms, the same unit):
    "1.25x faster", "1.20x slower", or "no measurable difference" when the two differ by no
    more than `noise` (relative: 0.05 = 5%). kind: faster, slower, same, nan.

    >>> speed(100.0, 100.0)
    'no measurable difference'
    """
    noise = _check_noise(noise)
    if missing(t) or missing(ref):
        return failed()
    kind, r = _speed_kind(float(t), float(ref), noise)
    if kind == "faster":
        return Said(_("{r}x faster").format(r=_times(r)), kind)
    if kind == "slower":
        return Said(_("{r}x slower").format(r=_times(r)), kind)
    if noise > 0:
        return Said(_("no measurable difference (within ±{noise:.0%})").format(noise=noise), kind)
    return Said(_("no measurable difference"), kind)


def speedup(s: float, noise: float = 0.0) -> Said:
    """`speed` for a speedup (reference time / this time): 2.0 is "2.00x faster".

    >>> speedup(0.56)
    '1.79x slower'
    """
    if missing(s):
        return failed()
    if s <= 0:
        raise ValueError(f"a speedup must be > 0, got {s!r}")
    return speed(1.0, float(s), noise)


def compare_speed(name: str, t: float, ref_name: str, ref: float, noise: float = 0.0) -> Said:
    """A sentence: `name` against `ref_name` by their times (see `speed`).

    >>> compare_speed("4 MB buckets", 914.0, "one bucket", 512.0)
    '4 MB buckets took 1.79x as long as one bucket (slower)'
    """
    noise = _check_noise(noise)
    if missing(t) or missing(ref):
        return Said(_("{name} against {ref}: not measured (a run failed)").format(name=name, ref=ref_name), "nan")
    kind, r = _speed_kind(float(t), float(ref), noise)
    if kind == "faster":
        text = _("{name} was {r}x faster than {ref}")
    elif kind == "slower":
        text = _("{name} took {r}x as long as {ref} (slower)")
    elif noise > 0:
        text = _("{name} and {ref} took the same time within the run's noise (±{noise:.0%})")
    else:
        text = _("{name} and {ref} took the same time")
    return Said(text.format(name=name, ref=ref_name, r=_times(r), noise=noise), kind)


def gap(value: float, ref: float, ref_name: str, noise: float = 0.0, *, higher_is_better: bool = True,
        unit: str = "points", scale: float = 100.0, digits: int = 1) -> Said:
    """Where `value` stands against `ref`: ahead of it, behind it, or level within `noise`
    (in the same unit as the values, before `scale`). Accuracies (1 = 100%) read in points by
    default; for a loss pass higher_is_better=False, unit="", scale=1. kind: ahead, behind,
    level, nan. The gap is always printed as a magnitude with its direction in words.

    >>> gap(0.889, 0.953, "dense")
    '6.4 points behind dense'
    >>> gap(2.31, 2.52, "dense", higher_is_better=False, unit="", scale=1, digits=2)
    '0.21 better than dense'
    """
    noise = _check_noise(noise)
    if missing(value) or missing(ref):
        return Said(_("not comparable with {ref} (a run failed)").format(ref=ref_name), "nan")
    d = (float(value) - float(ref)) * (1 if higher_is_better else -1)
    size = f"{abs(d) * scale:.{digits}f}" + (f" {_(unit)}" if unit else "")
    if abs(d) <= noise or abs(d) * scale < 0.5 * 10 ** -digits:
        if noise > 0:
            text = _("level with {ref} (within ±{noise})").format(
                ref=ref_name, noise=f"{noise * scale:.{digits}f}" + (f" {_(unit)}" if unit else ""))
        else:
            text = _("level with {ref}").format(ref=ref_name)
        return Said(text, "level")
    if unit == "points":
        text = _("{size} ahead of {ref}") if d > 0 else _("{size} behind {ref}")
    else:
        text = _("{size} better than {ref}") if d > 0 else _("{size} worse than {ref}")
    return Said(text.format(size=size, ref=ref_name), "ahead" if d > 0 else "behind")


def effect(with_it: float, without_it: float, noise: float = 0.0, *, higher_is_better: bool = True,
           unit: str = "points", scale: float = 100.0, digits: int = 1, show_noise: bool = False) -> Said:
    """What a technique did: the value with it against the value without it. "helped",
    "hurt", or "no measurable effect" when the difference is within `noise`; the signed
    difference (with it minus without it) is printed, with `±noise` too where `show_noise`.
    kind: helped, hurt, none, nan.

    >>> effect(0.95, 0.93, noise=0.01)
    'helped (+2.0 points with it)'
    >>> effect(0.95, 0.945, noise=0.01)
    'no measurable effect (+0.5 points with it, within ±1.0)'
    """
    noise = _check_noise(noise)
    if missing(with_it) or missing(without_it):
        return Said(_("effect not measured (a run failed)"), "nan")
    d = float(with_it) - float(without_it)
    signed = f"{d * scale:+.{digits}f}" + (f" {_(unit)}" if unit else "")
    good = d > 0 if higher_is_better else d < 0
    if abs(d) <= noise or abs(d) * scale < 0.5 * 10 ** -digits:
        if noise > 0:
            return Said(_("no measurable effect ({signed} with it, within ±{noise})").format(
                signed=signed, noise=f"{noise * scale:.{digits}f}"), "none")
        return Said(_("no measurable effect ({signed} with it)").format(signed=signed), "none")
    kind = "helped" if good else "hurt"
    if show_noise and noise > 0:
        text = _("helped ({signed} with it, ±{noise})") if good else _("hurt ({signed} with it, ±{noise})")
        return Said(text.format(signed=signed, noise=f"{noise * scale:.{digits}f}"), kind)
    return Said((_("helped ({signed} with it)") if good else _("hurt ({signed} with it)")).format(signed=signed), kind)


def split(whole: float, part: float, part_name: str, rest_name: str, unit: str = "ms", digits: int = 1) -> Said:
    """A whole cut into a part and the rest, each printed with its sign, so that the parts
    always add up to the whole (a part larger than the whole shows a rest of opposite sign).
    kind: "part" when the part is the larger in size, "rest" otherwise, nan.

    >>> split(10.0, 7.5, "inside the collectives", "outside them")
    'of the +10.0 ms gap, +7.5 ms lies inside the collectives and +2.5 ms outside them'
    """
    if missing(whole) or missing(part):
        return failed()
    whole, part = float(whole), float(part)
    rest = whole - part
    f = f"{{:+.{digits}f}}"
    text = _("of the {whole} {unit} gap, {part} {unit} lies {part_name} and {rest} {unit} {rest_name}").format(
        whole=f.format(whole), part=f.format(part), rest=f.format(rest), unit=_(unit),
        part_name=part_name, rest_name=rest_name)
    return Said(text, "part" if abs(part) >= abs(rest) else "rest")


def within(value: float, lo: float, hi: float, fmt: str = "{:.3g}") -> Said:
    """Whether `value` lies inside [lo, hi]: "inside ...", "below ...", "above ...".
    kind: inside, below, above, nan.

    >>> within(8.5, 10, 100)
    'below 10'
    """
    if lo > hi:
        raise ValueError(f"need lo <= hi, got {lo!r} > {hi!r}")
    if missing(value):
        return failed()
    v = float(value)
    if v < lo:
        return Said(_("below {lo}").format(lo=fmt.format(lo)), "below")
    if v > hi:
        return Said(_("above {hi}").format(hi=fmt.format(hi)), "above")
    return Said(_("inside {lo} to {hi}").format(lo=fmt.format(lo), hi=fmt.format(hi)), "inside")


def model_error(measured: float, predicted: float, tolerance: float = 0.2) -> Said:
    """How far a measurement is from a model's prediction: "within ±20%", or "+55% (the
    model is too optimistic)" / "-27% (too pessimistic)". kind: within, over, under, nan.

    >>> model_error(155.0, 100.0)
    '+55% (the model predicted less than measured)'
    """
    if missing(measured) or missing(predicted) or predicted <= 0:
        return failed()
    e = float(measured) / float(predicted) - 1
    if abs(e) <= tolerance:
        return Said(_("{e:+.0%}, within ±{tol:.0%}").format(e=e, tol=tolerance), "within")
    if e > 0:
        return Said(_("{e:+.0%} (the model predicted less than measured)").format(e=e), "over")
    return Said(_("{e:+.0%} (the model predicted more than measured)").format(e=e), "under")


def winner(values: dict, noise: float = 0.0, *, lower_is_better: bool = True,
           fmt: Callable[[float], str] = "{:.3g}".format) -> Said:
    """The best of `values` ({name: number}) and by how much it leads the runner-up; a tie
    when the two are within `noise` (relative). Missing values are left out and named.
    kind: the winner's name, "tie", or "nan" when nothing was measured.

    >>> winner({"sort": 30.0, "partition": 10.0, "torch.topk": 12.0})
    'partition was best (10), 1.20x ahead of torch.topk (12)'
    >>> winner({"a": 10.0, "b": 10.2}, noise=0.05).kind
    'tie'
    """
    noise = _check_noise(noise)
    ok = {k: float(v) for k, v in values.items() if not missing(v)}
    lost = [k for k in values if k not in ok]
    tail = _(" ({names}: not measured)").format(names=joined(lost)) if lost else ""
    if not ok:
        return Said(_("nothing was measured") + tail, "nan")
    order = sorted(ok, key=ok.get, reverse=not lower_is_better)
    best = order[0]
    if len(order) == 1:
        return Said(_("{best} was the only one measured ({v})").format(best=best, v=fmt(ok[best])) + tail, best)
    second = order[1]
    a, b = ok[best], ok[second]
    if min(abs(a), abs(b)) == 0 or (a < 0) != (b < 0):
        r, close = math.inf, a == b
    else:
        r = max(abs(a), abs(b)) / min(abs(a), abs(b))
        close = r - 1 <= noise
    if close:
        text = _("{best} ({v}) and {second} ({v2}) tie within the noise").format(
            best=best, v=fmt(a), second=second, v2=fmt(b))
        return Said(text + tail, "tie")
    if math.isinf(r):
        text = _("{best} was best ({v}), ahead of {second} ({v2})")
    else:
        text = _("{best} was best ({v}), {r}x ahead of {second} ({v2})")
    return Said(text.format(best=best, v=fmt(a), second=second, v2=fmt(b), r=_times(r)) + tail, best)


def trend(first: float, last: float, noise: float = 0.0, digits: int = 2) -> Said:
    """How a loss moved over a run: "fell from 2.51 to 1.90", "rose from ...", "stayed flat
    (...)" within `noise` (relative), or "did not stay finite" where either end is not a
    finite number (the run diverged). kind: fell, rose, flat, diverged.

    >>> trend(2.51, 3.77)
    'rose from 2.51 to 3.77'
    """
    noise = _check_noise(noise)
    if first is None or last is None or not (math.isfinite(first) and math.isfinite(last)):
        return Said(_("did not stay finite (diverged)"), "diverged")
    f = f"{{:.{digits}f}}"
    a, b = f.format(first), f.format(last)
    scale = max(abs(first), abs(last))
    if scale == 0 or abs(last - first) <= noise * scale or a == b:
        return Said(_("stayed flat ({a} to {b})").format(a=a, b=b), "flat")
    if last < first:
        return Said(_("fell from {a} to {b}").format(a=a, b=b), "fell")
    return Said(_("rose from {a} to {b}").format(a=a, b=b), "rose")


def relative(value: float, ref: float, ref_name: str, *, limit: float | None = None, digits: int = 3) -> Said:
    """`value` against `ref` as a relative difference, both printed with `digits` decimals.
    With `limit` (a share: 0.02 = 2%), whether the difference stays inside it in
    size. kind: above, below, equal; inside or outside with a limit; nan.

    >>> relative(1.636, 1.604, "DDP")
    "1.636, 2.0% above DDP's 1.604"
    >>> relative(1.58, 1.604, "DDP", limit=0.02)
    "1.580, 1.5% below DDP's 1.604: inside ±2%"
    """
    if missing(value) or missing(ref):
        return Said(_("not comparable with {ref} (a run failed)").format(ref=ref_name), "nan")
    value, ref = float(value), float(ref)
    if ref == 0:
        raise ValueError(f"a relative difference needs a reference other than 0, got {ref!r}")
    d = value / ref - 1
    f = f"{{:.{digits}f}}"
    args = dict(v=f.format(value), r=f.format(ref), ref=ref_name, d=abs(d))
    if f"{abs(d):.1%}" == "0.0%":
        text, kind = _("{v}, the same as {ref}").format(**args), "equal"   # one number: they print alike
    elif d > 0:
        text, kind = _("{v}, {d:.1%} above {ref}'s {r}").format(**args), "above"
    else:
        text, kind = _("{v}, {d:.1%} below {ref}'s {r}").format(**args), "below"
    if limit is None:
        return Said(text, kind)
    if abs(d) <= limit:
        return Said(text + _(": inside ±{limit:.0%}").format(limit=limit), "inside")
    return Said(text + _(": outside ±{limit:.0%}").format(limit=limit), "outside")
