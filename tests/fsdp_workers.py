"""Functions the FSDP integration tests run on gloo ranks (they must live in an importable module)."""
import torch
import torch.distributed as dist

from milktea import Identity, Quantize, TopK
from milktea.fsdp import cost
from milktea.fsdp.train import RunConfig, train

BF16 = dict(reduce_dtype=torch.bfloat16, accumulate=2)


def _diff(a, b) -> float:
    return max(float((a["shards"][k].double() - b["shards"][k].double()).abs().max()) for k in a["shards"])


def agrees_with_fsdp2(steps: int = 5) -> dict:
    """compressor=None against FSDP2 alone (exactly), and the all-to-all path with packets
    that drop nothing (Identity) against it (to float rounding): fp32, then bf16 reduction
    with two micro-batches per step."""
    out = {}
    for tag, extra in (("fp32", {}), ("bf16", BF16)):
        kw = dict(steps=steps, return_params=True, optimizer="sgd", lr=0.05, **extra)
        pure = train(RunConfig(install=False, **kw))
        none = train(RunConfig(**kw))
        ident = train(RunConfig(compressor=Identity(), min_size=0, **kw))
        out[tag] = {"none": _diff(none, pure), "identity": _diff(ident, pure),
                    "losses": (pure["losses"], none["losses"], ident["losses"]),
                    "identity_rs_ratio": sum(s.dense_bytes("reduce_scatter") for s in ident["traffic"])
                    / sum(s.bytes("reduce_scatter") for s in ident["traffic"])}
    return out


def _regathered(cfg: RunConfig) -> int:
    """Parameters FSDP2 frees after forward and gathers again for backward: all but the root's own."""
    from milktea.tasks import CharGPT
    model = CharGPT(n_layer=cfg.layers, n_embd=cfg.width).model()
    return sum(p.numel() for b in model.blocks for p in b.parameters())


def priced(steps: int = 3) -> list:
    """Measured traffic and memory beside the cost model's, for three ways of sending."""
    world = dist.get_world_size()
    rows = []
    int8 = Quantize(bits=8, chunk=256)
    for label, kw, grad_c, weight_c, ledger in (
            ("fsdp2", {}, None, None, None),
            ("zero-2", dict(reshard_after_forward=False), None, None, None),
            ("int8+int8w", dict(compressor=int8, weights=int8, min_size=0), int8, int8, None),
            ("top1%+ef", dict(compressor=TopK(0.01), error_feedback="worker", min_size=0), TopK(0.01), None,
             "worker")):
        cfg = RunConfig(steps=steps, **kw)
        r = train(cfg)
        measured = {k: sum(s.bytes(k) for s in r["traffic"][1:]) / (len(r["traffic"]) - 1)
                    for k in ("all_gather_forward", "all_gather_backward", "reduce_scatter")}
        stage = 3 if cfg.reshard_after_forward else 2        # kept after forward: no re-gather in backward
        model = cost.step_bytes(r["params"], world, stage=stage, grad_bytes=cost.bytes_per_entry(grad_c),
                                weight_bytes=cost.bytes_per_entry(weight_c), regathered=_regathered(cfg))
        model.setdefault("all_gather_backward", 0.0)
        mem = cost.memory_per_rank(r["params"], world, optimizer_bytes=8, ledger=ledger)
        rows.append({"label": label, "measured": measured, "model": model, "memory": r["memory"], "mem_model": mem})
    return rows


def hsdp_agrees(steps: int = 4) -> dict:
    """HSDP, 2 replicas x 2 shards: milktea's (the replicate hop in its hook) against FSDP2's own
    2-D mesh, dense; then Top-1% on the replicate hop with its ledger on the reduced shard."""
    kw = dict(steps=steps, replicas=2, return_params=True)
    native = train(RunConfig(native_hsdp=True, **kw))
    counted = train(RunConfig(native_hsdp=True, install=True, **kw))
    ours = train(RunConfig(**kw))
    topk = train(RunConfig(compressor=TopK(0.05), min_size=0, **kw))
    pure = train(RunConfig(install=False, steps=steps, return_params=True))
    return {"ours": _diff(ours, native), "counted": _diff(counted, native), "native_vs_fsdp4": pure["losses"][-1]
            - native["losses"][-1], "topk_ledger": topk["ledger"], "topk_memory": topk["memory"],
            "topk_traffic": topk["traffic"], "ours_traffic": ours["traffic"], "counted_traffic": counted["traffic"],
            "losses": (native["losses"], ours["losses"], topk["losses"]), "params": native["params"]}


def _resumable(**kw) -> RunConfig:
    return RunConfig(compressor=Quantize(bits=4, chunk=64, stochastic=True), error_feedback="worker",
                     weights=Quantize(bits=8, chunk=64, stochastic=True), min_size=256, return_params=True, **kw)


def run_and_save(path: str, steps: int = 6, save_at: int = 3) -> dict:
    """The whole run, and a run that saves after `save_at` steps (one file per rank)."""
    whole = train(_resumable(steps=steps))
    train(_resumable(steps=save_at, checkpoint=path, save_at=save_at))
    return {"shards": whole["shards"], "losses": whole["losses"]}


def resume(path: str, steps: int = 6) -> dict:
    r = train(_resumable(steps=steps, checkpoint=path, resume=True))
    return {"shards": r["shards"], "losses": r["losses"]}


def refusals() -> dict:
    """What compress says to setups it cannot serve, on real FSDP2 modules."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo, ShardPlacementResult
    from torch.distributed.tensor import Shard

    import milktea.fsdp
    out = {}

    def said(name, fn):
        try:
            fn()
            out[name] = None
        except Exception as e:          # noqa: BLE001 - the test reads the type and the words
            out[name] = (type(e).__name__, str(e))

    world = dist.get_world_size()
    other = DeviceMesh.from_group(dist.new_group(list(range(world))), "cpu")
    info = FSDPMeshInfo(other, shard_mesh_dim=0)
    two = torch.nn.Linear(4, 4)
    fully_shard(two, shard_placement_fn=lambda p: ShardPlacementResult(Shard(0), info) if p.dim() == 1 else None)
    said("two meshes", lambda: milktea.fsdp.compress(two, Quantize(bits=8)))
    if world % 2 == 0:
        native = torch.nn.Linear(4, 4)
        fully_shard(native, mesh=init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard")))
        said("native hsdp", lambda: milktea.fsdp.compress(native, Quantize(bits=8)))
        said("native hsdp counted", lambda: milktea.fsdp.compress(native, None).close())
    one = torch.nn.Linear(4, 4)
    fully_shard(one)
    said("shard ledger in 1-D", lambda: milktea.fsdp.compress(one, TopK(0.1), error_feedback="shard"))
    mine = milktea.fsdp.compress(one, TopK(0.1), error_feedback="worker")
    saved = mine.state_dict()
    saved["rank"] = (saved["rank"] + 1) % world
    said("another rank's state", lambda: mine.load_state_dict(saved))
    mine.close()
    return out
