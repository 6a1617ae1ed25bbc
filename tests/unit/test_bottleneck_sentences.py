"""Chapter 01's sentences about the fitted link, fed made-up measurements: the words follow
the errors (close or rough), and the largest message's own bandwidth is the one quoted."""
import numpy as np
import pytest

from milktea import cost
from milktea.experiments import bottleneck as bn
from milktea.i18n import speaking

SIZES = [4 << 10, 256 << 10, 4 << 20, 16 << 20]


def _measured(times):
    link = cost.fit_allreduce_link(SIZES, times, 2)
    return bn.AllReduceMeasurement(SIZES, list(times), 2, "gloo", link, True)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_fit_is_called_close_or_rough_from_its_errors(lang):
    true = cost.Link.gbit(10, latency=50e-6)
    exact = _measured([cost.ring_allreduce_time(m, 2, true) for m in SIZES])
    bent = _measured([cost.ring_allreduce_time(m, 2, true) * f for m, f in zip(SIZES, (3.0, 0.6, 1.0, 2.2))])
    assert np.abs(exact.errors()).max() < 1e-6 and np.abs(bent.errors()).max() > 0.25
    with speaking(lang):
        a, b = bn.fit_sentence(exact), bn.fit_sentence(bent)
    close, rough = {"en": ("close", "rough"), "zh": ("贴近", "粗略")}[lang]
    assert close in a and rough not in a
    assert rough in b and close not in b


def test_the_largest_message_is_quoted_with_its_own_bandwidth():
    true = cost.Link.gbit(10, latency=50e-6)
    times = [cost.ring_allreduce_time(m, 2, true) for m in SIZES]
    times[-1] *= 2                                   # the largest message took twice the model's time
    m = _measured(times)
    big = cost.ring_allreduce_bytes(SIZES[-1], 2) / times[-1] * 8 / 1e9
    text = bn.link_sentence(m)
    assert f"**{big:.3g} Gbit/s**" in text and f"**{m.link.bandwidth * 8 / 1e9:.3g} Gbit/s**" in text
    assert f"{m.errors()[-1]:+.0%}" in text and m.errors()[-1] < 0
