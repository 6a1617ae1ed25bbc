"""The head-office dashboard (live curves of a real multi-worker run, the what-if link
slider), the decision guide, and revealable answers."""
from __future__ import annotations

import html

from ..experiments import dashboard as exp
from ..experiments.tables import html_table
from ..plots import dashboard as plots
from ..i18n import N_, _
from .panel import new_figure, show_figure, show_html

LINKS = [("0.1 Gbit/s", 0.1), ("0.3 Gbit/s", 0.3), ("1 Gbit/s", 1.0), ("3 Gbit/s", 3.0), ("10 Gbit/s", 10.0),
         (N_("loopback (no emulation)"), 0.0)]


class Dashboard:
    """Head office's screen. `view` shows the live curves of the current run, a what-if
    slider that re-prices the last run on another link, and controls for the next run.

        dash = Dashboard(["dense", "torch-fp16", "sign"])
        dash.view              # display it
        result = dash.run()    # trains; the curves update while it does
    """

    def __init__(self, schemes=("dense", "torch-fp16", "torch-powersgd", "sign"), *, steps: int = 20,
                 link_gbit: float = 1.0, workers: int = 2, hidden: int = 16384, task: str = "digits",
                 redraw_s: float = 2.0):
        import ipywidgets as w
        self.schemes, self.workers, self.hidden, self.task = list(schemes), workers, hidden, task
        self.result, self.recorder = None, None
        self.header = w.HTML(_("<b>head office</b>: {status}").format(status=_("no run yet")))
        self.live_out = w.Output()
        self.link = w.Dropdown(options=[(_(label), v) for label, v in LINKS], value=link_gbit,
                                description=_("link"))
        self.steps = w.BoundedIntText(value=steps, min=3, max=1000, description=_("steps"))
        self.button = w.Button(description=_("run again"), button_style="primary", icon="play")
        self.button.on_click(lambda _button: self.run())
        self.whatif = w.FloatLogSlider(value=link_gbit or 1.0, base=10, min=-1, max=2.5, step=0.05,
                                       description=_("what if Gbit/s"), continuous_update=False,
                                       style={"description_width": "initial"})
        self.whatif_out = w.Output()
        self.whatif.observe(self._reprice, names="value")
        self._every = redraw_s
        self._draw()
        self._reprice()
        self.view = w.VBox([self.header, self.live_out, w.HBox([self.link, self.steps, self.button]),
                            self.whatif, self.whatif_out])

    def _ipython_display_(self):
        from IPython.display import display
        display(self.view)

    def _paint_while(self, done, every: float):
        """Redraw from a thread of its own while the run goes on, so the launcher's loop
        (which receives the records) never waits for matplotlib."""
        seen = -1
        while not done.wait(every):
            if self.recorder is not None and self.recorder.updates != seen:
                seen = self.recorder.updates
                self._draw()

    def _draw(self):
        series, status = self.recorder.snapshot() if self.recorder else ({}, _("no run yet"))
        fig = new_figure((11, 5.2))
        plots.live(series, fig=fig)
        show_figure(self.live_out, fig, dpi=72)
        self.header.value = _("<b>head office</b>: {status}").format(status=status)

    def run(self, schemes=None, **options):
        """Train every scheme with the controls' link and steps; update the view as records
        arrive; return the Comparison (also kept as `.result`)."""
        import threading
        schemes = list(schemes or self.schemes)
        link = self.link.value or None
        self.recorder = exp.Recorder(batch=options.get("batch", 32), workers=self.workers)
        self._draw()
        self.button.disabled = True
        done = threading.Event()
        painter = threading.Thread(target=self._paint_while, args=(done, self._every), daemon=True)
        painter.start()
        try:
            self.result = exp.live_run(schemes, self.recorder, workers=self.workers, link_gbit=link,
                                       steps=self.steps.value, hidden=self.hidden, task=self.task, **options)
        finally:
            done.set()
            painter.join()
            self.button.disabled = False
        self.recorder.current = _("all done")
        self._draw()
        self.header.value = _("<b>head office</b>: {n} schemes trained, {where}, {workers} workers").format(
            n=len(schemes), where=html.escape(self.result.where), workers=self.workers)
        self._reprice()
        return self.result

    def _reprice(self, _change=None):
        if self.result is None:
            show_html(self.whatif_out, _("<i>the what-if view appears after the first run</i>"
                                         " (link {gbit:.3g} Gbit/s)").format(gbit=self.whatif.value))
            return
        rows = exp.repriced(self.result, self.whatif.value)
        fig = new_figure((8, 0.38 * len(rows) + 1.2))
        plots.repriced(rows, self.whatif.value, ax=fig.subplots())
        fig.subplots_adjust(left=0.3, right=0.92, bottom=0.25, top=0.85)
        show_figure(self.whatif_out, fig, dpi=72)


def decision_guide(gbit: float = 10.0, params: float = 1e9, workers: int = 16, compute_s: float = 0.5,
                   codec_ns: dict | None = None):
    """Sliders for your cluster: link bandwidth, model size, workers, compute time per step;
    the guide's choice and the priced menu (milktea.advice.advise). `codec_ns` defaults to
    GPU-class memory-bound codecs; a dropdown switches to this machine's measured ones."""
    import ipywidgets as w
    from ..advice import advise, measured_codecs, memory_bound_codecs
    sources = {_("GPU-class, assumed (memory-bound at 2 TB/s)"): "gpu", _("this machine (measured)"): "here"}
    codecs = {"gpu": codec_ns or memory_bound_codecs(2000.0)}
    bw = w.FloatLogSlider(value=gbit, base=10, min=-2, max=3, step=0.1, description="Gbit/s",
                          continuous_update=False)
    size = w.FloatLogSlider(value=params, base=10, min=6, max=12, step=0.1, description=_("parameters"),
                            continuous_update=False)
    n = w.SelectionSlider(options=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=workers,
                          description=_("workers"), continuous_update=False)
    comp = w.FloatLogSlider(value=compute_s, base=10, min=-3, max=1, step=0.1, description=_("compute s"),
                            continuous_update=False)
    src = w.Dropdown(options=list(sources.items()), value="gpu", description=_("codecs"))
    out = w.Output()

    def update(_change=None):
        if src.value not in codecs:
            codecs[src.value] = measured_codecs()
        a = advise(size.value, n.value, bw.value, comp.value, codec_ns=codecs[src.value])
        cols = ["scheme", "collective", "R", "comm s", "codec s", "step s", "speedup"]
        reasons = "".join(f"<li>{html.escape(r)}</li>" for r in a.reasons)
        head = _("<b>choice: {choice}</b> for {params:.3g} parameters, {workers} workers, {gbit:.3g} Gbit/s, "
                 "{compute:.3g} s compute").format(choice=html.escape(a.choice), params=size.value, workers=n.value,
                                                   gbit=bw.value, compute=comp.value)
        show_html(out, f"<p>{head}</p><ul>{reasons}</ul>" + html_table(a.rows, cols))

    for c in (bw, size, n, comp, src):
        c.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([bw, size]), w.HBox([n, comp]), src, out])
    box.update = update
    return box


def reveal(body_html: str, title: str | None = None):
    """A collapsed accordion holding an answer (HTML), opened by a click."""
    import ipywidgets as w
    acc = w.Accordion(children=[w.HTML(body_html)], selected_index=None)
    acc.set_title(0, _("show the worked answer") if title is None else title)
    return acc
