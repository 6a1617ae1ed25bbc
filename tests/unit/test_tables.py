"""The terminal tables: text_table, and the two reports that print through it (the DDP
comparison and the memory benchmark), built here from made-up results (no processes)."""
import pytest

from milktea import cost
from milktea.bench import memory
from milktea.distributed.report import Comparison
from milktea.tables import text_table


def _column(text: str, heading: str) -> list[str]:
    """The cells under `heading`, as wide as its rule of dashes (so alignment shows)."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if heading in line and set(lines[n + 1]) <= {"-", " "})
    rule, last = lines[i + 1], lines[i].index(heading) + len(heading) - 1
    start, end = rule.rfind(" ", 0, last) + 1, rule.find(" ", last)
    return [line[start:end if end >= 0 else None] for line in lines[i + 2:]]


def test_text_table_formats_aligns_and_keeps_noted_rows():
    rows = [{"scheme": "int8", "R": 3.98, "note": ""}, {"scheme": "powersgd", "R": 120.0},
            {"scheme": "sign", "note": "crashed: out of memory"}]
    text = text_table(rows, ["scheme", "R"], formats={"R": "{:.1f}x"}, right=["R"], note="note")
    lines = text.splitlines()
    assert lines[0] == "scheme         R"
    assert lines[2:4] == ["int8        4.0x", "powersgd  120.0x"]       # numbers right-aligned
    assert lines[4] == "sign      crashed: out of memory"                # the note does not widen R
    assert text_table([], ["scheme", "R"]).splitlines() == ["scheme  R", "------  -"]
    assert text_table([{"a": None, "b": ""}], ["a", "b"], formats={"b": "{:.1f}"}).split("\n")[2] == ""


def test_text_table_refuses_columns_it_does_not_show():
    with pytest.raises(ValueError, match="not shown"):
        text_table([{"a": 1}], ["a"], formats={"b": "{}"})
    with pytest.raises(ValueError, match="not shown"):
        text_table([{"a": 1}], ["a"], right=["b"])


def _records(step_s, payload, ratio):
    return [{"step_s": step_s, "predicted_s": 0.8 * step_s, "payload_bytes": payload, "ratio": ratio,
             "comm_s": 1e-3, "compress_s": 5e-4, "decode_s": 5e-4, "loss": 0.5} for _ in range(6)]


def test_comparison_table_shows_every_figure_and_the_failed_scheme():
    results = [{"scheme": "dense", "label": "dense all-reduce", "records": _records(0.02, 4e6, 1.0),
                "final": {"loss": 0.4, "accuracy": 0.9512}, "params": 1_000_000},
               {"scheme": "topk", "label": "Top-1%+EF", "records": _records(0.005, 8e4, 50.0),
                "final": {"loss": 0.45, "accuracy": 0.93}, "params": 1_000_000},
               {"scheme": "sign", "label": "Sign+EF", "error": "WorkerError: rank 1 died"}]
    c = Comparison(results, cost.Link.gbit(1), {"forward_s": 1e-3, "backward_s": 2e-3, "optimizer_s": 5e-4},
                   "this machine", 2, "gloo", {"steps": 6, "batch": 32})
    text = c.table()
    assert "2 workers (gloo), 1M parameters, 6 steps of 32 examples" in text
    assert "forward 1.0 ms, backward 2.0 ms, optimizer 0.5 ms" in text
    assert _column(text, "step ms")[:2] == ["   20.0", "    5.0"]          # right-aligned
    assert _column(text, "speedup")[:2] == ["  1.00x", "  4.00x"]
    assert _column(text, "MB/step")[:2] == ["  4.000", "  0.080"]
    assert _column(text, "ratio")[:2] == [" 1.0x", "50.0x"]
    assert _column(text, "model err")[:2] == ["   +25.0%", "   +25.0%"]
    assert _column(text, "test acc")[:2] == ["  95.12%", "  93.00%"]
    from milktea import i18n
    with i18n.speaking("zh"):
        zh = c.table()
    assert "2 个工作节点（gloo），100 万参数" in zh and "每步 MB 数" in zh and "稠密全归约" in zh
    assert "\nSign+EF           not run (see note)\n" in text
    assert "note: Sign+EF: WorkerError: rank 1 died" in text


def test_comparison_bounds_the_fastest_scheme_by_the_measured_floor():
    def recs(step_s, comm_s):
        return [dict(r, predicted_comm_s=comm_s) for r in _records(step_s, 1e4, 10.0)]
    results = [{"scheme": "dense", "label": "dense all-reduce", "records": recs(0.040, 0.035),
                "final": {"loss": 0.4, "accuracy": 0.9}, "params": 1_000_000},
               {"scheme": "topk", "label": "Top-1%+EF", "records": recs(0.012, 0.001),
                "final": {"loss": 0.4, "accuracy": 0.9}, "params": 1_000_000},
               {"scheme": "sign", "label": "Sign+EF", "records": recs(0.016, 0.002),
                "final": {"loss": 0.4, "accuracy": 0.9}, "params": 1_000_000}]
    compute = {"forward_s": 1e-3, "backward_s": 4e-3, "optimizer_s": 1e-3}     # 6 ms
    args = (results, cost.Link.gbit(1), compute, "here", 2, "gloo", {"steps": 6, "batch": 8})
    assert Comparison(*args).floor_line() == ""                    # not measured: no claim
    text = Comparison(*args, floor_s=0.003).table()
    # the fastest (Top-1%+EF, 3.33x): 6 ms compute + 3 ms floor + 1 ms of link = 10 ms -> 4.00x
    assert "for Top-1%+EF's bytes 10 ms, 4.00x dense at most (measured 3.33x)" in text
    assert "takes 3.0 ms per step" in text


def test_memory_table_checks_targets_and_keeps_failed_schemes():
    def row(name, label, x, target=None, **extra):
        return {"scheme": name, "label": label, "model_bytes": 100e6, "target_x": target,
                "peak_bytes": {}, "over_ddp_x": x, **extra}
    rows = [row("plain DDP", "plain DDP (no hook)", {"glibc default": 0.0, "release": 0.0}, steps=3, repeat=3),
            row("kernels", "milktea's kernels (once per process)", {"glibc default": 1.3, "release": 1.25},
                with_kernels_x={"glibc default": 1.3, "release": 1.25}),
            row("topk", "Top-1%+EF", {"glibc default": 1.234, "release": 2.5}, 1.3,
                with_kernels_x={"glibc default": 2.534, "release": 3.75}),
            row("int8", "int8", {"glibc default": 12.5, "release": 0.5}, 0.6,
                with_kernels_x={"glibc default": 13.8, "release": 1.75}),
            row("sign", "Sign+EF", {}, 1.3, error="ScriptError: sign: torchrun exited with 1")]
    text = memory.table(rows, workers=2)
    assert "the model's 100.0 MB of float32), 2 ranks" in text
    assert '(median of 3 launches), first 3 steps;' in text and 'targets checked on "glibc default"' in text
    assert _column(text, "release")[:4] == ["  0.00x", "  1.25x", "  2.50x", "  0.50x"]
    # the scheme over plain DDP with the kernels, and with them (the kernels' row has it once)
    assert _column(text, "with kernels")[1:4] == ["", "       2.53x", "      13.80x"]
    assert _column(text, "target")[2:4] == ["<= 1.3x", "<= 0.6x"]
    # checked on glibc's defaults, what a user's script gets; the kernels' row has no target
    assert [line.split()[-1] for line in text.splitlines()[4:7]] == ["1.25x", "ok", "MISSED"]
    assert text.splitlines()[-1] == "Sign+EF                               not measured: ScriptError: sign: torchrun exited with 1"


def test_memory_run_with_torch_ops_starts_every_rank_without_kernels(monkeypatch):
    seen = []

    def fake_script(scheme, hidden, steps, workers, env=None):
        seen.append((scheme, dict(env or {})))
        peak = {"plain": 500e6, "kernels:sign": 510e6, "sign": 620e6}[scheme]
        return [{"peak_bytes": peak}] * workers
    monkeypatch.setattr(memory, "measure_script", fake_script)
    monkeypatch.delenv("MILKTEA_NUMBA", raising=False)
    rows = memory.run(("sign",), hidden=337_000, allocators=("glibc default",), repeat=1, torch_ops=True)
    assert [s for s, _ in seen] == ["plain", "kernels:sign", "sign"]
    assert all(env.get("MILKTEA_NUMBA") == "0" for _, env in seen)       # plain DDP too: one setting for all
    assert rows[1]["label"] == "milktea loaded, torch ops (once per process)"
    model = memory._model_bytes(337_000)
    assert rows[2]["over_ddp_x"]["glibc default"] == (620e6 - 510e6) / model
    assert rows[2]["with_kernels_x"]["glibc default"] == (620e6 - 500e6) / model
    seen.clear()
    rows = memory.run(("sign",), allocators=("glibc default",), repeat=1)
    assert all("MILKTEA_NUMBA" not in env for _, env in seen)
    assert rows[1]["label"] == "milktea's kernels (once per process)"
