"""Tests of exercise 06 (engineering): 1-byte delta indices (delta8), the overlap timeline, accumulation,
PowerSGD's power step, a communication hook (on a fake group and on real gloo ranks), the bucket size."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, byte_array, number, several, show


def _index_sets(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("no indices"), (np.zeros(0, np.int64),)),
             Case(N_("index 0 alone"), (np.array([0]),)),
             Case(N_("neighbours: gaps of 0"), (np.array([0, 1, 2, 3]),)),
             Case(N_("gap 254 fits a byte, gap 255 needs an escape"), (np.array([254, 510, 1020]),)),
             Case(N_("a gap of exactly 2 x 255"), (np.array([5, 516]),)),
             Case(N_("int32 positions with a big gap"), (np.array([300, 301, 100_000], np.int32),))]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(10, 10**6))
        k = int(rng.integers(1, min(n, 3000 if hidden else 60)))
        rand.append(Case(N_("random Top-K indices"), (np.sort(rng.choice(n, k, replace=False)).astype(np.int64),)))
    return fixed + rand


def _decode_cases(rng, ref, hidden=False):
    return [Case(c.label, (np.asarray(ref["delta_encode"](c.args[0]), np.uint8),)) for c in _index_sets(rng, ref, hidden)]


def _decode_compare(expected, got, args):
    if isinstance(got, np.ndarray) and got.dtype.kind not in "iu" and got.size:
        return _("expected integer indices, got dtype {dtype}").format(dtype=got.dtype)
    if isinstance(got, list):
        got = np.asarray(got, np.int64) if all(isinstance(v, int) for v in got) else got
    if not isinstance(got, np.ndarray):
        return _("expected a numpy array of indices, got {v}").format(v=show(got))
    return array()(expected, got.astype(np.int64), args)


def _timelines(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("one bucket: nothing to overlap"), (np.array([0.3]), np.array([0.2]))),
             Case(N_("fast link: all but the last call hide behind work"), (np.full(4, 0.1), np.full(4, 0.01))),
             Case(N_("slow link: calls queue up"), (np.full(4, 0.01), np.full(4, 0.1))),
             Case(N_("uneven buckets"), (np.array([0.05, 0.2, 0.01, 0.1]), np.array([0.15, 0.02, 0.3, 0.0])))]
    rand = []
    for _draw in range(4):
        b = int(rng.integers(1, 40))
        rand.append(Case(N_("random buckets"), (rng.uniform(0, 0.1, b), rng.uniform(0, 0.1, b) * rng.uniform(0.1, 5))))
    return fixed + rand


def _step_cases(rng, ref, hidden=False):
    cases = []
    for c in _timelines(rng, ref, hidden):
        for overlap in (False, True):
            cases.append(Case(c.label, (0.05, c.args[0], c.args[1], overlap)))   # the call shows `overlap`
    return cases


def _accumulation_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("8 micro-batches, without no_sync()"), (0.05, 0.2, 100e6, 32, 8, False)),
             Case(N_("8 micro-batches, with no_sync()"), (0.05, 0.2, 100e6, 32, 8, True)),
             Case(N_("no accumulation: no_sync() changes nothing"), (0.1, 0.3, 4e6, 16, 1, True))]
    rand = [Case(N_("random step"), (float(rng.uniform(0.001, 1)), float(rng.uniform(0, 2)), float(rng.uniform(1e3, 1e10)),
                                 int(rng.integers(1, 256)), int(rng.integers(1, 64)), bool(rng.integers(0, 2))))
            for _draw in range(6)]
    return fixed + rand


def _power_cases(rng, ref, hidden=False):
    u, v = rng.standard_normal(7), rng.standard_normal(5)
    fixed = [] if hidden else [Case(N_("a rank-1 matrix is rebuilt exactly at rank 1"), (np.outer(u, v), rng.standard_normal((5, 1)))),
             Case(N_("rank 2 of a 6 x 4 matrix"), (rng.standard_normal((6, 4)), rng.standard_normal((4, 2)))),
             Case(N_("full rank: the matrix itself"), (rng.standard_normal((3, 3)), rng.standard_normal((3, 3)))),
             Case(N_("a tall gradient, rank 4"), (rng.standard_normal((64, 16)) * 0.01, rng.standard_normal((16, 4))))]
    rand = []
    for _draw in range(4):
        m, n = int(rng.integers(2, 80 if hidden else 20)), int(rng.integers(2, 80 if hidden else 20))
        r = int(rng.integers(1, min(m, n) + 1))
        rand.append(Case(N_("random matrix and start"), (rng.standard_normal((m, n)), rng.standard_normal((n, r)))))
    return fixed + rand


def _hook_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("two workers"), ([np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 2.0, 1.0], np.float32)],)),
             Case(N_("one worker alone"), ([np.array([0.5, -0.25], np.float32)],)),
             Case(N_("large values: divide before the sum"), ([np.full(4, 40000.0, np.float32)] * 4,))]
    if not hidden:   # the gradients of a real DDP step on two gloo ranks (run once, see HOOK_HARNESS)
        fixed.append(Case(N_("two real gloo ranks under DDP, three buckets"), ([np.ones(4, np.float32)] * 2,), {"ddp": True}))
    rand = []
    for _draw in range(4):
        n, w = int(rng.integers(1, 5000 if hidden else 100)), int(rng.integers(2, 9))
        rand.append(Case(N_("random bucket"), ([(rng.standard_normal(n) * rng.uniform(1e-3, 10)).astype(np.float32)
                                            for _draw in range(w)],)))
    return fixed + rand


def _bucket_times(ref, sizes, back, alpha, beta, caps):
    return [ref["best_bucket_cap"](sizes, back, alpha, beta, [c])[1] for c in caps]


def _clear_winner(ref, sizes, back, alpha, beta, caps):
    """True when the best time is at least 1e-6 (relative) ahead of every cap that buckets
    differently: a learner's float order must not decide the answer."""
    times = _bucket_times(ref, sizes, back, alpha, beta, caps)
    best = min(times)
    return all(t == best or t > best * (1 + 1e-6) for t in times)


def _bucket_cases(rng, ref, hidden=False):
    mb = 1e6
    layers = np.full(24, 4 * mb)
    fixed = [] if hidden else [
        Case(N_("no price per message: the smallest buckets overlap best"),
             (layers, np.full(24, 0.008), 0.0, 8 / 10e9, [1 * mb, 8 * mb, 25 * mb, 100 * mb])),
        Case(N_("a huge price per message: one bucket"),
             (layers, np.full(24, 0.008), 0.5, 8 / 10e9, [1 * mb, 8 * mb, 25 * mb, 100 * mb])),
        Case(N_("somewhere in between"),
             (layers, np.full(24, 0.008), 0.03, 8 / 10e9, [4 * mb, 16 * mb, 25 * mb, 100 * mb])),
        Case(N_("caps that bucket alike tie: the smallest"),
             (np.array([3e6, 3e6]), np.array([0.01, 0.01]), 1e-3, 1e-9, [5e6, 2e6, 1e6])),
        Case(N_("uneven layers: the embedding comes last"),
             (np.array([1e5, 2e6, 2e6, 2e6, 2e6, 5e7]), np.array([0.001, 0.004, 0.004, 0.004, 0.004, 0.002]),
              4e-3, 8 / 25e9, [1e6, 4e6, 6e6, 6e7]))]
    rand = []
    while len(rand) < 4:
        n = int(rng.integers(2, 60 if hidden else 16))
        sizes = np.round(10 ** rng.uniform(3, 8, n))
        back = sizes * float(rng.uniform(1e-10, 5e-9)) * rng.uniform(0.5, 1.5, n)
        alpha, beta = float(10 ** rng.uniform(-6, -1.5)), float(8 / 10 ** rng.uniform(9, 11.5))
        caps = sorted({float(c) for c in np.round(10 ** rng.uniform(3, 9, int(rng.integers(2, 7))))})
        if _clear_winner(ref, sizes, back, alpha, beta, caps):
            rand.append(Case(N_("random backward profile and link"), (sizes, back, alpha, beta, caps)))
    return fixed + rand


# The grader's own code that runs the learner's fp16_hook, from the tests file (never from the
# notebook: a run_hook edited there changes nothing):
# - on a fake bucket and all-reduce, as worker 0 of len(grads) workers, the others sending their
#   gradients the same way (every case);
# - for real, once per run: two gloo ranks (threads of the grading process, each with its own
#   ProcessGroupGloo over an in-memory store: the sandbox starts no process) train a small model
#   under DistributedDataParallel for one step, the hook registered on three buckets. Every case
#   carries that run's verdict, so a hook that fails in real DDP loses the whole task; the case
#   with ddp=True also returns the real run's gradients for comparison with the reference.
HOOK_HARNESS = """
import copy
import threading
from datetime import timedelta

import numpy as np
import torch

BATCHES = [np.random.default_rng(7 + r).standard_normal((4, 8)).astype(np.float32) for r in range(2)]
_DDP = {}


def _value(fut):
    out = fut.wait()
    return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out


def _dtype(t):
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else type(t).__name__


def _fake(hook, grads):
    grads = [torch.tensor(np.asarray(g, dtype=np.float32)) for g in grads]
    others, world, calls = grads[1:], len(grads), []

    class Bucket:
        def __init__(self, buffer):
            self._buffer = buffer

        def buffer(self):
            return self._buffer

        def index(self):
            return 0

        def is_last(self):
            return True

    class Group:
        world_size = world

        def allreduce(self, tensor):
            if type(tensor) is not torch.Tensor:
                raise TypeError("state.allreduce takes a torch.Tensor, not " + type(tensor).__name__)
            calls.append((_dtype(tensor), tensor.numel() * torch.empty((), dtype=tensor.dtype).element_size()))
            total = tensor.detach().clone()
            for other in others:
                total += (other / world).to(tensor.dtype)
            fut = torch.futures.Future()
            fut.set_result([total])
            return fut

    fut = hook(Group(), Bucket(grads[0].clone()))
    if not isinstance(fut, torch._C.Future):   # what Future.then() returns too
        raise TypeError("fp16_hook must return a torch.futures.Future, not " + type(fut).__name__)
    out = _value(fut)
    if not isinstance(out, torch.Tensor):
        raise TypeError("the future's value must be a tensor, not " + type(out).__name__)
    return out.detach().to(torch.float32).numpy(), sum(n for _, n in calls), [d for d, _ in calls], _dtype(out)


def _ddp(hook):
    import torch.distributed as dist
    world, store = len(BATCHES), dist.HashStore()
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    grads, calls, backs, errors = {}, [], [], []

    class State:   # what the hook sees: the world size and an all-reduce on the real gloo group
        def __init__(self, group):
            self.group, self.world_size = group, world

        def allreduce(self, tensor):
            if type(tensor) is not torch.Tensor:
                raise TypeError("state.allreduce takes a torch.Tensor, not " + type(tensor).__name__)
            calls.append((_dtype(tensor), tensor.numel() * tensor.element_size()))
            return self.group.allreduce([tensor]).get_future()

    def watched(state, bucket):
        fut = hook(state, bucket)
        if not isinstance(fut, torch._C.Future):
            raise TypeError("fp16_hook must return a torch.futures.Future, not " + type(fut).__name__)

        def seen(f):
            value = f.value()
            out = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
            backs.append(_dtype(out))
            return out
        return fut.then(seen)

    def rank(r):
        try:
            opts = dist.ProcessGroupGloo._Options()
            opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
            opts._timeout = timedelta(seconds=20)
            group = dist.ProcessGroup(store, r, world)
            _DDP.setdefault("groups", []).append(group)   # alive until the end: a group freed on its own thread aborts
            group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
            group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO,
                                    dist.ProcessGroupGloo(dist.PrefixStore("gloo", store), r, world, opts))
            model = copy.deepcopy(base)
            ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                            bucket_cap_mb_list=[0.0003] * 4)
            ddp.register_comm_hook(State(group), watched)
            ddp(torch.as_tensor(BATCHES[r])).square().mean().backward()
            grads[r] = torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    if len(grads) != world:
        raise RuntimeError("the DDP ranks did not finish within 30 s: does the hook wait for something that never comes?")
    if not torch.equal(grads[0], grads[1]):
        raise RuntimeError("the two DDP ranks ended the step with different gradients")
    local = []   # each rank's own gradient, without DDP: their mean is what the hook must deliver
    for batch in BATCHES:
        model = copy.deepcopy(base)
        model(torch.as_tensor(batch)).square().mean().backward()
        local.append(torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()]).double())
    back = backs[0] if backs and all(b == backs[0] for b in backs) else ", ".join(sorted(set(backs))) or "none"
    return (grads[0].to(torch.float32).numpy(), sum(n for _, n in calls) // world, [d for d, _ in calls], back,
            torch.stack(local).mean(0).numpy())


def _verdict(hook):
    # the real run, once: "" when the hook averaged in fp16 and gave float32 back, else what went wrong
    if "verdict" not in _DDP:
        try:
            avg, sent, dtypes, back, exact = _DDP["run"] = _ddp(hook)
            scale = max(float(np.abs(exact).max()), 1e-30)
            if any(d != "float16" for d in dtypes) or sent != 2 * exact.size:
                _DDP["verdict"] = "it sent " + ", ".join(dtypes) + " (" + str(sent) + " bytes) instead of float16"
            elif back != "float32":
                _DDP["verdict"] = "its future gave " + back + " back instead of float32"
            elif not np.allclose(avg, exact, rtol=2e-3, atol=2e-3 * scale):
                _DDP["verdict"] = "the gradients after the step are not the average of the two ranks'"
            else:
                _DDP["verdict"] = ""
        except BaseException as exc:
            _DDP["verdict"] = type(exc).__name__ + ": " + str(exc)[:300]
    return _DDP["verdict"]


def run(hook, grads, ddp=False):
    fake = _fake(hook, grads)   # first: a hook that fails on the fake group fails before DDP starts
    verdict = _verdict(hook)
    if ddp:
        if "run" not in _DDP:
            raise RuntimeError(verdict)
        return _DDP["run"][:4] + (verdict,)
    return fake + (verdict,)
"""


def _hook_compare(expected, got, args):
    if not isinstance(got, (list, tuple)) or len(got) != 5:
        return _("the hook's result could not be read: {v}").format(v=show(got))
    avg, sent, dtypes, back, verdict = got
    if not dtypes:
        return _("the hook never called state.allreduce: the other workers' gradients never arrived")
    if any(d != "float16" for d in dtypes):
        return _("the hook sent {dtypes} through state.allreduce: send float16").format(dtypes=", ".join(dtypes))
    if int(sent) != int(expected[1]):
        return _("bytes sent: expected {want} (2 bytes per entry: float16), got {v}").format(
            want=int(expected[1]), v=show(sent))
    if back != "float32":
        return _("the future's value is {dtype}: give the average back in the bucket's dtype, float32").format(
            dtype=back)
    # fp16 keeps about 3 significant digits; the sum of N values divided by N is rounded once per worker
    scale = max(float(np.abs(np.asarray(expected[0], np.float64)).max()), 1e-30)
    problem = array(dtype=np.float32, rtol=2e-3, atol=2e-3 * scale)(expected[0], avg, args)
    if problem or not verdict:
        return problem
    # right on the fake group, wrong in the real run: every case says so
    return _("in a real DDP step on two gloo ranks the hook failed: {why}").format(why=verdict)


TASKS = [
    Task("06.1", "delta_encode", 3, _index_sets, byte_array()),
    Task("06.2", "delta_decode", 2, _decode_cases, _decode_compare),
    Task("06.3", "overlap_timeline", 3, _timelines, array(rtol=1e-9, atol=1e-12)),
    Task("06.4", "step_time", 2, _step_cases, number(rtol=1e-9, atol=1e-12)),
    Task("06.5", "accumulation_cost", 2, _accumulation_cases,
         several(number(rtol=1e-9), number(rtol=1e-9), names=("seconds_per_sample", "bytes_per_sample"))),
    Task("06.6", "power_step", 3, _power_cases, array(rtol=1e-6, atol=1e-9)),
    Task("06.7", "fp16_hook", 3, _hook_cases, _hook_compare, params=("grads",), harness=HOOK_HARNESS),
    Task("06.8", "best_bucket_cap", 3, _bucket_cases,
         several(number(rtol=0, atol=0), number(rtol=1e-9, atol=1e-12), names=("cap", "seconds"))),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "06.1": functools.partial(_index_sets, hidden=True),
    "06.2": functools.partial(_decode_cases, hidden=True),
    "06.3": functools.partial(_timelines, hidden=True),
    "06.4": functools.partial(_step_cases, hidden=True),
    "06.5": functools.partial(_accumulation_cases, hidden=True),
    "06.6": functools.partial(_power_cases, hidden=True),
    "06.7": functools.partial(_hook_cases, hidden=True),
    "06.8": functools.partial(_bucket_cases, hidden=True),
}
### END HIDDEN TESTS
