"""A real shaped link: network namespaces, veth pairs, tc tbf (root on Linux only)."""
import subprocess

import pytest

from milktea.distributed import launch
from milktea.distributed.netns import NetnsLink, unavailable_reason

import dist_workers as w  # noqa: E402

REASON = unavailable_reason()
pytestmark = [pytest.mark.distributed, pytest.mark.netns, pytest.mark.timeout(180),
              pytest.mark.skipif(REASON is not None, reason=f"shaped namespaces unavailable: {REASON}")]


def _namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_ranks_talk_over_a_shaped_link_and_everything_is_removed():
    before = _namespaces()
    with NetnsLink(2, rate_bits=100e6) as net:
        mine = set(net.namespaces) | {net.hub}
        assert mine <= _namespaces()
        host = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        assert "169.254.77." not in host               # nothing added to the host's namespace
        inside = subprocess.run(["ip", "netns", "exec", net.namespaces[1], "ip", "-o", "addr"],
                                capture_output=True, text=True).stdout
        assert "169.254.77.2/24" in inside
        qdisc = subprocess.run(["ip", "netns", "exec", net.namespaces[0], "tc", "qdisc", "show", "dev", "mt0"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "100Mbit" in qdisc
        res = launch(w.shaped_allreduce, 2, args=(2 << 20,), netns=net, timeout=150)
    assert not (mine & _namespaces()) and _namespaces() == before
    measured, nbytes = res["seconds"], res["nbytes"]
    floor = 2 * (2 - 1) / 2 * nbytes / (100e6 / 8)    # ring all-reduce bytes at the shaped rate
    assert res["sum"] == 3.0 and res["addr"] == "169.254.77.1"
    assert measured >= 0.8 * floor, (measured, floor)   # the shaper really limits the rate
    print(f"2 MiB all-reduce over a 100 Mbit/s namespace link: {measured * 1e3:.0f} ms "
          f"(rate alone: {floor * 1e3:.0f} ms); calibrated {res['link']}")


def test_namespaces_are_removed_when_the_run_fails():
    before = _namespaces()
    with pytest.raises(RuntimeError, match="on purpose"):
        with NetnsLink(2, rate_bits=1e9) as net:
            assert set(net.namespaces) <= _namespaces()
            raise RuntimeError("failed on purpose")
    assert _namespaces() == before


def test_bad_settings():
    with pytest.raises(ValueError, match="workers"):
        NetnsLink(1)
    with pytest.raises(ValueError, match="rate"):
        NetnsLink(2, rate_bits=0)
