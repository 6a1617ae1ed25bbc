"""One place that picks the device: CUDA when there is one, else the CPU."""
from __future__ import annotations

import os

import torch


def pick_device(prefer: str | None = None) -> torch.device:
    """CUDA if available, else CPU; `prefer` or MILKTEA_DEVICE overrides."""
    choice = prefer or os.environ.get("MILKTEA_DEVICE")
    if choice:
        dev = torch.device(choice)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {choice!r} was asked for but CUDA is not available; use 'cpu'")
        return dev
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
