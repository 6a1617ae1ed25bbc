"""Every widget of chapters 05-07 builds headless, and moving its slider changes its output."""
import pytest
import torch

pytest.importorskip("ipywidgets")


def _outputs(view):
    import ipywidgets as w
    found = []

    def walk(x):
        if isinstance(x, w.Output):
            found.append(x)
        for c in getattr(x, "children", ()):
            walk(c)
    walk(view)
    assert found, "the view has no Output"
    return [o.outputs for o in found]


def _sliders(view):
    import ipywidgets as w
    found = []

    def walk(x):
        if isinstance(x, (w.IntSlider, w.FloatSlider, w.SelectionSlider, w.FloatLogSlider)):
            found.append(x)
        for c in getattr(x, "children", ()):
            walk(c)
    walk(view)
    assert found, "the view has no slider"
    return found


def _move(slider):
    """Set a slider to another of its values."""
    import ipywidgets as w
    if isinstance(slider, w.SelectionSlider):
        opts = [o[1] if isinstance(o, tuple) else o for o in slider.options]
        slider.value = next(o for o in opts if o != slider.value)
    else:
        slider.value = slider.max if slider.value != slider.max else slider.min


def check_view(view):
    before = _outputs(view)
    assert all(before), "an Output is empty before any interaction"
    for s in _sliders(view):
        old, value = _outputs(view), s.value
        _move(s)
        assert _outputs(view) != old, f"moving {s.description!r} changed nothing"
        s.value = value        # each slider is tried from the view's starting state
    return view


def test_snapping():
    from milktea.widgets.quantization import snapping
    torch.manual_seed(0)
    check_view(snapping(torch.randn(3000) * 0.01))


def test_overlap_explorer():
    from milktea.experiments.overlap import Profile
    from milktea.widgets.engineering import overlap_explorer
    check_view(overlap_explorer(Profile.uniform(16, 1_000_000, 0.1), forward_s=0.05))


def test_decision_guide():
    from milktea.widgets.dashboard import decision_guide
    view = check_view(decision_guide(gbit=10, params=1e9, workers=16, compute_s=0.5))
    html = view.children[-1].outputs[0]["data"]["text/html"]
    assert "choice:" in html and "<table>" in html


def test_dashboard_before_a_run():
    from milktea.widgets.dashboard import Dashboard
    d = Dashboard(["dense", "sign"], steps=3)
    check_view(d.view)
    assert "no run yet" in d.header.value


def test_reveal_is_collapsed():
    from milktea.widgets.dashboard import reveal
    acc = reveal("<b>42</b>")
    assert acc.selected_index is None and acc.children[0].value == "<b>42</b>"
