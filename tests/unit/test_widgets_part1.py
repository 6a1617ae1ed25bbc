"""Every view of chapters 00-04 builds without a browser, and moving its slider changes
the numbers and the figure it shows (through the library, not widget code)."""
import ipywidgets as w
import pytest

from milktea.experiments.bottleneck import breakdown
from milktea.experiments.topk import topk_view
from milktea.widgets import (bottleneck_view, compression_view, ledger_view, phone_night_view,
                             topk_view_widget)

CASES = [  # (factory, slider to move, new value)
    (phone_night_view, "branches", 8),
    (bottleneck_view, "workers", 8),
    (compression_view, "share", 0.01),
    (topk_view_widget, "k", 500),
    (ledger_view, "night", 5),
]


def _png(view) -> bytes:
    data = bytes(view.image.value)
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "the figure is not a PNG"
    return data


@pytest.mark.parametrize("factory, name, value", CASES, ids=[c[0].__name__ for c in CASES])
def test_view_builds_and_its_slider_drives_the_output(factory, name, value):
    view = factory()
    assert isinstance(view, w.VBox)
    assert any(isinstance(c, (w.IntSlider, w.FloatLogSlider, w.SelectionSlider)) for c in view.controls.values())
    slider = view.controls[name]
    assert isinstance(slider, (w.IntSlider, w.FloatLogSlider, w.SelectionSlider))
    html, png = view.readout.value, _png(view)
    assert html and "Error" not in html
    slider.value = value
    assert view.readout.value != html, "moving the slider did not change the numbers"
    assert _png(view) != png, "moving the slider did not redraw the figure"


def test_bottleneck_view_shows_the_library_numbers():
    view = bottleneck_view(params=175e9, workers=64, gbit=100, compute=0.2)
    assert f"{breakdown(175e9, 64, 100, 0.2).waiting:.1%}" in view.readout.value
    view.controls["gbit"].value = 10.0
    assert f"{breakdown(175e9, 64, 10.0, 0.2).waiting:.1%}" in view.readout.value


def test_topk_view_shows_the_library_numbers():
    from milktea.experiments.gradients import layer_gradients
    view = topk_view_widget(k=40)
    v = topk_view(layer_gradients()["0.weight"], 40)
    assert f"{v.energy:.1%}" in view.readout.value and f"{v.packet_bytes:,} B" in view.readout.value


def test_compression_view_stacks_the_families():
    view = compression_view(share=0.1, bits=32)
    with pytest.raises(ValueError, match="share"):
        compression_view(share=0.5)
    assert "topk-10%" in view.readout.value and "int8" not in view.readout.value
    view.controls["bits"].value = 8
    assert "topk-10%+int8" in view.readout.value
    view.controls["sparsifier"].value = "randomk"
    assert "randomk-10%+int8" in view.readout.value


def test_ledger_view_reads_out_k_items():
    view = ledger_view(k=2)
    view.controls["k"].value = 3
    chosen = view.readout.value.split("read out tonight")[1].split("<b>")[1].split("</b>")[0]
    assert len(chosen.split(", ")) == 3


def test_a_refused_setting_is_reported_not_raised():
    view = ledger_view()
    view.controls["night"].max = 20            # past the nights the ledger holds
    view.controls["night"].value = 20
    assert "ValueError" in view.children[2].value
    view.controls["night"].value = 2
    assert view.children[2].value == ""


def test_views_reject_bad_arguments():
    import torch
    with pytest.raises(ValueError, match="2-D"):
        topk_view_widget(layer=torch.randn(10))
