"""milktea.local.ft in-process: one group's exchange (commit, a failed commit, a recovering
member) against the arithmetic done by hand, recovery state, the quorum log's merge, the
lighthouse's status page, and every bad setting refused before a process starts."""
import sys
from types import SimpleNamespace

import pytest
import torch

from milktea import PowerSGD, Quantize, TopK
from milktea.local import AdamW, DiLoCo, OuterSGD, weighted_mean
from milktea.local.dist import RunConfig
from milktea.local.ft import FTConfig, Kill
from milktea.local.ft.cli import parse_kill
from milktea.local.ft.config import check_groups, check_kills
from milktea.local.ft.group import FTCore
from milktea.local.ft.lighthouse import fresh_groups, parse_status
from milktea.local.ft.log import merge

N = 6


class FakeManager:
    def __init__(self, commit):
        self.commit, self.step = commit, 7

    def current_step(self):
        return self.step

    def errored(self):
        return None

    def should_commit(self):
        self.step += self.commit
        return self.commit


class FakeSide:
    """torchft's side of one exchange, played by hand: the other members' reports arrive
    as given, the commit is what the test says."""

    def __init__(self, others, commit=True, healed=False):
        self.manager, self.others, self.healed = FakeManager(commit), others, healed
        self.joining, self.pg, self.records = False, SimpleNamespace(members=[0, 1, 2]), []

    def quorum(self):
        return self.healed

    def allgather(self, group, tokens, healed, data):
        mine = ([group, tokens, int(healed), data.numel()], data)
        return [mine] + [([g, tok, h, d.numel()], d) for g, tok, h, d in self.others]

    def record(self, **kw):
        self.records.append(kw)


def _core(compressor, side, group=1):
    scheme = DiLoCo(inner_steps=2, inner=AdamW(lr=0.1), outer=OuterSGD(lr=0.7, momentum=0.9), compressor=compressor)
    theta = torch.linspace(-1, 1, N)
    core = FTCore(scheme, theta, [slice(0, N)], group, side)
    core.rows[0] = theta + torch.tensor([0.5, -0.25, 0.0, 0.125, 2.0, -1.0])
    core.add_tokens(0, 10)
    return core


def _packet_bytes(compressor, x):
    return compressor.compress(x).to_tensor()


def test_a_committed_exchange_takes_the_outer_step_on_the_token_weighted_mean():
    other = torch.tensor([1.0, 0, 0, 0, 0, -3.0])
    side = FakeSide([(2, 30, 0, other.view(torch.uint8)), (0, 0, 1, torch.empty(0, dtype=torch.uint8))])
    core = _core(None, side)
    theta0, delta = core.theta.clone(), (core.theta - core.rows[0]).clone()
    core.t = 1
    core.after_inner_step()                              # t = 2: the exchange
    mean = weighted_mean([delta, other], [10, 30])       # group 0 recovers: its empty report is not heard
    want = theta0.clone()
    OuterSGD(lr=0.7, momentum=0.9).step(want, mean, {})
    assert torch.equal(core.theta, want) and torch.equal(core.rows[0], want)
    r = side.records[-1]
    assert r["committed"] and r["step"] == 7 and r["heard"] == [1, 2] and r["recovering"] == [0]
    assert r["sent_bytes"] == N * 4 and core.tokens == [[0]]


def test_a_failed_commit_changes_nothing_and_puts_the_ledger_back():
    top = TopK(k=2)
    side = FakeSide([(2, 10, 0, _packet_bytes(top, torch.ones(N)))], commit=False)
    core = _core(top, side)
    core.reports.send(1, 0, torch.tensor([0.0, 0.3, 0, 0, 0, 0.2]))   # a ledger from an earlier exchange
    before = core.reports.ledger(1, 0).clone()
    theta0 = core.theta.clone()
    core.t = 1
    core.after_inner_step()
    assert torch.equal(core.theta, theta0) and core.outer_state == [{}]
    assert torch.equal(core.reports.ledger(1, 0), before)            # what was "sent" never arrived
    assert torch.equal(core.rows[0], theta0)                           # the inner steps are dropped
    assert not side.records[-1]["committed"] and side.records[-1]["sent_bytes"] > 0


def test_a_recovering_group_sends_nothing_and_steps_with_the_others():
    q = Quantize(bits=8, chunk=None)
    x = torch.tensor([0.5, -1.0, 0.25, 0.0, 1.0, -0.5])
    side = FakeSide([(0, 10, 0, _packet_bytes(q, x))], healed=True)
    core = _core(q, side)
    theta0 = core.theta.clone()
    core.t = 1
    core.after_inner_step()
    want = theta0.clone()
    OuterSGD(lr=0.7, momentum=0.9).step(want, q.decompress(q.compress(x)), {})
    assert torch.equal(core.theta, want)
    assert side.records[-1]["sent_bytes"] == 0 and side.records[-1]["recovering"] == [1]


def test_recovery_gives_the_books_and_keeps_the_ledger_its_own():
    top = TopK(k=1)
    peer, joiner = _core(top, FakeSide([])), _core(top, FakeSide([]), group=2)
    peer.outer_state = [{"momentum_buffer": torch.arange(N, dtype=torch.float32)}]
    peer.t, peer.pending = 14, {0: (15, torch.ones(N))}
    joiner.reports.send(2, 0, torch.ones(N))                 # a stale ledger of its own
    assert float(joiner.reports.ledger(2, 0).abs().sum()) == N - 1
    gen = torch.Generator().manual_seed(5)
    torch.rand(3, generator=gen)
    state = peer.recovery_state(gen)
    mine = torch.Generator().manual_seed(0)
    received = joiner.receive(state, mine)
    assert joiner.t == 14 and torch.equal(joiner.theta, peer.theta) and torch.equal(joiner.rows, peer.rows)
    assert torch.equal(joiner.outer_state[0]["momentum_buffer"], peer.outer_state[0]["momentum_buffer"])
    assert torch.equal(joiner.opt_state["exp_avg"], peer.opt_state["exp_avg"])
    assert torch.equal(joiner.pending[0][1], torch.ones(N)) and joiner.tokens == [[0]]
    assert joiner.reports.ledger(2, 0) is None                      # rebuilt from zero
    assert torch.equal(mine.get_state(), gen.get_state())           # the data stream where the peer is
    assert received == 6 * N * 4 + gen.get_state().numel()   # theta, rows, 2 moments, momentum, pending, data
    with pytest.raises(ValueError, match="same scheme"):
        _core(Quantize(bits=8), FakeSide([])).receive(state, mine)


def test_the_quorum_log_has_one_record_per_quorum():
    def rec(g, step, quorum, members, t, **kw):
        return {"group": g, "step": step, "quorum": quorum, "members": members, "recovering": kw.get("rec", []),
                "heard": kw.get("heard", members), "committed": kw.get("ok", True), "time": t,
                "received_bytes": kw.get("got", 0)}
    records = [rec(1, 5, 2, [0, 1, 2], 3.0), rec(0, 5, 2, [0, 1, 2], 2.5),
               rec(0, 5, 3, [0, 1], 5.0, ok=False), rec(1, 5, 3, [0, 1], 5.1),      # a retry, not committed
               rec(2, 9, 4, [0, 1, 2], 9.0, rec=[2], heard=[0, 1], got=500), rec(0, 9, 4, [0, 1, 2], 8.9, heard=[0, 1])]
    log = merge(records, t0=1.0)
    assert [(m["step"], m["quorum"], m["members"], m["committed"]) for m in log] == \
        [(5, 2, [0, 1, 2], True), (5, 3, [0, 1], False), (9, 4, [0, 1, 2], True)]
    assert log[0]["time"] == 1.5 and log[2]["recovering"] == [2] and log[2]["received_bytes"] == 500
    assert all(set(m) >= {"step", "members", "recovering"} for m in log)


def test_the_lighthouse_status_page_is_read():
    page = ("Current quorum_id: 4 <br>\n<b>group1:x</b>\n<li class='heartbeat'>\n group0:9f: seen 0.20s ago\n</li>"
            "<li> group1:77: seen 3.5s ago</li><li> group12:aa: seen 1e-3s ago</li><li> other:1: seen 0.1s ago</li>")
    st = parse_status(page)
    assert st["quorum_id"] == 4 and st["heartbeats"]["group1:77"] == 3.5
    assert fresh_groups(st, heartbeat_ms=1000) == {0: 0.2, 12: 0.001}
    with pytest.raises(ValueError, match="status page"):
        parse_status("<html>not a lighthouse</html>")


@pytest.mark.parametrize("bad, error, match", [
    (lambda: FTConfig(heartbeat_ms=0), ValueError, "heartbeat_ms"),
    (lambda: FTConfig(timeout_s=float("nan")), ValueError, "timeout_s"),
    (lambda: Kill(group=-1, at_step=2), ValueError, "kill group"),
    (lambda: Kill(group=1, at_step=2, restart_after=-1.0), ValueError, "restart_after"),
    (lambda: check_groups([0, 1, 1]), ValueError, "group id 1 is given twice"),
    (lambda: check_groups(True), TypeError, "groups"),
    (lambda: check_kills([Kill(5, 1)], [0, 1, 2], 10), ValueError, "no replica group 5"),
    (lambda: check_kills([Kill(1, 10)], [0, 1, 2], 10), ValueError, "only 10 outer steps"),
    (lambda: check_kills([Kill(0, 1), Kill(1, 1)], [0, 1], 10), ValueError, "nobody is left"),
    (lambda: check_kills([(2, 5)], [0, 1, 2], 10), TypeError, "Kill"),
    (lambda: parse_kill("2-5"), ValueError, "GROUP:OUTER_STEP"),
])
def test_bad_settings_are_refused(bad, error, match):
    with pytest.raises(error, match=match):
        bad()


def test_parse_kill():
    assert parse_kill("2:5:10") == Kill(2, 5, 10.0) and parse_kill("0:3") == Kill(0, 3, None)


def test_a_run_that_cannot_be_is_refused_before_anything_starts(tmp_path, monkeypatch):
    pytest.importorskip("torchft")
    from milktea.local.ft import FTJob, LighthouseUnreachable
    scheme, cfg = DiLoCo(inner_steps=2), RunConfig(task="digits", steps=4)
    started = []
    monkeypatch.setattr("subprocess.Popen.__init__", lambda *a, **k: started.append(a) or 1 / 0)
    with pytest.raises(LighthouseUnreachable, match="no torchft lighthouse answers at http://127.0.0.1:9"):
        FTJob(scheme, cfg, lighthouse="127.0.0.1:9")
    with pytest.raises(ValueError, match="group id 1 is given twice"):
        FTJob(scheme, cfg, groups=[0, 1, 1])
    with pytest.raises(ValueError, match="not a multiple of inner_steps"):
        FTJob(scheme, RunConfig(task="digits", steps=5))
    with pytest.raises(ValueError, match="no emulated link"):
        FTJob(scheme, RunConfig(task="digits", steps=4, link_gbit=1.0))
    with pytest.raises(ValueError, match="fp32 pseudo-gradients"):
        FTJob(DiLoCo(inner_steps=2, compressor=Quantize(bits=8)), cfg, engine="torchft")
    with pytest.raises(ValueError, match="cannot carry a pseudo-gradient"):
        FTJob(DiLoCo(inner_steps=2, compressor=PowerSGD(2)), cfg)
    (tmp_path / "group0-0.jsonl").write_text("")
    with pytest.raises(ValueError, match="another run's events"):
        FTJob(scheme, cfg, folder=str(tmp_path))
    assert started == []


def test_each_group_gets_its_device_and_backend_by_the_librarys_rule(monkeypatch):
    """Group g is local rank g of the machine: cuda:g and NCCL when every group has a GPU,
    else the CPU and gloo (checked by construction: no GPU is needed to see the choice)."""
    pytest.importorskip("torchft")
    from torchft.process_group import ProcessGroupGloo, ProcessGroupNCCL

    from milktea.device import rank_device
    from milktea.local.ft import FTJob
    from milktea.local.ft.engine import group_class, process_group
    assert isinstance(process_group(5, torch.device("cpu")), ProcessGroupGloo)
    assert group_class(None) is ProcessGroupGloo and group_class(torch.device("cuda", 1)) is ProcessGroupNCCL
    job = FTJob(DiLoCo(inner_steps=2), RunConfig(task="digits", steps=4), groups=3)
    env = job._group_env(2)
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("2", "3") and "RANK" not in env
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for gpus, want in ((3, torch.device("cuda", 2)), (2, torch.device("cpu"))):
        monkeypatch.setattr(torch.cuda, "device_count", lambda gpus=gpus: gpus)
        monkeypatch.delenv("MILKTEA_DEVICE", raising=False)
        monkeypatch.setenv("LOCAL_RANK", env["LOCAL_RANK"])
        monkeypatch.setenv("LOCAL_WORLD_SIZE", env["LOCAL_WORLD_SIZE"])
        assert rank_device() == want


def test_without_torchft_the_error_says_how_to_install_it(monkeypatch):
    from milktea.local.ft.engine import require
    monkeypatch.setitem(sys.modules, "torchft", None)
    monkeypatch.setitem(sys.modules, "torchft.manager", None)
    with pytest.raises(ImportError, match=r"pip install 'torchft==0.2.0'"):
        require()


# --- the chapter's sentences and the bench's targets turn with the run's numbers -------------
def _result(rejoined=True, agree=0.0, standby=True, loss=0.40, recovery=1.5):
    from milktea.local.ft import FTResult
    log = [{"step": 0, "quorum": 1, "members": [0, 1, 2], "recovering": [], "heard": [0, 1, 2], "committed": True,
            "time": 1.0, "received_bytes": 0},
           {"step": 4, "quorum": 2, "members": [0, 1], "recovering": [], "heard": [0, 1], "committed": True,
            "time": 2.6, "received_bytes": 0}]
    if rejoined:
        log.append({"step": 9, "quorum": 3, "members": [0, 1, 2], "recovering": [2], "heard": [0, 1],
                    "committed": True, "time": 2.1 + recovery, "received_bytes": 101_300})
    kill = {"group": 2, "at_step": 4, "at_inner_step": 45, "killed": 2.1, "restarted": 3.1, "shrank": 2.6,
            "shrink_s": 0.5, "loaded": 3.2, "rejoined": 2.1 + recovery if rejoined else None,
            "rejoined_step": 9 if rejoined else None, "recovery_s": recovery if rejoined else None, "source": 0}
    groups = [{"group": g, "incarnations": 1 + (g == 2), "outer steps": 10, "quorum sizes": [2, 3], "bytes sent": 1,
               "bytes received": 0, "final": {"loss": loss} if (g < 2 or rejoined) else None, "theta": None,
               "late": False} for g in range(3)]
    records = [{"group": g, "time": 1.9, "ledger_norm": 2.0 + g} for g in range(3)]
    return FTResult("diloco H=10 topk-10%+ef", "/nowhere", 9.0, standby=standby, quorum_log=log, groups=groups,
                    kills=[kill], final={"loss": loss}, agree=agree, records=records)


@pytest.fixture(params=["en", "zh"])
def lang(request):
    from milktea import i18n
    with i18n.speaking(request.param):
        yield request.param


def test_the_chapters_sentences_say_what_the_run_did(lang):
    from milktea.experiments import local_ft as fx
    zh = lang == "zh"
    text = " ".join(fx.sentences(_result(), 500, 10))
    assert ("101.3 kB" in text and "1.5" in text and "0.5" in text and "500" in text)
    assert ("bit for bit" in text) if not zh else ("逐位相同" in text)
    assert ("standby" in text) if not zh else ("备用" in text)
    cold = " ".join(fx.sentences(_result(standby=False), 500, 10))
    assert ("spent 0.1 s loading" in cold) if not zh else ("加载用了 0.1 秒" in cold)
    apart = " ".join(fx.sentences(_result(agree=3e-7), 500, 10))
    assert ("differ by up to 3e-07" in apart) if not zh else ("最多相差 3e-07" in apart)
    lost = " ".join(fx.sentences(_result(rejoined=False), 500, 10))
    assert ("did not rejoin" in lost) if not zh else ("没能" in lost)
    assert ("2 of 3 groups" in lost) if not zh else ("3 个组中有 2 个" in lost)
    gaps = " ".join(fx.gaps(_result(), 500, sim_kb=57.7))
    assert "57.7 kB" in gaps and "4" in gaps and "3, 2" not in gaps and "2" in gaps
    assert len(fx.gaps(_result(rejoined=False), 500)) == 2          # no recovery traffic to speak of


def test_the_bench_targets_turn_with_the_numbers(lang):
    from milktea.experiments import local_ft as fx
    clean = _result(loss=0.40)
    assert fx.check_loss(_result(loss=0.405), clean).ok and not fx.check_loss(_result(loss=0.41), clean).ok
    assert not fx.check_loss(_result(loss=0.39), clean).ok            # 2.5% below is outside too
    ok, slow, never = fx.check_recovery(_result(recovery=29.0)), fx.check_recovery(_result(recovery=31.0)), \
        fx.check_recovery(_result(rejoined=False))
    assert ok.ok and not slow.ok and not never.ok
    assert ("inside" in ok.text and "above" in slow.text) if lang == "en" else ("之间" in ok.text and "高于" in slow.text)
    left = _result()
    assert fx.check_left(left, "x").ok
    left.left_behind = [123]
    assert not fx.check_left(left, "x").ok and "1" in fx.check_left(left, "x").text
