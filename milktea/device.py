"""Where tensors live, and what this machine offers.

Every device choice in milktea goes through `pick_device()`: MILKTEA_DEVICE when it
is set, else CUDA when there is a GPU, else the CPU. A rank of a distributed run asks
`rank_device()`, which applies the same rule and gives local rank r the GPU cuda:r;
`backend_for(device)` is the process group's backend that goes with it ("nccl" on
CUDA, else "gloo"): the launcher, the training entry points and the memory benchmark
all decide through these two. `environment_report()` is what `python -m milktea
doctor` prints.

    >>> from milktea.device import pick_device
    >>> pick_device("cpu")
    device(type='cpu')
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import re
import sys

import torch

from .i18n import N_, _

ENV_VAR = "MILKTEA_DEVICE"
_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda)(:\d+)?$")


def pick_device(prefer: str | torch.device | None = None, *, name: str = "prefer") -> torch.device:
    """Return the device to compute on.

    Order: `prefer` if given, else the environment variable MILKTEA_DEVICE if set,
    else CUDA when available, else CPU. Accepted values: "auto", "cpu", "cuda",
    "cuda:N", "mps". Asking for a device this machine does not have raises
    ValueError rather than silently running elsewhere. `name`: what the caller calls
    `prefer`, for the error message (simulate's `device`).

        >>> pick_device("cpu").type
        'cpu'
    """
    source = f"argument {name}"
    if prefer is None:
        prefer = os.environ.get(ENV_VAR) or "auto"
        source = f"environment variable {ENV_VAR}" if os.environ.get(ENV_VAR) else "default"
    if isinstance(prefer, torch.device):
        prefer = str(prefer)
    if not isinstance(prefer, str):
        raise TypeError(f"pick_device: {source} must be a str like 'cpu' or 'cuda' (or a torch.device), "
                        f"got {type(prefer).__name__}")
    want = prefer.strip().lower()
    if not _DEVICE_RE.match(want) or want.startswith(("auto:", "cpu:", "mps:")):
        raise ValueError(f"pick_device: {source} is {prefer!r}; use one of "
                         "'auto', 'cpu', 'cuda', 'cuda:N', 'mps'")
    if want == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if want == "cpu":
        return torch.device("cpu")
    if want == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"pick_device: {source} asks for 'mps' but this torch "
                               "has no usable Apple GPU; use 'cpu' or 'auto'")
        return torch.device("mps")
    # cuda or cuda:N
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ValueError(
            f"pick_device: {source} asks for {prefer!r} but CUDA is not available "
            f"(torch {torch.__version__}, {build}). Use 'cpu' or 'auto', or unset {ENV_VAR}; "
            "for a GPU, install a CUDA build of torch (make lab TORCH=...)")
    dev = torch.device(want)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"pick_device: {source} asks for {prefer!r} but only "
                           f"{torch.cuda.device_count()} CUDA device(s) exist "
                           f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
    return dev


def rank_device(backend: str | None = None, *, local_rank: int | None = None,
                local_world: int | None = None, prefer: str | None = None) -> torch.device:
    """The device of one rank of a distributed run, by `pick_device`'s rule (`prefer`, else
    MILKTEA_DEVICE, else "auto"): on CUDA, local rank r gets cuda:r. "auto" takes CUDA only
    when there is a GPU for every local rank (else the CPU); an explicit "cuda" without
    one is refused. local_rank / local_world default to the LOCAL_RANK / LOCAL_WORLD_SIZE
    that torchrun and `launch` set. `backend`: the backend of a process group already
    running, whose device kind the choice must match ("nccl": CUDA, "gloo": the CPU).

        >>> rank_device("gloo", local_rank=1, local_world=2, prefer="cpu")
        device(type='cpu')
    """
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if local_rank is None else local_rank
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if local_world is None else local_world
    named = prefer if prefer is not None else os.environ.get(ENV_VAR)
    auto = named is None or (isinstance(named, str) and named.strip().lower() in ("", "auto"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if auto:
        kind = {"nccl": "cuda", "gloo": "cpu"}.get(backend) or ("cuda" if 0 < local_world <= gpus else "cpu")
        dev = torch.device(kind)
    else:
        dev = pick_device(named)
    if dev.type == "cuda" and dev.index is not None and local_world > 1:
        raise ValueError(f"{named!r} puts all {local_world} local ranks on one GPU; use 'cuda' (local rank r "
                         f"takes cuda:r) or 'cpu'")
    if dev.type == "cuda" and dev.index is None:
        if local_rank >= gpus:
            raise ValueError(f"local rank {local_rank} of {local_world} has no GPU of its own ({gpus} visible): "
                             f"run at most {gpus} ranks per machine, or set {ENV_VAR}=cpu")
        dev = torch.device("cuda", local_rank)
    if backend is not None and backend_for(dev) != backend:
        raise ValueError(f"this process group runs {backend}, which milktea pairs with "
                         f"{'CUDA' if backend == 'nccl' else 'the CPU'}, but the device chosen is {dev} "
                         f"({ENV_VAR}={os.environ.get(ENV_VAR)!r}); set {ENV_VAR} to "
                         f"{'cuda' if backend == 'nccl' else 'cpu'} or start the group with "
                         f"{backend_for(dev)}")
    return dev


def backend_for_ranks(nprocs: int, backend: str = "auto", *, prefer: str | None = None) -> str:
    """The process group's backend for `nprocs` ranks on this machine: "auto" follows their
    device (`rank_device`: `prefer`, else MILKTEA_DEVICE, else CUDA when every rank has a
    GPU): "nccl" on CUDA, else "gloo". A backend given must agree with that device.

        >>> backend_for_ranks(2, prefer="cpu")
        'gloo'
    """
    import torch.distributed as dist
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', not {backend!r}")
    # the last local rank is the one that needs the most GPUs
    device = rank_device(None if backend == "auto" else backend, local_rank=nprocs - 1, local_world=nprocs,
                         prefer=prefer)
    chosen = backend_for(device)
    if chosen == "nccl" and not dist.is_nccl_available():
        if backend == "auto" and not (prefer or os.environ.get(ENV_VAR)):
            return "gloo"               # GPUs but no NCCL: the ranks run on the CPU
        raise ValueError(f"the ranks run on CUDA but this torch has no NCCL; use backend='gloo' with "
                         f"{ENV_VAR}=cpu")
    return chosen


def backend_for(device: torch.device) -> str:
    """The process group's backend for ranks on `device`: "nccl" on CUDA, else "gloo".

        >>> backend_for(torch.device("cpu"))
        'gloo'
    """
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use, not the box's
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def environment_report() -> dict:
    """Versions, accelerators, collectives and cores, as plain data (JSON-ready).

        >>> environment_report()["cpu_cores"] >= 1
        True
    """
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    try:
        importlib.import_module("ipywidgets")
        widgets_ok, widgets_error = True, None
    except Exception as e:  # a broken install raises more than ImportError
        widgets_ok, widgets_error = False, f"{type(e).__name__}: {e}"
    try:
        chosen, device_error = str(pick_device()), None
    except (RuntimeError, ValueError, TypeError) as e:
        chosen, device_error = None, str(e)
    d = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "executable": sys.executable,
        "milktea": _version("milktea") or getattr(sys.modules.get("milktea"), "__version__", None),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "numpy": _version("numpy"),
        "matplotlib": _version("matplotlib"),
        "ipywidgets": _version("ipywidgets"),
        "jupyterlab": _version("jupyterlab"),
        "jupyterlab_widgets": _version("jupyterlab_widgets"),
        "cuda_available": cuda,
        "cuda_device_count": torch.cuda.device_count() if cuda else 0,
        "cuda_device_names": [torch.cuda.get_device_name(i)
                              for i in range(torch.cuda.device_count())] if cuda else [],
        "distributed_available": dist.is_available(),
        "nccl_available": bool(dist.is_available() and dist.is_nccl_available()),
        "gloo_available": bool(dist.is_available() and dist.is_gloo_available()),
        "device": chosen,
        "device_override": os.environ.get(ENV_VAR),
        "cpu_cores": _cpu_cores(),
        "torch_threads": torch.get_num_threads(),
        "ipywidgets_importable": widgets_ok,
        "cjk_font": _figure_font(),
    }
    if widgets_error:
        d["ipywidgets_error"] = widgets_error
    if device_error:
        d["device_error"] = device_error
    return d


def _figure_font() -> str | None:
    """The font Chinese figure text will use: the shipped one, then the system's (or None)."""
    try:
        from milktea import fonts
        return ", ".join(fonts.figure_fonts()) or None
    except ImportError:  # no matplotlib: no figures either
        return None


# What each report key is called on screen (the JSON keeps the keys; a package's name is its key).
LABELS = {
    "platform": N_("platform"), "executable": N_("interpreter"), "torch_cuda_build": N_("torch built for CUDA"),
    "cuda_available": N_("CUDA available"), "cuda_device_count": N_("CUDA devices"),
    "cuda_device_names": N_("CUDA device names"), "distributed_available": N_("torch.distributed available"),
    "nccl_available": N_("NCCL available"), "gloo_available": N_("gloo available"),
    "device": N_("device chosen"), "device_override": N_("device override (MILKTEA_DEVICE)"),
    "cpu_cores": N_("CPU cores"), "torch_threads": N_("torch threads"),
    "ipywidgets_importable": N_("ipywidgets imports"), "ipywidgets_error": N_("ipywidgets error"),
    "device_error": N_("device error"), "cjk_font": N_("font for Chinese in figures"),
}


def _advice(d: dict) -> list[str]:
    tips = []
    if not d.get("ipywidgets_importable"):
        tips.append(_("ipywidgets does not import: the course's interactive views will not show "
                      "(pip install 'ipywidgets>=8.1')."))
    elif d.get("jupyterlab") and not d.get("jupyterlab_widgets"):
        tips.append(_("jupyterlab_widgets is missing: JupyterLab will print 'Error displaying "
                      "widget' (pip install 'ipywidgets>=8.1' in the environment that runs lab)."))
    if d.get("torch_cuda_build") and not d.get("cuda_available"):
        tips.append(_("this torch is a CUDA build but sees no GPU: everything runs on the CPU."))
    if "cjk_font" in d and not d["cjk_font"]:
        tips.append(_("no font with Chinese glyphs: Chinese figure text will show boxes "
                      "(reinstall milktea, which ships one: pip install -e .)."))
    return tips


def format_report(d: dict) -> str:
    """Render `environment_report()` as aligned `key: value` lines, then any advice."""
    from milktea.tables import display_width, yes_no

    def show(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return yes_no(v)
        if isinstance(v, list):
            return ", ".join(map(str, v)) or "-"
        return str(v)

    labels = {k: _(LABELS[k]) if k in LABELS else k for k in d}
    width = max(display_width(label) for label in labels.values())
    lines = [_("milktea doctor")] + [f"  {labels[k]}{' ' * (width - display_width(labels[k]))}  {show(v)}"
                                     for k, v in d.items()]
    tips = _advice(d)
    if tips:
        lines += ["", _("advice:")] + [f"  - {t}" for t in tips]
    return "\n".join(lines)


def doctor(argv: list[str] | None = None) -> int:
    """`python -m milktea doctor [--json]`: print the environment report."""
    ap = argparse.ArgumentParser(prog="python -m milktea doctor",
                                 description="Print versions, devices, collectives and cores.")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    d = environment_report()
    print(json.dumps(d, indent=2) if args.json else format_report(d))
    return 0
