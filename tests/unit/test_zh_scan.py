"""The scan of executed Chinese notebooks (tests/course/zh_scan.py), on small notebooks built
here: it finds English prose, scientific notation, "3.0x", half-width punctuation after
Chinese and missing glyphs in every kind of output, names the cell, and leaves alone what a
Chinese page may show (scheme and library names, units, code, math)."""
import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("zh_scan", ROOT / "tests" / "course" / "zh_scan.py")
zh_scan = importlib.util.module_from_spec(_spec)
sys.modules["zh_scan"] = zh_scan
_spec.loader.exec_module(zh_scan)

v4 = nbformat.v4


def _nb(*outputs, cell_id="ch07-06", widgets=None):
    cell = v4.new_code_cell("pass", id=cell_id)
    cell.outputs = list(outputs)
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("English markdown source is not output", id="md"), cell])
    if widgets:
        nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": widgets}}
    return nb


def _stdout(text):
    return v4.new_output("stream", name="stdout", text=text)


def _display(data):
    return v4.new_output("display_data", data=data)


def _kinds(nb):
    return [(f.cell, f.where, f.kind, f.found) for f in zh_scan.scan(nb)]


def test_clean_chinese_output_passes():
    nb = _nb(_stdout("Top-K 保留 1% 的分量，int8 量化；每步 12.5 ms，线路上 3.2 MB（gloo，2 个 CPU 核）\n"
                     "加速比：3.0 倍，PowerSGD 秩 4，Gbit/s\n"),
             _display({"text/markdown": "用 `step_ms` 一列和 $\\text{R}=N/K$ 计算，见 milktea/cost.py。",
                       "text/plain": "<IPython.core.display.Markdown object>"}),
             _display({"text/html": "<table><tr><th>方案</th><th>加速比</th></tr><tr><td>Top-1%+EF</td>"
                                    "<td>2.7×</td></tr></table>"}),
             _display({"image/png": "iVBOR", "text/plain": "<Figure size 640x480 with 1 Axes>"}))
    assert zh_scan.scan(nb) == []


@pytest.mark.parametrize("output, where", [
    (_stdout("已训练 5 种方案，emulated 1 Gbit/s link\n"), "stdout"),
    (_display({"text/markdown": "**Diverging:** 损失上升"}), "text/markdown"),
    (_display({"text/html": "<table><tr><th>step ms</th><th>needs</th></tr></table>"}), "text/html"),
    (v4.new_output("execute_result", data={"text/plain": "PhoneNight(64 branches, 头部 14.8 天)"}, execution_count=1),
     "text/plain"),
])
def test_english_prose_is_found_with_its_cell(output, where):
    found = zh_scan.scan(_nb(output))
    english = [f for f in found if f.kind == "English"]
    assert english and all(f.cell == "ch07-06" and f.where == where for f in found)
    assert "ch07-06" in str(english[0]) and english[0].found in str(english[0])


def test_glosses_keyword_reprs_and_model_names_are_not_prose():
    nb = _nb(_stdout("回环接口（loopback）很快；Digits(hidden=32, seed=0) 与 BERT-large\n"))
    assert zh_scan.scan(nb) == []
    assert [f.found for f in zh_scan.scan(_nb(_stdout("（后端：gloo；求和正确：True）\n")))] == ["True"]


def test_printed_source_code_is_not_prose():
    code = ("def _hook(state, bucket):  # no annotations: DDP checks them\n    return state.hook(bucket)\n"
            "state = CompressionState(model, compressor, **options)\nmodel.register_comm_hook(state, _hook)\n")
    assert zh_scan.scan(_nb(_stdout(code))) == []
    assert [f.found for f in zh_scan.scan(_nb(_stdout("dense bytes    1204264\n")))] == ["dense bytes"]
    method = ("    def hook(self, bucket):\n        if self.momentum is not None:\n            x = 1\n        else:\n"
              "            buf, last = bucket.buffer(), bucket.is_last()\n        for p in ps:\n            try:\n"
              "                pass\n            except ValueError as e:\n                raise\n")
    assert zh_scan.scan(_nb(_stdout(method))) == []
    assert [f.found for f in zh_scan.scan(_nb(_stdout("if the shop closes, for example\n")))] == \
        ["if the shop closes", "for example"]


def test_table_values_and_booleans_are_prose_too():
    nb = _nb(_display({"text/html": "<table><tr><th>类别</th><th>有偏</th></tr>"
                                    "<tr><td>sparsify</td><td>True</td></tr></table>"}))
    assert [f.found for f in zh_scan.scan(nb)] == ["sparsify", "True"]


def test_number_formats_and_punctuation():
    nb = _nb(_stdout("编解码每步 4e+03 ms，快 1.14x; 在快速链路上.\n"))
    kinds = {(k, found) for _c, _w, k, found in _kinds(nb)}
    assert ("scientific", "4e+03") in kinds and ("times-x", "1.14x") in kinds
    assert ("half-width", ";") in kinds and ("half-width", ".") in kinds
    assert zh_scan.scan(_nb(_stdout("相对误差 0.25，版本 3.11.2，低于 1e-3，参数 2.56e+07\n")))[0].found == "2.56e+07"


def test_stderr_counts_for_glyphs_only():
    nb = _nb(v4.new_output("stream", name="stderr",
                           text="UserWarning: some library warning in English\n"
                                "UserWarning: Glyph 26799 (\\N{CJK UNIFIED IDEOGRAPH-68AF}) missing from font(s) DejaVu Sans.\n"))
    assert _kinds(nb) == [("ch07-06", "stderr", "glyph", "missing from font")]


def test_widget_labels_and_texts_belong_to_the_cell_that_shows_them():
    view = _display({"application/vnd.jupyter.widget-view+json": {"model_id": "box1", "version_major": 2},
                     "text/plain": "VBox(children=(...))"})
    widgets = {
        "box1": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_s1", "IPY_MODEL_h1"]}},
        "s1": {"model_name": "FloatSliderModel", "state": {"description": "what if Gbit/s", "value": 1.0}},
        "h1": {"model_name": "HTMLModel", "state": {"value": "<b>已训练</b> 2 个工作节点，run again"}},
        "d1": {"model_name": "DropdownModel", "state": {"_options_labels": ["本机（实测）", "a GPU"]}},
    }
    found = zh_scan.scan(_nb(view, widgets=widgets))
    assert {(f.cell, f.found) for f in found} == {("ch07-06", "what if"), ("ch07-06", "run again"),
                                                  ("widget d1", "a")}


def test_error_outputs_are_read():
    nb = _nb(v4.new_output("error", ename="ValueError", evalue="ratio must be > 0", traceback=[]))
    assert [f.found for f in zh_scan.scan(nb)] == ["ratio must be"]


def test_the_modules_own_examples():
    import doctest
    assert doctest.testmod(zh_scan).failed == 0


def test_figure_text_is_read_with_its_cell():
    """tests/executed.py keeps each figure's text in its cell's metadata: legends, ticks and titles
    are scanned like printed text."""
    nb = _nb()
    nb.cells[1].metadata["figure_texts"] = [["稠密方案", "符号压缩+EF", "0.5"], ["accuracy", "R=78x"]]
    assert _kinds(nb) == [("ch07-06", "figure 2", "English", "accuracy"), ("ch07-06", "figure 2", "times-x", "78x")]


def test_font_fallbacks_in_stderr_are_found():
    line = "findfont: Failed to find font weight bold for Milktea Sans SC, now using 400.\n"
    found = zh_scan.scan(_nb(v4.new_output("stream", name="stderr", text=line)))
    assert [(f.kind, f.where) for f in found] == [("font", "stderr")]


def test_recorder_writes_each_figures_text(tmp_path, monkeypatch):
    """The kernel-side recorder (tests/figure_texts.py): every figure saved appends its text."""
    import io
    import json

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    record = tmp_path / "texts.jsonl"
    monkeypatch.setenv("MILKTEA_FIGURE_TEXTS", str(record))
    spec = importlib.util.spec_from_file_location("figure_texts", ROOT / "tests" / "figure_texts.py")
    recorder = importlib.util.module_from_spec(spec)
    from matplotlib.backend_bases import FigureCanvasBase
    monkeypatch.setattr(FigureCanvasBase, "print_figure", FigureCanvasBase.print_figure)  # undone after the test
    spec.loader.exec_module(recorder)
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([0, 1], label="稠密方案")
    ax.set_title("梯度")
    ax.legend()
    fig.savefig(io.BytesIO(), format="png")
    texts = json.loads(record.read_text(encoding="utf-8").splitlines()[-1])
    assert "梯度" in texts and "稠密方案" in texts and "0.0" in texts   # title, legend, a tick label
