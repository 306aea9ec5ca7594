"""The page's HTML builder escapes what it is given, and the curve's geometry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.coordinator.page.curve import HEIGHT, PAD, WIDTH, curve_svg, loss_curve
from core.coordinator.page.home import HOMEPAGE, INSTALL_GUIDE
from core.coordinator.page.html import Markup, el, escape, join
from core.coordinator.page.layout import paragraphs


def test_children_and_attributes_are_escaped() -> None:
    hostile = "\"'><script>alert(1)</script>&amp;"
    built = el("a", hostile, href=hostile, title=hostile, class_="x", data_figure=hostile)
    assert built == (
        '<a href="&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;" '
        'title="&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;" class="x" '
        'data-figure="&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;">'
        "&quot;&#x27;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;</a>"
    )


def test_markup_is_kept_and_nested_once() -> None:
    inner = el("b", "<i>")
    assert el("p", inner, " & ", 3, None, ["x", el("br")]) == "<p><b>&lt;i&gt;</b> &amp; 3x<br></p>"
    assert escape(inner) is inner
    assert join("<", Markup("<hr>")) == "&lt;<hr>"


def test_boolean_attributes_and_void_elements() -> None:
    assert el("p", "x", hidden=True) == "<p hidden>x</p>"
    assert el("p", "x", hidden=False, id=None) == "<p>x</p>"
    assert el("meta", name="viewport", charset="utf-8") == '<meta name="viewport" charset="utf-8">'
    with pytest.raises(ValueError, match="takes no content"):
        el("br", "x")


def test_names_that_are_not_names_are_refused() -> None:
    with pytest.raises(ValueError, match="element name"):
        el("p onclick=alert(1)")
    with pytest.raises(ValueError, match="attribute name"):
        el("p", **{"x onclick": "1"})


def test_paragraphs_split_at_blank_lines_and_keep_no_markup() -> None:
    text = "First <em>line</em>\nstill first\r\n\r\n\n\nSecond & last\n\n  "
    assert paragraphs(text) == (
        "<p>First &lt;em&gt;line&lt;/em&gt;\nstill first</p><p>Second &amp; last</p>"
    )
    assert paragraphs("") == ""


def test_the_curve_spans_the_plot() -> None:
    curve = loss_curve([(10.0, 4.0), (11.0, 3.0), (14.0, 2.0)])
    assert curve.points == 3
    # epoch 11 is a quarter of the way: 8 + 584 / 4
    assert curve.path == f"M{PAD:.1f} {PAD:.1f} L154.0 {HEIGHT / 2:.1f} L592.0 192.0"
    assert curve.labels() == {
        "curve_top": "4",
        "curve_bottom": "2",
        "curve_first": "epoch 10",
        "curve_last": "epoch 14",
    }
    assert 'data-points="3"' in curve_svg(curve)
    assert f'viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}"' in curve_svg(curve)


def test_a_curve_of_one_point_or_a_flat_one_shows() -> None:
    one = loss_curve([(5.0, 2.0)])
    assert one.path == f"M{WIDTH / 2:.1f} {HEIGHT / 2:.1f} h0.1"
    assert one.losses == (1.5, 2.5)
    flat = loss_curve([(1.0, 2.0), (2.0, 2.0)])
    assert flat.path == f"M{PAD:.1f} {HEIGHT / 2:.1f} L592.0 {HEIGHT / 2:.1f}"
    empty = loss_curve([])
    assert (empty.points, empty.path, empty.epochs) == (0, "", None)
    assert set(empty.labels().values()) == {""}


def test_the_install_links_point_at_barnraises_home_and_the_readmes_section() -> None:
    root = Path(__file__).resolve().parents[2]
    installers = (root / "packaging" / "installer_files.py").read_text()
    named = re.search(r'^HOMEPAGE = "([^"]+)"', installers, re.M)
    assert named
    assert named.group(1) == HOMEPAGE
    # GitHub's anchor of a heading: lower case, spaces to '-', punctuation dropped
    headings = re.findall(r"^## (.+)$", (root / "README.md").read_text(), re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
    assert INSTALL_GUIDE.removeprefix(HOMEPAGE + "#") in anchors
