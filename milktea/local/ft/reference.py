"""The yardstick: torchft's own `torchft.local_sgd.DiLoCo` on the same model, the same
batches (milktea.local's `Batches` for the group's number) and the same optimizers
(`torch.optim.AdamW` inside, `torch.optim.SGD` with Nesterov momentum outside), one
process per replica group under a lighthouse, as `FTJob(..., engine="torchft")` starts
it. With fp32 pseudo-gradients and no fault it must train the model milktea's groups
train (tests/integration/test_local_ft_processes.py compares them, and with `milktea.local` on
torchrun-style ranks).

    python -m milktea.local.ft.reference SPEC GROUP INCARNATION    (what the launcher starts)
"""
from __future__ import annotations

import os

import torch


def train_reference(spec: dict, group: int, incarnation: int = 0) -> dict:
    from datetime import timedelta

    from torch.distributed import TCPStore
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager

    from ...tasks import make_task
    from ..dist import Batches
    from .config import replica_id
    from .engine import process_group, require
    from .group import Events
    from .lighthouse import wait_for_groups
    require()
    scheme, cfg, ft = spec["scheme"], spec["run"], spec["ft"]
    torch.set_num_threads(ft.threads)
    events = Events(os.path.join(spec["folder"], f"group{group}-{incarnation}.jsonl"), group, incarnation)
    events("start", pid=os.getpid())
    task = make_task(cfg.task, hidden=cfg.hidden, seed=cfg.seed)
    model = task.model()
    batches = Batches(task, group, spec["groups"], cfg.batch, cfg.seed, torch.device("cpu"))
    a, o = scheme.inner, scheme.outer
    inner = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=a.betas, eps=a.eps, weight_decay=a.weight_decay,
                              foreach=False)
    outer = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, nesterov=o.nesterov and o.momentum > 0,
                            foreach=False)

    def load(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["inner"])

    store = TCPStore(ft.host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=process_group(ft.timeout_s), load_state_dict=load,
                      state_dict=lambda: {"model": model.state_dict(), "inner": inner.state_dict()},
                      min_replica_size=ft.min_groups, use_async_quorum=False, timeout=timedelta(seconds=ft.timeout_s),
                      quorum_timeout=timedelta(seconds=ft.quorum_timeout_s),
                      connect_timeout=timedelta(seconds=ft.connect_s), rank=0, world_size=1, store_addr=ft.host,
                      store_port=store.port, lighthouse_addr=spec["lighthouse"], replica_id=replica_id(group),
                      hostname=ft.host, init_sync=False)
    wait_for_groups(spec["lighthouse"], spec.get("expect", range(spec["groups"])), ft.heartbeat_ms,
                    ft.quorum_timeout_s)
    with DiLoCo(manager, [model], inner, outer, sync_every=scheme.inner_steps, backup_device=torch.device("cpu"),
                pin_memory=False):
        for t in range(1, cfg.steps + 1):
            xb, yb, weight, _ = batches.next(torch.float32)
            inner.zero_grad()
            loss = (task.loss(model(xb), yb) * weight).sum() / weight.sum()
            loss.backward()
            inner.step()                        # DiLoCo's hook exchanges after every H-th step
            events("step", t=t, outer=t // scheme.inner_steps, loss=float(loss), sent=0)
    theta = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    path = os.path.join(spec["folder"], f"group{group}-{incarnation}.theta.pt")
    torch.save(theta, path)
    with torch.no_grad():
        final = task.evaluate(model)
    events("done", final=final, t=cfg.steps, step=manager.current_step(), theta=path)
    manager.shutdown(wait=False)
    return final


def main(argv=None) -> None:
    from .proc import entry
    entry(train_reference, argv)


if __name__ == "__main__":
    main()
