"""What a reader of the Chinese edition sees at run time, scanned for English and for boxes.

`scan(nb)` takes an executed notebook (an nbformat object; executing it is someone else's job)
and returns one `Finding` per problem in what its outputs show:

- English prose: a Latin word that is not on the allow-list (scheme, library and unit names,
  a few abbreviations) and not code (identifiers with _ . / digits, CamelCase, inline code,
  math, URLs, file names) in stream output, text/plain, text/markdown, HTML (tables) and the
  widgets' labels and texts (the notebook's widget state);
- number formats a Chinese book does not use: `4e+03` (scientific notation for a large
  number; `1e-05` is fine), `3.0x` (write
  倍 or ×), half-width , ; : . ? ! right after a Chinese character;
- the text of every figure a cell drew (titles, axis labels, tick labels, legends,
  annotations), which tests/executed.py keeps in the cell's metadata ("figure_texts");
- matplotlib's missing-glyph warnings (a figure drew boxes) and its font fallbacks
  ("findfont: Failed to find font weight bold ..."), anywhere in the outputs.

Each finding names the cell (its id) and quotes the string, so a failure says what to fix::

    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", id="c1")])
    >>> nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="已训练 5 种方案, emulated link\\n")]
    >>> [str(f) for f in scan(nb)]
    ["cell c1, stdout: English 'emulated link' in '已训练 5 种方案, emulated link'", "cell c1, stdout: half-width ',' after Chinese in '已训练 5 种方案, emulated link'"]
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

# Words that stay as they are in Chinese text: scheme and library names, units, abbreviations.
ALLOW = frozenset(w.lower() for w in """
    Top-K TopK Random-K RandomK QSGD PowerSGD DGC TernGrad signSGD SignSGD EF SGD Adam AdamW
    LAMB Nesterov DiLoCo Transformer ZeRO FSDP DDP NCCL gloo MPI GPU GPUs CPU CPUs CUDA NVLink InfiniBand
    RDMA TCP IP PyTorch torch torchrun numpy NumPy numba milktea JupyterLab Jupyter ipywidgets
    matplotlib Python scikit-learn sklearn GPT MLP BERT ResNet LSTM SVD QR Gram-Schmidt
    fp32 fp16 bf16 bfloat16 float32 float16 float64 int8 int4 int32 int64 uint8 delta8 varint
    bitmap absmax zlib bz2 lzma gzip
    MB GB kB KB TB B ms us µs ns s h min Gbit Mbit Gbit/s Mbit/s GB/s MB/s FLOP FLOPs FLOP/s
    TFLOP TFLOPs PFLOP Hz GHz MHz
    K N k n d r R s t p x y g w e T H P Q M m i j
    vs nan NaN inf Inf OK
    digits DGC's A/B Linux macOS Windows Debian Ubuntu Chrome Chromium iid tensor
    1-bit BERT-large GPT-2 XL ResNet-50 Milktea Sans SC WenQuanYi Micro Hei Noto CJK
    alpha beta gamma sqrt log exp max min argmax
    id ids dtype
    HSDP qgZ qwZ ZeRO++ ZeRO-1 ZeRO-2 ZeRO-3
    Agarwal
""".split())   # the last line: authors a sentence cites by name

_CJK = "\u3400-\u4dbf\u4e00-\u9fff"
# Not prose: inline code, math, URLs, file names and paths, keyword arguments in a repr
# (hidden=32), a repr's class name and a lone first argument (Packet(quant, ...)), a scheme
# or model name with a number in it (1-bit Adam, GPT-2 small), and an English gloss in full-width brackets after a Chinese term (回环接口（loopback）).
_NOT_PROSE = [re.compile(p, re.S) for p in (
    rf"(?<=[{_CJK}])（[^（）{_CJK}]*）", r"\b\w+=", r"\b[A-Z][A-Za-z]*\((?:[a-z_][\w-]*(?=[,)]))?",
    r"\b\d+-bit\b", r"\bGPT-2 (?:small|medium|large)\b",
    r"```.*?```", r"`[^`]*`", r"\$\$.*?\$\$", r"(?<!\\)\$[^$\n]+\$", r"\\\(.*?\\\)", r"\\\[.*?\\\]",
    r"https?://\S+", r"\S+\.(?:py|ipynb|json|csv|md|txt|pt|otf|png)\b", r"(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+",
)]
# A token that is code, not a word: has _ . digits or inner capitals, or is a call like f(...)
_CODE = re.compile(r"^(?:\w*[_\d]\w*|\w+(?:\.\w+)+|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}\w*)$")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]")
_WORDS = re.compile(r"(?:[A-Za-z][\w'’./%+-]*)(?:[ \t]+[A-Za-z][\w'’./%+-]*)*")
_SCIENTIFIC = re.compile(r"\d(?:\.\d+)?[eE]\+?\d+")  # large numbers: 1.38e+03 (1e-05 is fine)
_TIMES_X = re.compile(r"(?<![\d.])\d+(?:\.\d+)?x(?![A-Za-z0-9])")
_HALF_WIDTH = re.compile(rf"(?<=[{_CJK}])\s*([,;:?!]|\.(?![\d.]))|([,;:?!])(?=\s*[{_CJK}])")
_GLYPH = re.compile(r"missing from (?:current )?font|does not have a glyph", re.I)
_FINDFONT = re.compile(r"findfont: [^\n]*")
_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S | re.I)


@dataclass(frozen=True)
class Finding:
    cell: str
    where: str   # stdout, stderr, text/plain, text/markdown, text/html, widget <name>
    kind: str    # English, scientific, times-x, half-width, glyph, font
    found: str
    text: str    # the line (or label) it was found in

    def __str__(self):
        what = {"English": f"English {self.found!r}", "scientific": f"scientific notation {self.found!r}",
                "times-x": f"{self.found!r} (write 倍 or ×)", "half-width": f"half-width {self.found!r} after Chinese",
                "glyph": "missing glyph", "font": "matplotlib's font fallback"}[self.kind]
        return f"cell {self.cell}, {self.where}: {what} in {self.text[:160]!r}"


def english_words(text: str, allow=ALLOW) -> list[str]:
    """Runs of English words in `text` that are prose, not code or allowed names.

    >>> english_words("Top-K 保留 1% 的分量（int8、fp16）；`step_ms` 一列")
    []
    >>> english_words("bf16 需要：nothing in practice")
    ['nothing in practice']
    """
    for pattern in _NOT_PROSE:
        text = pattern.sub(" ", text)
    runs = []
    for m in _WORDS.finditer(text):
        words = m.group(0).split()
        prose = [i for i, w in enumerate(words) if _is_prose(w, allow)]
        if prose:  # from the first prose word to the last, allowed names between them kept
            runs.append(" ".join(words[prose[0]:prose[-1] + 1]).strip(".,;:!?"))
    return runs


def _is_prose(token: str, allow) -> bool:
    """A word of prose: letters, not code, not an allowed name (Top-1%+EF: each part is one)."""
    for part in re.split(r"[+/]", token):
        part = part.strip(".,;:!?'’\"()[]{}%-")
        if not part or re.search(r"\d", part) or part.lower() in allow or _CODE.match(part):
            continue
        pieces = _WORD.findall(part)
        if pieces and not all(p.lower() in allow for p in pieces):
            return True
    return False


_CODE_LINE = re.compile(r"^\s*(?:def |class |return\b|import |from \S+ import |@|#|if |elif |else:|for |while |with |"
                        r"try:|except\b|finally:|raise\b|yield\b|assert |pass$|break$|continue$)|^\s*[\w.\[\]'\", ]+\s*=[^=]|"
                        r"^\s*[\w.]+\(.*\)\s*(?:#.*)?$")


def _is_code(line: str) -> bool:
    """A line of Python printed as it is (a function's source shown by the chapter)."""
    if re.search(f"[{_CJK}]", line) or not _CODE_LINE.search(line):
        return False
    import ast
    code = line.strip()
    try:
        ast.parse(code + "\n    pass" if code.endswith(":") else code)   # a block's first line, with a body
    except SyntaxError:   # a clause that needs the block before it, a def with annotations cut short, ...
        return code.startswith(("def ", "class ", "#", "elif ", "else:", "try:", "except", "finally:"))
    return True


def check_text(text: str, cell: str, where: str, allow=ALLOW) -> list[Finding]:
    """Every finding in one output text, line by line (lines of printed Python code skipped)."""
    found = []
    for line in text.splitlines():
        if not line.strip() or _is_code(line):
            continue
        if _GLYPH.search(line):
            found.append(Finding(cell, where, "glyph", _GLYPH.search(line).group(0), line.strip()))
            continue
        if _FINDFONT.search(line):
            found.append(Finding(cell, where, "font", _FINDFONT.search(line).group(0), line.strip()))
            continue
        found += [Finding(cell, where, "English", run, line.strip()) for run in english_words(line, allow)]
        found += [Finding(cell, where, "scientific", m.group(0), line.strip()) for m in _SCIENTIFIC.finditer(line)]
        found += [Finding(cell, where, "times-x", m.group(0), line.strip()) for m in _TIMES_X.finditer(line)]
        found += [Finding(cell, where, "half-width", m.group(1) or m.group(2), line.strip())
                  for m in _HALF_WIDTH.finditer(line)]
    return found


def html_text(markup: str) -> str:
    """The text an HTML output shows: tags dropped, cells and rows on their own lines."""
    markup = re.sub(r"</t[dh]>|<br\s*/?>|</tr>|</p>|</div>|</li>", "\n", markup, flags=re.I)
    return html.unescape(_TAGS.sub(" ", markup))


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _output_texts(output):
    """(where, text) pairs of one output, as the reader sees them."""
    kind = output.get("output_type")
    if kind == "stream":
        yield output.get("name", "stream"), _text(output.get("text", ""))
    elif kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        if "text/markdown" in data:
            yield "text/markdown", _text(data["text/markdown"])
        elif "text/html" in data:
            yield "text/html", html_text(_text(data["text/html"]))
        elif "text/plain" in data and "image/png" not in data and \
                "application/vnd.jupyter.widget-view+json" not in data:
            yield "text/plain", _text(data["text/plain"])
    elif kind == "error":
        yield "error", f"{output.get('ename')}: {output.get('evalue')}"


# Widget model fields a reader sees (labels, texts, choices, tooltips)
_WIDGET_FIELDS = ("description", "tooltip", "placeholder", "_options_labels", "value", "button_style_label")
_TEXT_WIDGETS = ("HTMLModel", "LabelModel", "HTMLMathModel", "TextareaModel", "TextModel")


def widget_texts(nb):
    """(model id, where, text) of every label and text in the notebook's saved widget state."""
    state = (nb.get("metadata", {}).get("widgets", {})
             .get("application/vnd.jupyter.widget-state+json", {}).get("state", {}))
    for model_id, model in state.items():
        name, fields = model.get("model_name", ""), model.get("state", {})
        for field in _WIDGET_FIELDS:
            if field not in fields or (field == "value" and name not in _TEXT_WIDGETS):
                continue
            values = fields[field] if isinstance(fields[field], list) else [fields[field]]
            for v in values:
                if isinstance(v, str) and v.strip():
                    text = html_text(v) if name.startswith("HTML") and field == "value" else v
                    yield model_id, f"widget {name} {field}", text


def scan(nb, allow=ALLOW) -> list[Finding]:
    """Every finding in an executed Chinese notebook's outputs and widget state."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        cid = cell.get("id", str(index))
        for output in cell.get("outputs", []):
            for where, text in _output_texts(output):
                if where == "stderr":  # third-party warnings and progress bars: glyphs and fonts only
                    found += [f for f in check_text(text, cid, where, allow) if f.kind in ("glyph", "font")]
                else:
                    found += check_text(text, cid, where, allow)
        for number, texts in enumerate(cell.get("metadata", {}).get("figure_texts", []), 1):
            for text in texts:
                found += check_text(text, cid, f"figure {number}", allow)
    owners = _widget_owners(nb)
    for model_id, where, text in widget_texts(nb):
        found += check_text(text, owners.get(model_id, f"widget {model_id[:8]}"), where, allow)
    return found


def _widget_owners(nb) -> dict[str, str]:
    """model id -> the id of the cell whose output shows it (for the views a cell displays)."""
    owners = {}
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            if view and "model_id" in view:
                owners[view["model_id"]] = cell.get("id", str(index))
    state = (nb.get("metadata", {}).get("widgets", {})
             .get("application/vnd.jupyter.widget-state+json", {}).get("state", {}))
    todo = list(owners)
    while todo:  # a view's children (sliders in a box, ...) belong to the same cell
        parent = todo.pop()
        for child in state.get(parent, {}).get("state", {}).get("children", []):
            child = str(child).removeprefix("IPY_MODEL_")
            if child not in owners:
                owners[child] = owners[parent]
                todo.append(child)
    return owners
