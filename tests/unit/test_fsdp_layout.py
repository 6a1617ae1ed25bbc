"""FSDP2's private state, as milktea.fsdp.layout reads it, on the installed torch: a real
`fully_shard` model on one in-process gloo rank (no process started). A torch that moves
or renames what layout.py reads fails here, by name, before any run goes wrong."""
import pytest
import torch
import torch.distributed as dist

from milktea import Quantize


@pytest.fixture(scope="module")
def model():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from torch.distributed.fsdp import fully_shard
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    m[2].bias.requires_grad_(False)
    fully_shard(m[0])
    fully_shard(m)
    yield m
    dist.destroy_process_group()


def test_the_private_names_layout_reads_are_there(model):
    from torch.distributed.fsdp._fully_shard import _fsdp_api, _fsdp_common
    assert {"AllGather", "ReduceScatter"} <= set(dir(_fsdp_api))
    assert {"DDPMeshInfo", "FSDPMeshInfo"} <= set(dir(_fsdp_common))
    assert callable(torch._C._current_graph_task_id)
    groups = model[0]._get_fsdp_state()._fsdp_param_groups
    assert len(groups) == 1
    g = groups[0]
    for name in ("fsdp_params", "mesh_info", "_reduce_scatter_comm", "_all_gather_comm", "_all_reduce_hook",
                 "reduce_scatter_unused_params", "gradient_divide_factor"):
        assert hasattr(g, name), name
    assert isinstance(g.mesh_info.shard_process_group, dist.ProcessGroup)
    fp = g.fsdp_params[0]
    assert isinstance(fp.sharded_param, torch.nn.Parameter)
    assert isinstance(fp.padded_sharded_param_size, torch.Size)


def test_groups_name_each_parameters_segment_and_leave_frozen_ones_out_of_the_gradients(model):
    from milktea.fsdp import layout
    groups = {g.module: g for g in layout.groups_of(model)}
    assert set(groups) == {"", "0"} and all(layout.mesh_kind(g.group) == "fsdp" for g in groups.values())
    first, root = groups["0"], groups[""]
    assert [(s.name, s.shape) for s in first.weight_segments] == [("0.weight", (16, 8)), ("0.bias", (16,))]
    assert first.row_numel == 16 * 8 + 16 == sum(p.numel() for p in model[0].parameters())
    assert [s.name for s in root.weight_segments] == ["2.weight", "2.bias"]
    assert [s.name for s in root.grad_segments] == ["2.weight"]             # the frozen bias gets no gradient


def test_compress_installs_milktea_s_collectives_and_close_gives_fsdp2_s_back(model):
    import milktea.fsdp
    from milktea.fsdp import comms
    groups = [m._get_fsdp_state()._fsdp_param_groups[0] for m in (model, model[0])]
    before = [(g._reduce_scatter_comm, g._all_gather_comm, g.reduce_scatter_unused_params) for g in groups]
    state = milktea.fsdp.compress(model, Quantize(bits=8, chunk=64), weights=Quantize(bits=8, chunk=64))
    assert all(isinstance(g._reduce_scatter_comm, comms.CompressedReduceScatter) for g in groups)
    assert all(isinstance(g._all_gather_comm, comms.CompressedAllGather) for g in groups)
    assert state.ledger is None and (state.world, state.rank) == (1, 0)
    state.close()
    state.close()                                                          # twice is safe
    assert [(g._reduce_scatter_comm, g._all_gather_comm, g.reduce_scatter_unused_params) for g in groups] == before
    assert "closed" in repr(state)


def test_in_backward_tells_the_forward_s_gather_from_the_backward_s():
    from milktea.fsdp import layout
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(layout.in_backward()))
    seen.append(layout.in_backward())
    y.sum().backward()
    assert seen == [False, True]
