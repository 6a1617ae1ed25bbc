"""milktea.fsdp's pieces in one process: the buffer layout, a destination's packets and their
hostile bytes, where the ledger goes, the per-step traffic, the wire (with a fake process
group: sizes, widths and devices), and what a run hands a notebook."""
import pytest
import torch

from milktea import Cast, Identity, PowerSGD, Quantize, QSGD, Sign, TopK
from milktea.compressors import Compressor
from milktea.distributed.compressed_allreduce import use_compressed_allreduce
from milktea.distributed.protocols import Protocol
from milktea.fsdp import choice, codec, layout
from milktea.fsdp.exchange import Wire
from milktea.fsdp.stats import FSDPStats, StepTraffic, Traffic


# --- layout -------------------------------------------------------------------------------
def test_rows_and_segments_match_fsdp2s_flat_buffer():
    flat = torch.arange(2 * 7.)
    rows = layout.split_rows(flat, 2)
    assert rows[1].tolist() == list(range(7, 14))
    segs = [layout.Segment("w", (2, 2), 4), layout.Segment("b", (3,), 3)]
    w, b = layout.views(rows[1], segs)
    assert w.tolist() == [[7, 8], [9, 10]] and b.tolist() == [11, 12, 13]
    w += 100                                                    # views, not copies
    assert flat[7] == 107
    assert layout.names(rows[0], segs, "m") == ["w", "b"]
    # FSDP2 sent a subset (a parameter without a gradient): the row is one piece, named by its module
    assert [tuple(v.shape) for v in layout.views(rows[0][:5], segs)] == [(5,)]
    assert layout.names(rows[0][:5], segs, "m") == ["m[5]"]
    with pytest.raises(ValueError, match="multiple of 3"):
        layout.split_rows(flat, 3)


def test_a_model_without_fully_shard_is_refused():
    import milktea.fsdp
    with pytest.raises(TypeError, match="fully_shard"):
        milktea.fsdp.compress(torch.nn.Linear(2, 2), Quantize(bits=8))
    with pytest.raises(TypeError, match="nn.Module"):
        milktea.fsdp.compress("a model", None)


def test_the_divide_factor_follows_the_reduce_op():
    import torch.distributed as dist

    class Group:
        gradient_divide_factor = 6.0
    assert layout.divide_factor(Group, dist.ReduceOp.AVG, 4) == 4.0
    assert layout.divide_factor(Group, dist.ReduceOp.SUM, 4) == 1.0
    assert layout.divide_factor(Group, dist.ReduceOp.PREMUL_SUM, 4) == 6.0
    Group.gradient_divide_factor = None
    with pytest.raises(ValueError, match="AVG"):
        layout.divide_factor(Group, dist.ReduceOp.PREMUL_SUM, 4)


# --- a destination's packets --------------------------------------------------------------
@pytest.mark.parametrize("c", [Quantize(bits=8, chunk=64), Quantize(bits=4, chunk=64, stochastic=True), TopK(0.1),
                               Sign(), Cast(torch.bfloat16), QSGD(4), "one's own"])
def test_a_rows_packets_decode_as_each_parameters_own(c):
    c = Rounded() if c == "one's own" else c
    row = torch.randn(300, generator=torch.Generator().manual_seed(1))
    pieces, keys = [row[:200].view(20, 10), row[200:290], row[290:]], ["w>1", "u>1", "b>1"]
    coders = Protocol(c, False, 0, 2)
    payload = codec.encode(pieces, keys, coders, ledger=False, min_size=50)
    acc = torch.zeros(300)
    codec.add_into(payload, [acc[:200].view(20, 10), acc[200:290], acc[290:]])
    # each piece is its own packet, from its own copy: the same as compressing the piece alone
    twin = Protocol(c, False, 0, 2)
    for key, p, got in ((k, p, a) for k, p, a in zip(keys[:2], pieces, (acc[:200], acc[200:290]))):
        ref = twin.coder(key).decompress(twin.coder(key).compress(p)).reshape(-1)
        assert torch.equal(got, ref)
    assert torch.equal(acc[290:], row[290:])                   # under min_size: sent as it is
    out = torch.empty(300)
    codec.decode_into(payload, [out[:200].view(20, 10), out[200:290], out[290:]])
    assert torch.equal(out, acc)


def test_the_worker_ledger_keeps_what_each_destinations_packet_dropped():
    coders = Protocol(TopK(0.1), True, 0, 2)
    g = torch.randn(100, generator=torch.Generator().manual_seed(2))
    payload = codec.encode([g.clone()], ["w>1"], coders, ledger=True, min_size=0)
    sent = torch.zeros(100)
    codec.add_into(payload, [sent])
    assert torch.allclose(sent + coders.ledgers["w>1"].residual, g)     # nothing lost
    assert (sent != 0).sum() == 10


@pytest.mark.parametrize("damage", ["truncated", "extra", "shape"])
def test_hostile_payloads_are_refused(damage):
    coders = Protocol(Quantize(bits=8, chunk=64), False, 0, 2)
    payload = codec.encode([torch.randn(100), torch.randn(80)], ["a", "b"], coders, ledger=False, min_size=0)
    views = [torch.zeros(100), torch.zeros(80)]
    if damage == "truncated":
        payload = payload[:-30]
    elif damage == "extra":
        payload = torch.cat([payload, torch.zeros(3, dtype=torch.uint8)])
    else:
        views = [torch.zeros(10, 10), torch.zeros(80)]
    with pytest.raises(ValueError):
        codec.add_into(payload, views)


# --- where the ledger goes ----------------------------------------------------------------
class Rounded(Compressor):
    """A compressor of one's own (one outside file): float32 values rounded to 1/8, biased."""
    codec, biased = "dense", True

    def _compress(self, t):
        return Identity()._compress((t.float() * 8).round() / 8)


class Halved(Rounded):
    """Halves every value: biased and drops half of the norm."""

    def _compress(self, t):
        return Identity()._compress(t.float() / 2)


@pytest.mark.parametrize("c, where", [(Quantize(bits=8, chunk=256), None), (Quantize(bits=4, chunk=256), None),
                                      (Quantize(bits=2, chunk=256), "worker"), (TopK(0.01), "worker"),
                                      (Sign(), "worker"), (QSGD(4), None), (Rounded(), None), (Halved(), "worker"),
                                      (Quantize(bits=4, chunk=256, stochastic=True), None)])
def test_the_default_follows_use_ledger_and_spares_the_worker_ledger_where_little_is_dropped(c, where):
    from milktea.ledger import use_ledger
    for default in (None, "auto"):
        assert choice.ledger_for(c, default, hsdp=False)[0] == where
        # on the reduced shard the ledger costs one gradient shard: use_ledger's rule as it is
        assert choice.ledger_for(c, default, hsdp=True)[0] == ("shard" if use_ledger(c) else None)
    assert choice.ledger_for(c, False, hsdp=False)[0] is None and choice.ledger_for(c, False, hsdp=True)[0] is None


def test_ledger_places_that_cannot_work_are_refused():
    assert choice.ledger_for(TopK(0.1), True, hsdp=False)[0] == "worker"
    assert choice.ledger_for(TopK(0.1), True, hsdp=True)[0] == "shard"
    assert choice.ledger_for(TopK(0.1), False, hsdp=True)[0] is None
    with pytest.raises(ValueError, match="after a reduction"):
        choice.ledger_for(TopK(0.1), "shard", hsdp=False)
    with pytest.raises(ValueError, match="reduced shard"):
        choice.ledger_for(TopK(0.1), "worker", hsdp=True)
    with pytest.raises(ValueError, match="needs a compressor"):
        choice.ledger_for(None, "worker", hsdp=False)
    for bad in ("server", 1, "none"):
        with pytest.raises(ValueError, match="follow the compressor"):
            choice.ledger_for(TopK(0.1), bad, hsdp=False)
    assert choice.ledger_for(None, False, hsdp=False)[0] is None


def test_only_compressors_that_split_per_destination_are_taken():
    assert choice.check_compressor(Rounded(), "gradients") is not None          # one's own, protocol allgather
    for c in (PowerSGD(2), use_compressed_allreduce(Sign())):
        with pytest.raises(ValueError, match="cannot split per destination"):
            choice.check_compressor(c, "gradients")
    assert choice.check_compressor(PowerSGD(2), "gradients", ("lowrank",)) is not None   # HSDP's hop
    with pytest.raises(TypeError, match="milktea compressor"):
        choice.check_compressor(torch.nn.Linear(1, 1), "weights")


# --- per-step traffic ---------------------------------------------------------------------
def test_steps_begin_at_the_forward_after_a_reduce_scatter():
    s = FSDPStats()
    for _ in range(2):                    # two micro-batches, one reduce-scatter at the end
        s.record("all_gather_forward", sent=100, dense=100, comm_s=0.1)
        s.record("all_gather_backward", sent=80, dense=80)
    s.record("reduce_scatter", sent=25, dense=100, codec_s=0.2)
    s.record("all_gather_forward", sent=100, dense=100)
    assert len(s) == 2 and s.steps[0].bytes() == 385 and s.steps[0].by["all_gather_forward"].calls == 2
    assert s.steps[0].ratio("reduce_scatter") == 4.0 and s.series("reduce_scatter") == [25, 0]
    m = s.mean()
    assert m["all_gather_forward"]["bytes"] == 150 and m["reduce_scatter"]["codec_s"] == 0.1
    assert [r["collective"] for r in s.rows()] == ["all-gather (forward)", "all-gather (backward)",
                                                   "reduce-scatter", "all-gather (forward)"]
    assert "| reduce-scatter |" in s.table() and "4x fewer" not in repr(s)
    with pytest.raises(ValueError, match="one of"):
        s.record("broadcast", sent=1, dense=1)


# --- the wire, with a fake process group (two ranks; this one is rank 0) --------------------
class FakeGroup:
    """Rank 0 of 2; the peer sends `peer` bytes (its payload for rank 0 is bytes 7, 7, ...)."""

    def __init__(self, peer_sizes):
        self.peer_sizes, self.calls = peer_sizes, []

    def size(self):
        return 2

    def rank(self):
        return 0


class Done:
    def wait(self):
        return True


def test_the_all_to_all_pads_to_one_width_for_every_rank_and_stays_on_the_payloads_device(monkeypatch):
    import torch.distributed as dist

    from milktea.fsdp import exchange
    group = FakeGroup([11, 0])            # the peer sends 11 bytes to rank 0, this rank sends 5 to it

    def gather(out, inp, group=None, async_op=False):
        group_calls.append(("gather", inp.device, inp.numel()))
        out.copy_(torch.cat([inp, torch.tensor(group_obj.peer_sizes, dtype=inp.dtype)]))
        return Done()

    def a2a(out, inp, group=None, async_op=False):
        group_calls.append(("a2a", inp.device, inp.numel()))
        width = inp.numel() // 2
        out.view(2, width)[0] = inp.view(2, width)[0]
        out.view(2, width)[1] = 7
        return Done()

    group_calls, group_obj = [], group
    monkeypatch.setattr(exchange, "_all_gather_flat", gather)
    monkeypatch.setattr(dist, "all_to_all_single", a2a)
    mine = torch.arange(5, dtype=torch.uint8)
    got, sent = Wire().all_to_all([torch.empty(0, dtype=torch.uint8), mine], group)
    # both ranks must pad to the widest message between two different ranks: 11, not this rank's 5
    assert group_calls[1] == ("a2a", mine.device, 2 * 11)
    assert got[1].tolist() == [7] * 11 and got[0].numel() == 0
    assert sent.bytes == 5 + 16 and all(dev == mine.device for _k, dev, _n in group_calls)


def test_a_link_makes_a_collective_last_what_the_cost_model_says(monkeypatch):
    from milktea.distributed.link import EmulatedLink
    from milktea.fsdp import cost, exchange
    monkeypatch.setattr(exchange, "_all_gather_flat", lambda out, inp, group=None, async_op=False:
                        (out.view(2, -1).copy_(inp.view(1, -1)), Done())[1])
    wire = Wire(EmulatedLink.gbit(1000, latency=1e-3))
    parts, sent = wire.all_gather(torch.ones(64, dtype=torch.uint8), FakeGroup([64]))
    link = wire.link.link
    want = cost.all_to_all_time(16, 2, link) + cost.all_to_all_time(64, 2, link)     # sizes, then the bytes
    assert sent.link_s == pytest.approx(want) and sent.comm_s >= want
    assert sent.bytes == 16 + 64 and [p.numel() for p in parts] == [64, 64]


def test_under_nccl_the_hsdp_mesh_and_the_runs_use_the_gpu(monkeypatch):
    import torch.distributed as dist
    import torch.distributed.device_mesh as dm

    from milktea.fsdp import hsdp
    seen = {}

    class Mesh:
        def __getitem__(self, name):
            return name

        def get_group(self, name):
            return f"group {name}"
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)       # the device rule sees a GPU per rank
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("MILKTEA_DEVICE", raising=False)
    monkeypatch.setattr(dm, "init_device_mesh", lambda dev, shape, mesh_dim_names: seen.update(dev=dev, shape=shape)
                        or Mesh())
    assert hsdp.hsdp_mesh(2, 2) == ("shard", "group replicate")
    assert seen == {"dev": "cuda", "shape": (2, 2)}
    with pytest.raises(ValueError, match="2 x 3"):
        hsdp.hsdp_mesh(2, 3)
    # the library's one device rule decides, as for every rank: a CPU asked for under NCCL is refused
    monkeypatch.setenv("MILKTEA_DEVICE", "cpu")
    with pytest.raises(ValueError, match="nccl"):
        hsdp.hsdp_mesh(2, 2)


# --- what a run hands a notebook ------------------------------------------------------------
def test_an_fsdp_run_summarises_its_traffic():
    from milktea.fsdp.job import FSDPRun
    from milktea.fsdp.train import RunConfig

    def step(i, rs):
        return StepTraffic(i, {"all_gather_forward": Traffic(2, 400, 400), "reduce_scatter": Traffic(2, rs, 400)})
    r = FSDPRun(RunConfig(), 2, 1000, [4.0, 3.0, 2.5], [1.0, 0.1, 0.1], [step(0, 400), step(1, 100), step(2, 100)],
                [{"total": 5e6}, {"total": 4e6}], None, "state")
    assert r.bytes("reduce_scatter") == 100 and r.bytes() == 500 and r.dense_bytes() == 800
    assert [row["ratio"] for row in r.rows()] == [1.0, 4.0]
    assert "4.00x fewer" in repr(r) and "loss 4 -> 2.5" in repr(r) and "5 MB" in repr(r)
    with pytest.raises(ValueError, match="no traffic"):
        FSDPRun(RunConfig(), 2, 1, [1.0], [1.0], [], [None], None, "").bytes()
