"""A small character-level GPT on Python source text, and its corpus: the model behind the
transformer task (`milktea.tasks.CharGPT`) of the simulator, DDP training and the comparisons.

The corpus ships with every Python: a fixed list of standard-library modules' source files.
Where a distribution strips those sources, the text falls back to milktea's own `.py` files
(they ship wherever milktea can be imported; see `load_corpus`).

    >>> model = GPT(GPTConfig(VOCAB, block=32, n_layer=2, n_head=4, n_embd=96))
    >>> x, y = windows(encode(load_corpus().val), 32)   # windows of 32 characters, y = x shifted by one
    >>> tuple(x.shape[1:]), tuple(model(x[:4]).shape)
    ((32,), (4, 32, 98))

The model follows nanoGPT: token + position embeddings, pre-LayerNorm blocks of causal
self-attention and a GELU MLP, a final LayerNorm and an untied output layer. Its attention
is written out (scores, causal mask, softmax) rather than fused, so that `torch.func.vmap`
batches it over simulated workers and the course can look inside.
"""
from __future__ import annotations

import math
import os
import sysconfig
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_int, check_number

# Long-lived pure-Python modules (present from 3.8 to 3.13 at least), read in this order.
STDLIB_FILES = ("abc.py", "bisect.py", "calendar.py", "colorsys.py", "contextlib.py", "copy.py", "csv.py",
                "fnmatch.py", "fractions.py", "functools.py", "heapq.py", "queue.py", "random.py", "shlex.py",
                "statistics.py", "string.py", "textwrap.py", "timeit.py", "weakref.py")
MIN_CHARS = 50_000          # less text than this is not a corpus to train on

# A fixed vocabulary, the same whatever the text: 0 = any other character (non-ASCII),
# then tab, newline and the 95 printable ASCII characters.
CHARS = "\t\n" + "".join(chr(c) for c in range(32, 127))
VOCAB = 1 + len(CHARS)      # 98
_LOOKUP = np.zeros(128, dtype=np.int64)
_LOOKUP[[ord(c) for c in CHARS]] = np.arange(1, VOCAB)


def encode(text: str) -> torch.Tensor:
    """Characters -> token ids (int64); characters outside the vocabulary become 0.

    >>> encode("def f():").tolist()
    [71, 72, 73, 3, 73, 11, 12, 29]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    ids = np.where(codes < 128, _LOOKUP[np.minimum(codes, 127)], 0)
    return torch.from_numpy(ids)


def decode(ids) -> str:
    """Token ids -> text (0 shows as '?').

    >>> decode(encode("x = 1"))
    'x = 1'
    """
    table = "?" + CHARS
    return "".join(table[int(i)] for i in torch.as_tensor(ids).reshape(-1))


@dataclass(frozen=True)
class Corpus:
    """The text, cut once per file: the first `1 - val_share` of each file trains, the rest
    is held out. `source` says where it came from ("stdlib" or "milktea")."""
    source: str
    files: tuple[str, ...]
    train: str
    val: str

    def __repr__(self) -> str:
        return (f"Corpus({self.source}, {len(self.files)} files, train {len(self.train):,} chars, "
                f"val {len(self.val):,} chars)")


def stdlib_dir() -> str:
    """Where this interpreter keeps its standard library's source."""
    return sysconfig.get_paths()["stdlib"]


def _milktea_files() -> tuple[str, list[str]]:
    root = os.path.dirname(os.path.abspath(__file__))
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".py")]
    return root, sorted(found)


def _read(root: str, names) -> list[tuple[str, str]]:
    out = []
    for name in names:
        path = os.path.join(root, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                out.append((name, f.read()))
    return out


@lru_cache(maxsize=8)
def load_corpus(source: str = "auto", val_share: float = 0.1) -> Corpus:
    """The training text: `source="stdlib"` reads `STDLIB_FILES` from this interpreter's
    standard library (a ValueError if fewer than MIN_CHARS of them are there, as on
    distributions that ship only bytecode); `"milktea"` reads this package's own sources
    (always present, but they change with the library's version); `"auto"` (default) is
    stdlib when found, else milktea with a warning. Both are Python source, so the model
    and its gradients look alike either way; a corpus kept in the repository would be one
    more file to keep in step for a case the package's own code already covers.

    >>> c = load_corpus()
    >>> len(c.val) < len(c.train)
    True
    """
    if source not in ("auto", "stdlib", "milktea"):
        raise ValueError(f"source must be 'auto', 'stdlib' or 'milktea', got {source!r}")
    if not isinstance(val_share, float) or not 0 < val_share < 0.5:
        raise ValueError(f"val_share must be a float in (0, 0.5), got {val_share!r}")
    if source in ("auto", "stdlib"):
        root = stdlib_dir()
        texts = _read(root, STDLIB_FILES)
        total = sum(len(t) for _, t in texts)
        if total < MIN_CHARS:
            msg = (f"the standard library's sources are missing in {root} (found {len(texts)} of "
                   f"{len(STDLIB_FILES)} files, {total:,} characters); install them (on Debian/Ubuntu: "
                   f"the libpython3.X-stdlib package, or a python.org build) or use source='milktea'")
            if source == "stdlib":
                raise ValueError(msg)
            warnings.warn(msg + "; using milktea's own sources instead", stacklevel=2)
            source = "milktea"
        else:
            source = "stdlib"
    if source == "milktea":
        root, names = _milktea_files()
        texts = _read(root, names)
    train, val = [], []
    for _, text in texts:
        cut = len(text) - int(len(text) * val_share)
        train.append(text[:cut])
        val.append(text[cut:])
    return Corpus(source, tuple(n for n, _ in texts), "\n".join(train), "\n".join(val))


def windows(ids: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut a token stream into non-overlapping examples: x [n, block], y [n, block] (x shifted by one).

    >>> x, y = windows(torch.arange(10), 4)
    >>> x.tolist(), y.tolist()
    ([[0, 1, 2, 3], [4, 5, 6, 7]], [[1, 2, 3, 4], [5, 6, 7, 8]])
    """
    n = (len(ids) - 1) // block
    if n < 1:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than block + 1 = {block + 1}")
    x = ids[:n * block].view(n, block)
    y = ids[1:n * block + 1].view(n, block)
    return x.clone(), y.clone()


# --- the model ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GPTConfig:
    vocab: int = VOCAB
    block: int = 32         # context length T
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 96        # C; each head is C / n_head wide

    def __post_init__(self):
        for name in ("vocab", "block", "n_layer", "n_head", "n_embd"):
            check_int(getattr(self, name), name, 1)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v, for q, k, v of shape [..., T, d]: what
    `F.scaled_dot_product_attention(q, k, v, is_causal=True)` computes, written out."""
    T, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)                  # [..., T, T]
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))                # position t sees 0..t only
    return scores.softmax(-1) @ v                                     # [..., T, d]


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)      # q, k, v in one matrix
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)                  # 3 x [B, T, C]
        # [B, T, C] -> [B, heads, T, C / heads]
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v)                              # [B, heads, T, C / heads]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))     # heads side by side again


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd), SelfAttention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.n_embd), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids [B, T] -> next-token logits [B, T, vocab].

    >>> GPT(GPTConfig(n_layer=1, n_embd=32))(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 98])
    """

    def __init__(self, cfg: GPTConfig = GPTConfig()):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.n_embd)     # one row per character
        self.wpe = nn.Embedding(cfg.block, cfg.n_embd)     # one row per position
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                # GPT-2's init; the projections into the residual stream shrink with depth
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"idx must be token ids of shape [batch, time] (int64), got {idx.dtype} "
                             f"{tuple(idx.shape)}; one sequence: idx[None]")
        T = idx.shape[1]
        if T > self.cfg.block:
            raise ValueError(f"sequence of {T} tokens is longer than the context ({self.cfg.block})")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))   # [B, T, C]
        for block in self.blocks:
            x = block(x)                                                      # [B, T, C]
        return self.lm_head(self.ln_f(x))                                     # [B, T, vocab]

    def __repr__(self) -> str:
        c = self.cfg
        n = sum(p.numel() for p in self.parameters())
        return f"GPT(layers={c.n_layer}, heads={c.n_head}, width={c.n_embd}, context={c.block}, params={n:,})"


@torch.no_grad()
def sample(model: GPT, prompt: str = "def ", length: int = 80, temperature: float = 1.0,
           seed: int = 0) -> str:
    """Continue `prompt` by `length` characters, drawn from the model's softmax at `temperature`
    (0: the most likely character each time)."""
    check_int(length, "length", 0)
    check_number(temperature, "temperature", 0)
    gen = torch.Generator().manual_seed(seed)
    p = next(model.parameters())
    idx = encode(prompt or "\n").to(p.device)[None]
    for _ in range(length):
        logits = model(idx[:, -model.cfg.block:])[0, -1].float().cpu()
        if temperature == 0:
            nxt = logits.argmax()
        else:
            nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=gen)[0]
        idx = torch.cat([idx, nxt.to(idx.device).view(1, 1)], dim=1)
    return decode(idx[0])
