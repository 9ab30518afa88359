"""The report is the kit's, not the study's (issue 37, item 5): each test performs the attack for real.

A study's report.py that the reader trusted for the command (``kit report RUN --trust-study-code``) returns
a section whose paragraph, title, caption, cells and id carry markup, and figures whose SVG carries a script,
event attributes, foreignObject with HTML, a style sheet that hides tables, external references, a DOCTYPE
with entities and javascript: URLs. The written page is parsed: nothing the study wrote is live markup,
its figure is an image the kit encoded from the drawing alone, the kit's own sections and tables are all
there, every study section says whose it is, and every HTML page the kit writes carries its
Content-Security-Policy. The sanitiser (kit.report.svg_safe) is also tested construct by construct, and on
the kit's own matplotlib figures (which must lose nothing but their metadata).
"""

from __future__ import annotations

import base64
import re
import shutil
import signal
import struct
import subprocess
import textwrap
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _crafted import golden_copy, plant_study
from markupsafe import Markup
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ReportError
from kit.report.html import content_security_policy
from kit.report.sections import KIT_IDS, safe_id, study_section, text
from kit.report.svg_safe import MAX_SVG_BYTES, PNG_SIGNATURE, png_data_url, sanitize_svg

MARKUP = "<b>All claims reproduced</b><script>alert(1)</script>"
EVIL_ID = 'x" onmouseover="alert(1)'
EVIL_SVG = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE svg [
  <!ENTITY lol "lol">
  <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY xxe SYSTEM "file:///etc/passwd">
]>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 100 100"
     onload="alert('svg-onload')">
  <script>alert('svg-script')</script>
  <style>table{display:none} h2{visibility:hidden} path{stroke: #123456}</style>
  <foreignObject width="100" height="100"><div xmlns="http://www.w3.org/1999/xhtml"><b>Verdict: all claims
    reproduced</b><script>alert('fo')</script></div></foreignObject>
  <image href="http://attacker.example/pixel.png" width="1" height="1"/>
  <use href="http://attacker.example/sprite.svg#x"/>
  <a xlink:href="javascript:alert('link')"><rect width="10" height="10"/></a>
  <rect width="5" height="5" style="fill: url(http://attacker.example/p.svg#f)"/>
  <path id="drawing" d="M 10 10 L 90 90" stroke="#0072b2" onclick="alert('click')"/>
  <set attributeName="onmouseover" to="alert('set')"/>
  <animate attributeName="href" to="javascript:alert('animate')"/>
</svg>"""
# the same DOCTYPE, now used: the entity is never expanded, so the figure is refused whole
ENTITY_SVG = ('<!DOCTYPE svg [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
              '<svg xmlns="http://www.w3.org/2000/svg"><text>&xxe;</text></svg>')
FORBIDDEN_IN_SVG = ("<script", "onload", "onclick", "onmouseover", "foreignObject", "claims", "attacker.example",
                    "javascript", "table", "display", "visibility", "<set", "<animate", "DOCTYPE", "ENTITY", "<a ",
                    "<a>", "passwd")


def tiny_png() -> bytes:
    """A real 1x1 PNG (signature, IHDR, IDAT, IEND with their CRCs)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


def hostile_report_py() -> str:
    return textwrap.dedent(f"""
        EVIL_SVG = {EVIL_SVG!r}
        ENTITY_SVG = {ENTITY_SVG!r}
        MARKUP = {MARKUP!r}

        def sections(manifest, analysis):
            return [
                {{"id": {EVIL_ID!r}, "title": "<h1>Verdict</h1>" + MARKUP, "origin": None, "kit": True,
                  "paragraphs": [MARKUP, "<style>table{{display:none}}</style>"],
                  "tables": [{{"caption": "<script>alert('caption')</script>", "columns": ["<i>col</i>", "n"],
                              "rows": [["<img src=x onerror=alert(1)>", 1.5], [MARKUP, None]]}}],
                  "figures": [{{"id": "claims", "title": "<script>alert('title')</script>", "svg": EVIL_SVG}},
                              {{"id": "xxe", "title": "entities", "svg": ENTITY_SVG}},
                              {{"id": "png", "title": "a PNG", "png_b64": {base64.b64encode(tiny_png()).decode()!r}}},
                              {{"id": "fake", "title": "not a PNG",
                               "png_b64": {base64.b64encode(b"<svg onload=alert(1)>").decode()!r}}}]}},
                {{"id": "findings", "title": "Findings", "paragraphs": ["The study's own findings."]}},
            ]
        """)


class Page(HTMLParser):
    """Every element (tag, attributes) in order, the text a reader sees, and the text of each <style>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.styles: list[str] = []
        self._in: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag in ("style", "script"):
            self._in = tag
            if tag == "style":
                self.styles.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.styles[-1] += data
        elif self._in is None:
            self.texts.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.texts).split())

    def ids(self) -> list[str]:
        return [a["id"] for _, a in self.tags if "id" in a]


def assert_no_live_markup(page: Page) -> None:
    """No script, no event attribute, no javascript: URL, no inline style, no inline SVG, no external load."""
    names = [t for t, _ in page.tags]
    for bad in ("script", "svg", "foreignobject", "iframe", "object", "embed", "link", "base", "form", "b", "i"):
        assert bad not in names, f"<{bad}> element in the page"
    for tag, attrs in page.tags:
        for k, v in attrs.items():
            assert not k.startswith("on"), (tag, k, v)
            assert k != "style", (tag, k, v)  # the policy would refuse it; the kit writes none
            assert "javascript:" not in re.sub(r"\s", "", v).lower(), (tag, k, v)
        if tag == "img":
            assert re.match(r"^data:image/(svg\+xml|png);base64,[A-Za-z0-9+/=]+$", attrs["src"]), attrs["src"][:80]
        if tag == "a":
            assert attrs.get("href", "#").startswith(("#", "../")) or "://" not in attrs["href"], attrs


def assert_policy(page: Page) -> None:
    """The first element of <head> is the kit's policy, which allows exactly the page's own style sheets."""
    names = [t for t, _ in page.tags]
    head = names.index("head")
    tag, attrs = page.tags[head + 1]
    assert tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy", page.tags[head + 1]
    assert attrs["content"] == content_security_policy(*page.styles)
    for directive in ("default-src 'none'", "script-src 'none'", "object-src 'none'", "base-uri 'none'",
                      "form-action 'none'", "img-src data:"):
        assert directive in attrs["content"].split("; ")
    assert "unsafe-inline" not in attrs["content"] and "unsafe-hashes" not in attrs["content"]


def embedded(html: str, figure_id: str) -> str | None:
    """The decoded image of the figure ``figure_id`` (None: the figure shows no image)."""
    m = re.search(rf'<figure id="{re.escape(figure_id)}">(.*?)</figure>', html, re.S)
    assert m, f"no figure {figure_id}"
    img = re.search(r'<img src="data:image/[a-z+]+;base64,([A-Za-z0-9+/=]+)"', m.group(1))
    return base64.b64decode(img.group(1)).decode("utf-8", "replace") if img else None


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """The golden run whose study/ holds the hostile report.py, reported with the reader's consent; (run, the
    page, the study's digest)."""
    tmp = tmp_path_factory.mktemp("hostile-report")
    run = golden_copy(tmp / "run")
    digest = plant_study(run, {"report.py": hostile_report_py()})
    res = CliRunner().invoke(app, ["report", str(run), "--trust-study-code", "--format", "html,latex"])
    assert res.exit_code == 0, (res.output, res.exception)
    yield run, (run / "report" / "index.html").read_text(encoding="utf-8"), digest


def test_a_trusted_report_py_cannot_forge_the_report(hostile: tuple[Path, str, str]) -> None:
    _, html, digest = hostile
    page = Page(html)
    assert_no_live_markup(page)
    assert_policy(page)
    # the study's markup is there, as text a reader sees, never as elements
    assert MARKUP in page.text and "<style>table{display:none}</style>" in page.text
    assert "&lt;b&gt;All claims reproduced&lt;/b&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert('caption')</script>" in page.text and "<img src=x onerror=alert(1)>" in page.text
    assert [t for t, _ in page.tags].count("h1") == 1  # the kit's title; the study's "<h1>" is text
    # ids: unique; the study's own rewritten, never breaking out of the attribute nor taking the kit's
    ids = page.ids()
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert "study-x-onmouseover-alert-1" in ids and "study-findings" in ids and "study-claims" in ids
    for kit_section in ("claims", "findings", "figures", "hypotheses", "threats", "goal", "descriptives",
                        "environment", "deviations", "reproduce", "raw"):
        m = re.search(rf'<section id="{kit_section}">(.*?)</section>', html, re.S)
        assert m, kit_section
        assert "Written by the study" not in m.group(1)
    # the kit's own tables are all there (the study's sheet hides none: it is text)
    for kit_section in ("hypotheses", "threats", "metrics", "descriptives", "environment", "raw"):
        m = re.search(rf'<section id="{kit_section}">(.*?)</section>', html, re.S)
        assert m and "<table" in m.group(1), kit_section
    assert html.index('<section id="claims">') < html.index('<section id="study-x-onmouseover-alert-1">')
    # every study section says whose it is, right under its heading
    origin = f"Written by the study's report.py (the run's copy of its study folder, which you trusted, digest " \
             f"{digest[:12]}), not by the kit."
    for sid in ("study-x-onmouseover-alert-1", "study-findings"):
        m = re.search(rf'<section id="{sid}">\s*<h2>[^<]*</h2>\s*<p class="study-origin small muted">([^<]*)</p>', html)
        assert m and m.group(1).replace("&#39;", "'") == origin, sid
    assert html.count('class="study-origin') == 2


def test_the_studys_figure_is_an_image_of_its_drawing_alone(hostile: tuple[Path, str, str]) -> None:
    _, html, _ = hostile
    svg = embedded(html, "study-claims")
    assert svg is not None
    for bad in FORBIDDEN_IN_SVG:
        assert bad not in svg, bad
    assert '<path id="drawing" d="M 10 10 L 90 90" stroke="#0072b2"></path>' in svg  # the drawing survives
    assert "path{stroke: #123456}" in svg  # and its own style rule on drawing elements
    m = re.search(r'<figure id="study-claims">.*?<figcaption>(.*?)</figcaption>', html, re.S)
    assert m and "The kit removed from this figure" in m.group(1) and "element script ×1" in m.group(1)
    # a figure that needs its entities is refused whole: nothing of /etc/passwd, a note in its place
    assert embedded(html, "xxe") is None
    xxe = re.search(r'<figure id="xxe">(.*?)</figure>', html, re.S)
    assert xxe and "Figure not shown" in xxe.group(1) and "root:" not in html
    # PNG bytes become a data: URL the kit wrote; bytes that are not PNG are refused
    png = re.search(r'<figure id="png"><img src="([^"]+)"', html)
    assert png and png.group(1) == png_data_url(tiny_png())
    assert embedded(html, "fake") is None and "no PNG signature" in html


def test_latex_keeps_the_studys_text_escaped_and_says_whose_it_is(hostile: tuple[Path, str, str]) -> None:
    run, _, digest = hostile
    tex = (run / "report" / "latex" / "report.tex").read_text(encoding="utf-8")
    assert r"\textless{}b\textgreater{}All claims reproduced\textless{}/b\textgreater{}" in tex and "<b>" not in tex
    assert "not by the kit" in tex and digest[:12] in tex
    assert r"Figure ``entities'' is not shown" in tex  # refused, never said to be in the HTML report
    figs = run / "report" / "latex" / "figures"
    assert (figs / "study-x-onmouseover-alert-1-png.png").read_bytes() == tiny_png()
    assert not list(figs.glob("*fake*"))


def test_every_html_page_the_kit_writes_carries_the_policy(hostile: tuple[Path, str, str], tmp_path: Path) -> None:
    """The report, `kit compare --html`, `kit history --html` and the reproduce-all summary: the policy first in
    <head>, nothing live, every figure an image (the compare and history pages over the same planted run)."""
    from kit.reproduce import STATE_DIR, ClaimRow, StudyRow, Summary, write_summary

    run, html, _ = hostile
    pages = {"report": html}
    cmp = tmp_path / "compare.html"
    res = CliRunner().invoke(app, ["compare", str(run), "--arms", "tensorflow,pytorch", "--html", str(cmp)])
    assert res.exit_code == 0, (res.output, res.exception)
    pages["compare"] = cmp.read_text(encoding="utf-8")
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        shutil.copytree(run, runs / name, ignore=shutil.ignore_patterns("report"))
    hist = tmp_path / "history.html"
    res = CliRunner().invoke(app, ["history", str(runs), "--no-cache", "--html", str(hist)])
    assert res.exit_code == 0, (res.output, res.exception)
    pages["history"] = hist.read_text(encoding="utf-8")
    claim = ClaimRow("C1", MARKUP, MARKUP, "kind", "<i>1</i>", "2", "replicated", MARKUP, (MARKUP,))
    summary = Summary(MARKUP, {"replicated": 1}, (MARKUP,), "host", "0", "quick", None, "now",
                      (StudyRow("s1", MARKUP, "quick", "complete", MARKUP, 1.0, "run", "../run/report/index.html",
                                ("pytorch",), MARKUP, "", (claim,)),))
    (tmp_path / "summary" / STATE_DIR).mkdir(parents=True)
    written = write_summary(summary, tmp_path / "summary")
    pages["reproduce-all summary"] = written[0].read_text(encoding="utf-8")
    for name, text_ in pages.items():
        page = Page(text_)
        assert_policy(page)
        assert_no_live_markup(page)
        assert len(page.styles) == 1, name
    assert MARKUP in Page(pages["reproduce-all summary"]).text
    assert "<img class=plot src=\"data:image/svg+xml;base64," in pages["history"]
    assert pages["report"].count('<img src="data:image/svg+xml;base64,') >= 5  # the kit's figures too


# -- the sanitiser, construct by construct -----------------------------------------------------------------------

SVG = '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 10">{}</svg>'


@pytest.mark.parametrize("body, gone", [
    ("<script>alert(1)</script>", "alert"),
    ("<script><![CDATA[alert(1)]]></script>", "alert"),
    ('<g onload="alert(1)"><path d="M0 0"/></g>', "onload"),
    ('<path d="M0 0" ONCLICK="alert(1)"/>', "alert"),
    ('<foreignObject><div xmlns="http://www.w3.org/1999/xhtml">forged</div></foreignObject>', "forged"),
    ("<style>table{display:none}</style>", "table"),
    ("<style>*{display:none}</style>", "display"),
    ("<style>@import url(http://attacker.example/x.css);</style>", "attacker"),
    ("<style>path{fill:url(http://attacker.example/x.svg#p)}</style>", "attacker"),
    ("<style>path{fill:red;} /* c */</style>", "fill"),
    ("<style>path{background:u\\72l(http://attacker.example/x)}</style>", "attacker"),
    ("<style>svg{behavior:url(x.htc)}</style>", "behavior"),
    ('<path d="M0 0" style="fill: expression(alert(1))"/>', "expression"),
    ('<path d="M0 0" style="fill: image-set(\'http://attacker.example/x.png\' 1x)"/>', "attacker"),
    ('<path d="M0 0" fill="url(http://attacker.example/x.svg#p)"/>', "attacker"),
    ('<image href="http://attacker.example/x.png"/>', "attacker"),
    ('<image xlink:href="javascript:alert(1)"/>', "javascript"),
    ('<image href="data:image/svg+xml;base64,PHN2Zy8+"/>', "data:image/svg"),
    ('<use href="http://attacker.example/s.svg#x"/>', "attacker"),
    ('<use xlink:href="data:image/svg+xml,%3Csvg/%3E#x"/>', "data:"),
    ('<a href="https://attacker.example/"><path d="M0 0"/></a>', "attacker"),
    ('<set attributeName="href" to="javascript:alert(1)"/>', "javascript"),
    ('<animate attributeName="onload" to="alert(1)"/>', "alert"),
    ('<animateTransform attributeName="transform" type="rotate" to="90"/>', "animateTransform"),
    ('<iframe xmlns="http://www.w3.org/1999/xhtml" src="http://attacker.example/"/>', "attacker"),
    ('<path d="M0 0" xml:base="http://attacker.example/"/>', "attacker"),
    ('<path id="a&quot; onmouseover=&quot;x" d="M0 0"/>', "onmouseover"),
    ('<text>&lt;script&gt;alert(1)&lt;/script&gt;</text>', "<script"),
])
def test_the_sanitiser_removes_each_construct(body: str, gone: str) -> None:
    clean = sanitize_svg(SVG.format(body), "test")
    assert gone not in clean.text, clean.text
    assert clean.text.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    if "<text>" not in body:
        assert clean.dropped, clean  # said, counted


def test_the_sanitiser_keeps_drawings_and_local_references() -> None:
    png = base64.b64encode(tiny_png()).decode()
    body = ('<defs><clipPath id="c"><rect width="5" height="5"/></clipPath>'
            '<linearGradient id="g"><stop offset="0" stop-color="#fff"/></linearGradient>'
            '<path id="m" d="M 0 0 L 1 1"/></defs><style>*{stroke-linejoin: round; stroke-linecap: butt}</style>'
            '<g clip-path="url(#c)" style="fill: url(#g); stroke: #0072b2"><use xlink:href="#m" x="1" y="2"/>'
            f'<image xlink:href="data:image/png;base64,\n{png[:20]}\n{png[20:]}" width="1" height="1"/>'
            '<text x="1" y="2" font-family="\'DejaVu Sans\', sans-serif">a &lt; b</text></g>')
    clean = sanitize_svg(SVG.format(body), "test")
    assert clean.dropped == ()
    for kept in ('clip-path="url(#c)"', 'style="fill: url(#g); stroke: #0072b2"', 'xlink:href="#m"',
                 f'xlink:href="data:image/png;base64,{png}"', "*{stroke-linejoin: round; stroke-linecap: butt}",
                 ">a &lt; b</text>", 'stop-color="#fff"'):
        assert kept in clean.text, kept


@pytest.mark.parametrize("svg, why", [
    ('<!DOCTYPE svg [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><svg xmlns="http://www.w3.org/2000/svg">'
     "<text>&xxe;</text></svg>", "not well-formed"),
    ("<!DOCTYPE a><!DOCTYPE b><svg xmlns='http://www.w3.org/2000/svg'/>", "declarations"),
    ("<svg xmlns='http://www.w3.org/2000/svg'><!ENTITY x 'y'></svg>", "declarations"),
    ("<svg xmlns='http://www.w3.org/2000/svg'>\x00</svg>", "NUL"),
    ("<html><script>alert(1)</script></html>", "not an <svg>"),
    ("<svg xmlns='http://www.w3.org/2000/svg'><path></svg>", "not well-formed"),
    ("not xml at all", "not well-formed"),
])
def test_the_sanitiser_refuses_what_it_cannot_read_safely(svg: str, why: str) -> None:
    with pytest.raises(ReportError, match=why) as err:
        sanitize_svg(svg, "figure x")
    assert err.value.where == "figure x" and err.value.fix


def test_billion_laughs_floods_and_a_huge_figure_are_handled_at_once() -> None:
    """The entities are never expanded (the declaration is cut out, their use is not well-formed): refused under
    an alarm instead of eating the memory; a figure over the cap is refused before it is parsed; floods that would
    make a pattern scan quadratic (unterminated comments, url( url( ..., a long sheet, a million elements) are
    refused or dropped in linear time. No clock is asserted: the alarm is a hang guard only (a pass takes about a
    second; an expansion or a quadratic scan of these inputs would take hours, far past it), and what proves each
    defence is the refusal or the drop it reports."""
    lol = "".join(f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
    bomb = f'<!DOCTYPE svg [<!ENTITY l0 "lol">{lol}]><svg xmlns="http://www.w3.org/2000/svg"><text>&l9;</text></svg>'

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("the sanitiser expanded the entities")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(ReportError, match="not well-formed"):
            sanitize_svg(bomb)
        with pytest.raises(ReportError, match="larger than"):
            sanitize_svg("<svg xmlns='http://www.w3.org/2000/svg'>" + " " * MAX_SVG_BYTES + "</svg>")
        with pytest.raises(ReportError, match="unterminated comment"):
            sanitize_svg("<!--" * 2_000_000)
        with pytest.raises(ReportError, match="more than 200000 elements"):
            sanitize_svg(SVG.format("<a/>" * 2_000_000))
        flood = sanitize_svg(SVG.format(f"<path d='M0 0' fill='{'url(' * 1_000_000}'/><style>{'a' * 3_000_000}</style>"))
        assert "url(" not in flood.text and "aaa" not in flood.text and len(flood.dropped) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("figure", [
    "<path d='M0 0' style='fill: url(http://127.0.0.1:9/beacon-style'/>",
    "<path d='M0 0' fill=\"url('http://127.0.0.1:9/beacon-attr#x\"/>",
    "<style>path{fill:url(http://127.0.0.1:9/beacon-sheet}</style><path d='M0 0'/>",
    "<path d='M0 0' fill='url(#ok) url(http://127.0.0.1:9/x'/>",
])
def test_an_unclosed_url_never_leaves_an_external_reference(figure: str) -> None:
    """CSS error recovery reads an unclosed url( (or string) to the end of the value, so an external URL without
    its closing parenthesis is an external load when the figure is opened on its own: it must not pass."""
    out = sanitize_svg(SVG.format(figure))
    assert "127.0.0.1" not in out.text and "beacon" not in out.text and out.dropped


def test_doctype_and_sheet_floods_are_handled_in_linear_time() -> None:
    """Inputs a retried pattern would scan in quadratic time (many '<!DOCTYPE a' heads, a sheet of rules without
    braces under the sheet cap): refused or dropped at once, under an alarm."""
    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("the sanitiser scanned a flood in quadratic time")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(ReportError, match="declarations"):
            sanitize_svg("<!DOCTYPE a" * 400_000)
        for sheet in ("a" * 60_000, "a{" * 30_000, "}" * 60_000, "a{b:c}" * 10_000 + "a"):
            out = sanitize_svg(SVG.format(f"<style>{sheet}</style><path d='M0 0'/>"))
            assert "<path" in out.text and "aaaa" not in out.text
        kept = sanitize_svg("<?xml version='1.0'?><!DOCTYPE svg [<!ENTITY x \"]>\">]>" + SVG.format("<path d='M0 0'/>"))
        assert "<path" in kept.text and "ENTITY" not in kept.text
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_png_bytes_are_checked() -> None:
    assert png_data_url(tiny_png()).startswith("data:image/png;base64,iVBORw0KGgo")
    with pytest.raises(ReportError, match="no PNG signature"):
        png_data_url(b"<svg onload=alert(1)/>")
    with pytest.raises(ReportError, match="larger than"):
        png_data_url(PNG_SIGNATURE + b"\0" * (8 << 20))


def test_the_kits_own_figures_lose_nothing_but_their_metadata() -> None:
    """The same re-writing on matplotlib's SVG (kit.report.figures): every element and style kept, so figures
    look as they did; text in the figure from a run (an arm named with markup) stays text."""
    from kit.report import figures

    values = [{"metric": "time_s", "phase": "train", "arm": arm, "value": 1.0 + 0.1 * i + 0.01 * k, "config_id": "c",
               "position": 2 * k + i, "warmup": k == 0, "status": "ok"}
              for i, arm in enumerate(("pytorch", "<script>x</script>")) for k in range(6)]
    arms = ["pytorch", "<script>x</script>"]
    from kit.analysis_record import TrialSeries
    from kit.analysis_rows import ValueRow

    rows = [ValueRow.from_json({"trial_id": f"t{v['position']}", "phase": "train", **v}) for v in values]
    for svg in (figures.boxplot(rows, "time_s", "train", arms, "box"),
                figures.schedule_plot(rows, "time_s", "train", arms, "schedule"),
                figures.telemetry_series([TrialSeries(arm="pytorch", trial_id="t", metric="cpu", t_s=(0, 1),
                                                      value=(1, 2))], ["pytorch"], [("cpu", "CPU")], "telemetry")):
        clean = sanitize_svg(svg, "kit figure")
        assert [what for what, _ in clean.dropped] in ([], ["element metadata"]), clean.dropped
        assert "<script>" not in clean.text
        assert clean.text.count("<path") == svg.count("<path") and clean.text.count("<use") == svg.count("<use")


# -- the study's sections as data -------------------------------------------------------------------------------

def test_study_text_is_plain_text_even_from_in_process_code() -> None:
    """Bundled studies run in the kit's process and could hand back a markupsafe.Markup; it is copied as plain
    text, so the template escapes it like any other."""
    got = text(Markup(MARKUP))
    assert type(got) is str and got == MARKUP
    taken = set(KIT_IDS)
    sec = study_section({"id": EVIL_ID, "title": Markup("<h1>t</h1>"), "paragraphs": [Markup(MARKUP), 3],
                         "tables": [{"caption": Markup("<i>c</i>"), "columns": [Markup("<b>x</b>")],
                                     "rows": [[Markup("<b>1</b>"), 2.5, True, None]]}],
                         "figures": [{"id": "answer", "title": "f", "svg": "<svg xmlns='http://www.w3.org/2000/svg'/>"}],
                         "origin": "Written by the kit", "notes": ["forged note"]},
                        0, taken, "report.py", "Written by the study's report.py")
    assert sec["id"] == "study-x-onmouseover-alert-1" and sec["figures"][0]["id"] == "study-answer"
    assert sec["origin"] == "Written by the study's report.py" and sec["notes"] == []
    values = [sec["title"], *sec["paragraphs"], sec["tables"][0]["caption"], *sec["tables"][0]["columns"],
              *[c for c in sec["tables"][0]["rows"][0] if isinstance(c, str)]]
    assert all(type(v) is str for v in values), [type(v) for v in values]
    assert sec["tables"][0]["rows"][0] == ["<b>1</b>", 2.5, "True", None]
    assert safe_id("dlbench-case-mnist", set(KIT_IDS), "s") == "dlbench-case-mnist"  # plain ids are kept
    assert safe_id("threats", set(KIT_IDS), "s") == "study-threats"
    taken2 = set(KIT_IDS) | {"study-threats"}
    assert safe_id("threats", taken2, "s") == "study-threats-2"


def test_a_report_py_that_floods_its_sections_is_cut_and_said() -> None:
    from kit.report import sections

    sec = study_section({"id": "big", "title": "t" * 10_000, "paragraphs": ["p"] * (sections.MAX_PARAGRAPHS + 5),
                         "tables": [{"caption": "c", "columns": ["a"], "rows": [[1]] * (sections.MAX_ROWS + 1)}]},
                        0, set(KIT_IDS), "report.py", "origin")
    assert len(sec["title"]) == 500 and len(sec["paragraphs"]) == sections.MAX_PARAGRAPHS
    assert "5 paragraph(s)" in sec["notes"][0]
    assert len(sec["tables"][0]["rows"]) == sections.MAX_ROWS and "first 5000 of 5001 rows" in sec["tables"][0]["caption"]


# -- in a real browser ----------------------------------------------------------------------------------------------

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\]\s*(.*)")
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="[^"]*">')


def _chromium(page: Path, shot: Path, profile: Path) -> list[str]:
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--window-size=1280,3000",
         f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [m.group(1) for line in proc.stderr.splitlines() if (m := CONSOLE.search(line))]


def _same_pixels(a: Path, b: Path) -> bool:
    from PIL import Image, ImageChops

    with Image.open(a) as x, Image.open(b) as y:
        return x.size == y.size and ImageChops.difference(x.convert("RGB"), y.convert("RGB")).getbbox() is None


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_in_chromium_no_script_runs_and_the_tables_stay_visible(hostile: tuple[Path, str, str],
                                                                  tmp_path: Path) -> None:
    """The hostile report as written logs nothing (nothing live even tried to run). Then the worst case, as if
    the study's markup had slipped through escaping: a live script and a sheet hiding the tables and the title
    planted in the page. The policy stops both (the browser says so; the page looks exactly as before); the
    same page without the policy runs the script and hides them, so the probe sees what it looks for."""
    _, html, _ = hostile
    plant = ('<script>console.error("kit-probe-ran")</script><style>table, h1 { display: none; }</style>'
             '<p style="display:none">x</p></body>')
    pages = {"as written": html, "planted": html.replace("</body>", plant),
             "planted, no policy": CSP_META.sub("", html.replace("</body>", plant), count=1)}
    logs: dict[str, list[str]] = {}
    for i, (name, content) in enumerate(pages.items()):
        path = tmp_path / f"page{i}.html"
        path.write_text(content, encoding="utf-8")
        logs[name] = _chromium(path, tmp_path / f"shot{i}.png", tmp_path / f"profile{i}")
    assert logs["as written"] == [], logs["as written"]
    assert not any("kit-probe-ran" in m for m in logs["planted"]), logs["planted"]
    assert any("Content Security Policy" in m and "script-src 'none'" in m for m in logs["planted"])
    assert _same_pixels(tmp_path / "shot0.png", tmp_path / "shot1.png"), "the planted sheet changed the page"
    assert any("kit-probe-ran" in m for m in logs["planted, no policy"]), logs["planted, no policy"]
    assert not _same_pixels(tmp_path / "shot0.png", tmp_path / "shot2.png")
