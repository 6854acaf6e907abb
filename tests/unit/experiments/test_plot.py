"""The delta histogram SVG: correct counts, valid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from training.experiments.plot import delta_histogram_svg, histogram_counts


def test_counts_on_a_symmetric_range() -> None:
    counts, span = histogram_counts([-1.0, -0.1, 0.0, 0.0, 0.1, 0.5, 1.0], bins=5)
    assert span == 1.0
    # Bins of 0.4 from -1: [-1,-.6) [-.6,-.2) [-.2,.2) [.2,.6) [.6,1]; 1.0 falls in the last.
    assert counts == [1, 0, 4, 1, 1]


def test_svg_is_xml_with_one_bar_per_non_empty_bin() -> None:
    svg = delta_histogram_svg([-0.2, 0.0, 0.1, 0.1, 0.3], title="a & b", xlabel="delta", bins=7)
    root = ET.fromstring(svg)
    bars = [
        r
        for r in root.iter("{http://www.w3.org/2000/svg}rect")
        if r.find("{http://www.w3.org/2000/svg}title") is not None
    ]
    titles = sorted(r.find("{http://www.w3.org/2000/svg}title").text for r in bars)  # type: ignore[union-attr]
    assert len(bars) == 4
    assert titles[0].startswith("1 queries") and any(t.startswith("2 queries") for t in titles)
    assert "a &amp; b" in svg
