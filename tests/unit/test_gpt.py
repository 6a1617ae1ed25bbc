"""The character-level GPT task: its model against references, its corpus, and training."""
import doctest
import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

import milktea.gpt as gpt
from milktea.tasks import CharGPT
from milktea.gpt import GPT, GPTConfig, causal_attention, decode, encode, load_corpus, windows
from milktea.simulate import simulate

SMALL = dict(n_layer=1, n_head=2, n_embd=32, block=16)


@pytest.fixture(scope="module")
def task():
    return CharGPT(**SMALL, max_val_windows=64)


def test_docstring_examples():
    result = doctest.testmod(gpt, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 5


def test_attention_matches_scaled_dot_product_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(causal_attention(q, k, v), ref, rtol=1e-12, atol=1e-12)
    # causal: changing the future leaves the past alone
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 1.0
    v2[..., 4:, :] -= 3.0
    torch.testing.assert_close(causal_attention(q, k2, v2)[..., :4, :], ref[..., :4, :])


def _reference_forward(sd, cfg, idx):
    """The same network from its weights, in float64, with PyTorch's fused attention and
    LayerNorm and GELU written out."""
    sd = {k: v.double() for k, v in sd.items()}

    def ln(x, p):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * sd[p + ".weight"] + sd[p + ".bias"]

    def lin(x, p, bias=True):
        return x @ sd[p + ".weight"].T + (sd[p + ".bias"] if bias else 0)

    B, T = idx.shape
    C, H = cfg.n_embd, cfg.n_head
    x = sd["wte.weight"][idx] + sd["wpe.weight"][:T]
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        h = lin(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.reshape(B, T, H, C // H).permute(0, 2, 1, 3) for t in h.split(C, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + lin(a, p + "attn.c_proj")
        h = lin(ln(x, p + "ln_2"), p + "mlp.c_fc")
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
        x = x + lin(h, p + "mlp.c_proj")
    return lin(ln(x, "ln_f"), "lm_head", bias=False)


def test_forward_matches_a_float64_recomputation():
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=32, block=12)
    torch.manual_seed(1)
    model = GPT(cfg)
    with torch.no_grad():                      # move away from the init (zero biases, unit LayerNorm)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, cfg.vocab, (3, 12))
    got = model(idx)
    ref = _reference_forward(model.state_dict(), cfg, idx)
    assert got.shape == (3, 12, cfg.vocab) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)
    model64 = GPT(cfg).double()
    model64.load_state_dict(model.state_dict())
    torch.testing.assert_close(model64(idx), ref, rtol=1e-10, atol=1e-10)
    # a shorter sequence gives the same logits as the first positions of a longer one (causal)
    torch.testing.assert_close(model(idx[:, :5]), got[:, :5], rtol=1e-5, atol=1e-5)


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(TypeError, match="n_layer"):
        GPTConfig(n_layer=1.5)
    with pytest.raises(ValueError, match="longer than the context"):
        GPT(GPTConfig(n_layer=1, n_embd=16, block=4))(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, time\]"):
        GPT(GPTConfig(n_layer=1, n_embd=16, block=4))(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="str"):
        encode(b"bytes")
    tiny = GPT(GPTConfig(n_layer=1, n_embd=16, block=4))
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        gpt.sample(tiny, length=1, temperature=-1.0)
    with pytest.raises(TypeError, match="temperature must be a number"):
        gpt.sample(tiny, length=1, temperature="hot")


def test_encode_decode_and_the_fixed_vocabulary():
    text = "def f(x):\n\treturn x ~ 1"
    assert decode(encode(text)) == text
    assert encode("é€x").tolist() == [0, 0, encode("x").item()]      # outside the vocabulary: 0
    assert int(encode("".join(gpt.CHARS)).max()) == gpt.VOCAB - 1
    x, y = windows(torch.arange(11), 3)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]] and torch.equal(y, x + 1)


def test_the_corpus_is_found_offline_and_split_the_same_way_every_time():
    c = load_corpus("stdlib")
    assert c.source == "stdlib" and c.files == gpt.STDLIB_FILES       # every listed file ships here
    assert len(c.train) > 200_000 and 0.05 < len(c.val) / (len(c.train) + len(c.val)) < 0.15
    load_corpus.cache_clear()
    again = load_corpus("stdlib")
    assert again is not c and again == c                                # read anew: the same split
    # per file: the first 90% trains, the last 10% is held out
    with open(os.path.join(gpt.stdlib_dir(), "textwrap.py"), encoding="utf-8") as f:
        text = f.read()
    cut = len(text) - int(0.1 * len(text))
    assert text[:cut] in c.train and text[cut:] in c.val and text[:cut] not in c.val
    a, b = CharGPT(**SMALL), CharGPT(**SMALL)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_val, b.y_val)


def test_missing_stdlib_sources_give_a_clear_error_or_the_documented_fallback(monkeypatch, tmp_path):
    (tmp_path / "abc.py").write_text("x = 1\n")                # stripped: almost nothing left
    monkeypatch.setattr(gpt, "stdlib_dir", lambda: str(tmp_path))
    load_corpus.cache_clear()
    try:
        with pytest.raises(ValueError, match="sources are missing.*source='milktea'"):
            load_corpus("stdlib")
        with pytest.warns(UserWarning, match="milktea's own sources"):
            c = load_corpus("auto")
        assert c.source == "milktea" and "gpt.py" in c.files and len(c.train) > gpt.MIN_CHARS
        assert "class CharGPT(Task)" in c.train + c.val
        with pytest.raises(ValueError, match="source must be"):
            load_corpus("wikipedia")
    finally:
        load_corpus.cache_clear()


def test_shards_cover_the_training_windows_once(task):
    shards = task.shards(7)
    sizes = [len(y) for _, y in shards]
    assert sum(sizes) == len(task.y_train) and max(sizes) - min(sizes) <= 1
    rows = torch.cat([x for x, _ in shards])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, task.x_train.tolist()))
    assert all(torch.equal(y[:, :-1], x[:, 1:]) for x, y in shards)       # targets: the next character
    out = task.model()(shards[0][0][:3])
    assert task.loss(out, shards[0][1][:3]).shape == (3,)


def test_vmap_gradients_over_workers_equal_separate_backward_passes(task):
    model = task.model()
    params = {n: p.detach() for n, p in model.named_parameters()}
    xb = torch.stack([x[:3] for x, _ in task.shards(4)])
    yb = torch.stack([y[:3] for _, y in task.shards(4)])

    def loss_of(p, x, y):
        return task.loss(functional_call(model, p, (x,)), y).mean()

    batched = vmap(grad(loss_of), in_dims=(None, 0, 0))(params, xb, yb)
    for w in range(4):
        model.zero_grad()
        task.loss(model(xb[w]), yb[w]).mean().backward()
        for n, p in model.named_parameters():
            torch.testing.assert_close(batched[n][w], p.grad, rtol=1e-4, atol=1e-6)


def test_initial_loss_is_that_of_a_uniform_guess(task):
    ev = task.evaluate(task.model())
    assert abs(ev["loss"] - math.log(gpt.VOCAB)) < 0.05
    assert ev["perplexity"] == pytest.approx(math.exp(ev["loss"])) and 0 <= ev["accuracy"] <= 1


def test_loss_falls_under_dense_sgd_in_the_simulator(task):
    h = simulate(task, None, workers=4, steps=40, batch=4, lr=0.1, momentum=0.9, progress=False,
                 eval_every=20, device="cpu")
    loss = h.evals["loss"]
    assert h.diverged_at is None and loss[0] > 4.4
    assert loss[-1] < 3.4 and loss[-1] < loss[1] < loss[0], loss
    assert h.final("perplexity") < 30


def test_loss_falls_under_adam(task):
    model = task.model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = task.shard(0, 1)
    g = torch.Generator().manual_seed(0)
    before = task.evaluate(model)["loss"]
    for _ in range(40):
        idx = torch.randint(len(y), (16,), generator=g)
        opt.zero_grad()
        task.loss(model(x[idx]), y[idx]).mean().backward()
        opt.step()
    after = task.evaluate(model)
    assert after["loss"] < before - 1.2, (before, after)
    assert after["accuracy"] > 0.2
