"""Figures as images the kit encodes itself: an SVG reduced to drawing, or PNG bytes, as a ``data:`` URL.

A study's report.py is code the reader consented to run, not consent to write the report around it: an SVG it
returns could carry ``<script>``, event attributes, ``<foreignObject>`` with HTML, a style sheet that hides the
kit's tables, or links to anything. So every figure reaches the HTML page only as an ``<img>`` whose ``data:``
URL the kit writes from a figure it re-built here:

* :func:`sanitize_svg` parses the text with the standard library's XML parser after refusing NUL bytes, more
  than :data:`MAX_SVG_BYTES`, and any declaration (``<!ENTITY``, a second ``<!DOCTYPE``...): one leading
  DOCTYPE is cut out before the parse, so its declarations are never honoured (no entity expansion, no external
  entity: a figure that uses one is refused as not well-formed). It then writes a new SVG from an allow-list:
  drawing elements (:data:`ELEMENTS`) and geometry and presentation attributes (:data:`ATTRIBUTES`), whose values
  may only refer to the figure itself (``url(#id)``, ``href="#id"``); an ``<image>`` only with PNG bytes, which
  are checked and re-encoded. Everything else (scripts, ``on*`` attributes, ``foreignObject``, animation,
  links, external references, CSS functions that fetch) is dropped and counted (:attr:`CleanSvg.dropped`).
  The output is serialised by this module (element and attribute names from the allow-lists, every value
  escaped), never by echoing what was parsed.
* ``<style>`` elements are kept only as re-written rules whose selectors name drawing elements, classes or ids
  and whose declarations pass the same property allow-list as ``style=`` attributes (no at-rules, no escapes,
  no comments); matplotlib writes one such sheet (``*{stroke-linejoin: round; stroke-linecap: butt}``) and its
  figures keep their look. Why keep rather than drop: the figure is only ever shown as an image, a separate
  document whose styles cannot reach the page, and a rule that cannot name ``table`` or set ``display``
  could not hide the kit's text even if the SVG were one day inlined.
* :func:`png_data_url` checks the PNG signature and size of bytes a study returns.

An SVG loaded as an image cannot run scripts, load anything or style the page, so the allow-list is the second
wall, not the only one; the page's Content-Security-Policy (:mod:`kit.report.html`) is the third.

Libraries considered: ``defusedxml`` (it would guard the parse only, which the DOCTYPE refusal here already
does, and it is not a dependency of the kit), ``bleach`` (deprecated by its maintainers, HTML only), ``nh3``
(ammonia: an HTML sanitiser that parses SVG as HTML foreign content and has no SVG allow-list of its own),
``lxml.html.clean`` (moved out of lxml for its record of bypasses; HTML oriented) and the PHP/JS SVG
sanitisers (not Python). None sanitises SVG as XML to an allow-list, so the kit keeps this small one.
"""

from __future__ import annotations

import base64
import binascii
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from kit.errors import ReportError

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"
MAX_SVG_BYTES = 8 << 20  # a telemetry figure of many trials is a few hundred KiB
MAX_ELEMENTS = 200_000
MAX_DEPTH = 64
MAX_PNG_BYTES = 8 << 20
MAX_SHEET_CHARS = 64 << 10  # matplotlib's sheet is one short rule
MAX_FUNCTION_VALUE_CHARS = 2_000  # a colour, a transform, a url(#id): never a long value
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# drawing elements; animation (animate, set, animateMotion...) can set href and is left out, as are a,
# foreignObject, script, iframe, switch, filter and everything not named here
ELEMENTS = frozenset({
    "svg", "g", "defs", "symbol", "use", "title", "desc", "path", "rect", "circle", "ellipse", "line", "polyline",
    "polygon", "text", "tspan", "textPath", "clipPath", "mask", "pattern", "marker", "linearGradient",
    "radialGradient", "stop", "image", "style"})
TEXT_ELEMENTS = frozenset({"text", "tspan", "textPath", "title", "desc"})
HREF_ELEMENTS = frozenset({"use", "textPath", "linearGradient", "radialGradient", "pattern", "image"})
PRESENTATION = frozenset({
    "fill", "fill-opacity", "fill-rule", "stroke", "stroke-width", "stroke-opacity", "stroke-linecap",
    "stroke-linejoin", "stroke-miterlimit", "stroke-dasharray", "stroke-dashoffset", "opacity", "clip-path",
    "clip-rule", "mask", "marker-start", "marker-mid", "marker-end", "stop-color", "stop-opacity", "font-family",
    "font-size", "font-style", "font-weight", "font-variant", "font-stretch", "text-anchor", "dominant-baseline",
    "alignment-baseline", "baseline-shift", "letter-spacing", "word-spacing", "text-decoration", "writing-mode",
    "color", "visibility", "paint-order", "vector-effect", "shape-rendering", "text-rendering", "image-rendering",
    "color-interpolation", "overflow"})
ATTRIBUTES = PRESENTATION | frozenset({
    "id", "class", "style", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry", "fx", "fy", "fr",
    "width", "height", "d", "points", "pathLength", "transform", "viewBox", "preserveAspectRatio", "version",
    "offset", "dx", "dy", "rotate", "textLength", "lengthAdjust", "startOffset", "method", "spacing", "refX",
    "refY", "markerWidth", "markerHeight", "markerUnits", "orient", "patternUnits", "patternContentUnits",
    "patternTransform", "gradientUnits", "gradientTransform", "spreadMethod", "clipPathUnits", "maskUnits",
    "maskContentUnits", "display"})
# CSS (style= and <style>): the presentation properties, the font shorthand and white-space; no display,
# position, content, behaviour or anything that lays out the page
CSS_PROPERTIES = PRESENTATION | frozenset({"font", "white-space"})
CSS_FUNCTIONS = frozenset({"url", "rgb", "rgba", "hsl", "hsla", "matrix", "translate", "scale", "rotate", "skewx",
                           "skewy"})
_LOCAL_ID = r"[A-Za-z_][\w.:-]{0,127}"
_ID = re.compile(rf"^{_LOCAL_ID}$")
_LOCAL_HREF = re.compile(rf"^\s*#({_LOCAL_ID})\s*$")
_URL = re.compile(r"url\s*\(([^)]*)\)", re.I)
_URL_START = re.compile(r"url\s*\(", re.I)
_LOCAL_URL = re.compile(rf"^\s*(['\"]?)#{_LOCAL_ID}\1\s*$")
_FUNCTION = re.compile(r"([A-Za-z_-][\w-]*)\s*\(")
_VALUE_CHARS = re.compile(r"^[\w\s#%.,+\-'\"()/!:]*$")  # no ; { } < > \ @ * = & in a value
_CLASS_NAME = re.compile(r"^[\w-]{1,128}$")
_COMPOUND = re.compile(r"^(\*|[A-Za-z][\w-]*)?((?:[.#][A-Za-z_][\w-]*)*)$")
_DECLARATION = re.compile(r"<!(?!\[CDATA\[)")


@dataclass(frozen=True)
class CleanSvg:
    """An SVG re-written from the allow-lists, and what was left out of it (``(what, count)``, sorted)."""

    text: str
    dropped: tuple[tuple[str, int], ...]

    def data_url(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.text.encode("utf-8")).decode("ascii")


def _refuse(cause: str, where: str) -> ReportError:
    return ReportError(cause, where=where,
                       fix="draw it with kit.report.figures (matplotlib SVG) or return PNG bytes")


def _local(tag: str) -> str | None:
    """An element's or attribute's SVG name (its own namespace or none); None for any other namespace."""
    if tag.startswith("{"):
        ns, _, name = tag[1:].partition("}")
        return name if ns == SVG_NS else None
    return tag


class _Writer:
    def __init__(self, where: str) -> None:
        self.where = where
        self.out: list[str] = []
        self.dropped: dict[str, int] = {}

    def drop(self, what: str) -> None:
        self.dropped[what] = self.dropped.get(what, 0) + 1

    # -- values -------------------------------------------------------------------------------------------------

    def value_ok(self, value: str) -> bool:
        """A value may only refer to the figure itself: url(#id), and colour or transform functions. (Checks in
        linear time: a value with functions is short, so the function patterns never scan a long one.)"""
        if not _VALUE_CHARS.match(value) or "javascript" in re.sub(r"\s", "", value).lower():
            return False
        if "(" not in value and ")" not in value:
            return True
        if len(value) > MAX_FUNCTION_VALUE_CHARS:
            return False
        # CSS error recovery reads an unclosed url( or string to the end of the value: every url( must be one
        # _URL matches, and parentheses and quotes must balance, or an external url(http://... would pass
        if value.count("(") != value.count(")") or value.count("'") % 2 or value.count('"') % 2:
            return False
        urls = list(_URL.finditer(value))
        if len(_URL_START.findall(value)) != len(urls) or any(not _LOCAL_URL.match(m.group(1)) for m in urls):
            return False
        return all(m.group(1).lower() in CSS_FUNCTIONS for m in _FUNCTION.finditer(value))

    def declarations(self, text: str, what: str) -> str | None:
        """``prop: value; ...`` re-written with allowed properties and values only ('' when none is left)."""
        if "\\" in text or "/*" in text or "@" in text:
            self.drop(f"{what} (escapes, comments or at-rules)")
            return None
        kept = []
        for decl in text.split(";"):
            if not decl.strip():
                continue
            prop, sep, value = decl.partition(":")
            prop, value = prop.strip().lower(), value.strip()
            if not sep or prop not in CSS_PROPERTIES:
                self.drop(f"CSS property {prop or '?'}"[:80])
            elif not self.value_ok(value):
                self.drop(f"CSS value of {prop} (external reference or unsafe characters)")
            else:
                kept.append(f"{prop}: {value}")
        return "; ".join(kept)

    def sheet(self, text: str) -> str | None:
        """A <style> element's text as plain rules on drawing elements, classes and ids (None: dropped whole)."""
        if len(text) > MAX_SHEET_CHARS:
            self.drop(f"style sheet (longer than {MAX_SHEET_CHARS} characters)")
            return None
        if "<" in text or "\\" in text or "@" in text or "/*" in text:
            self.drop("style sheet (at-rules, comments, escapes or markup)")
            return None
        rules = _rules(text)
        if rules is None:
            self.drop("style sheet (not plain rules)")
            return None
        out = []
        for selector, body in rules:
            if not self._selector_ok(selector):
                self.drop("CSS rule (its selector reaches beyond the figure's drawing elements)")
                continue
            decls = self.declarations(body, "CSS rule")
            if decls:
                out.append(f"{' '.join(selector.split())}{{{decls}}}")
        return "".join(out)

    @staticmethod
    def _selector_ok(selector: str) -> bool:
        for group in selector.split(","):
            parts = [p for p in re.split(r"[\s>]+", group.strip()) if p]
            if not parts:
                return False
            for p in parts:
                m = _COMPOUND.match(p)
                if m is None or not (m.group(1) or m.group(2)):
                    return False
                if m.group(1) not in (None, "*") and m.group(1) not in ELEMENTS - {"style"}:
                    return False
        return True

    def png(self, value: str) -> str | None:
        """A data:image/png URL re-encoded by the kit, or None."""
        m = re.match(r"^\s*data:image/png;base64,(.*)$", value, re.S | re.I)
        if m is None:
            return None
        try:
            return png_data_url(base64.b64decode(re.sub(r"\s+", "", m.group(1)), validate=True), self.where)
        except (binascii.Error, ValueError, ReportError):
            return None

    # -- the tree -----------------------------------------------------------------------------------------------

    def attributes(self, name: str, elem: ET.Element) -> list[tuple[str, str]]:
        out = []
        for key, value in elem.attrib.items():
            if key in (f"{{{XLINK_NS}}}href", "href"):
                attr = "xlink:href" if key.startswith("{") else "href"
                if name == "image":
                    url = self.png(value)
                    if url is None:
                        self.drop("image href (only PNG bytes in a data: URL)")
                    else:
                        out.append((attr, url))
                elif name in HREF_ELEMENTS and _LOCAL_HREF.match(value):
                    out.append((attr, value.strip()))
                else:
                    self.drop(f"{attr} (only #id references to the figure itself)")
                continue
            if name == "style" and key == "type" and value.strip().lower() in ("", "text/css"):
                continue  # the sheet is re-written as CSS whatever it declared
            if key == f"{{{XML_NS}}}space":
                if value in ("preserve", "default"):
                    out.append(("xml:space", value))
                continue
            local = _local(key)
            if local is None or local not in ATTRIBUTES:
                self.drop("event attribute" if (local or "").lower().startswith("on") else
                          f"attribute {(local or key)}"[:80])
                continue
            if local == "style":
                decls = self.declarations(value, "style attribute")
                if decls:
                    out.append(("style", decls))
            elif local == "id" and not _ID.match(value):
                self.drop("id (not a plain name)")
            elif local == "class" and not (value.split() and all(_CLASS_NAME.match(c) for c in value.split())):
                self.drop("class (not plain names)")
            elif not self.value_ok(value):
                self.drop(f"value of {local} (external reference or unsafe characters)")
            else:
                out.append((local, value))
        return out

    def element(self, elem: ET.Element, depth: int) -> None:
        name = _local(elem.tag) if isinstance(elem.tag, str) else None
        if name is None or name not in ELEMENTS:
            self.drop(f"element {elem.tag.rpartition('}')[2] if isinstance(elem.tag, str) else '?'}"[:80])
            return
        if depth >= MAX_DEPTH:
            self.drop(f"elements nested deeper than {MAX_DEPTH}")
            return
        attrs = self.attributes(name, elem)
        if depth == 0:
            attrs = [("xmlns", SVG_NS), ("xmlns:xlink", XLINK_NS), *attrs]
        self.out.append(f"<{name}" + "".join(f" {k}={quoteattr(v)}" for k, v in attrs) + ">")
        if name == "style":
            if len(elem):
                self.drop("markup inside a style sheet")
            else:
                sheet = self.sheet(elem.text or "")
                if sheet:
                    self.out.append(escape(sheet))
        else:
            texty = name in TEXT_ELEMENTS
            if texty and elem.text:
                self.out.append(escape(elem.text))
            for child in elem:
                self.element(child, depth + 1)
                if texty and child.tail:
                    self.out.append(escape(child.tail))
                elif not texty:
                    self.out.append("\n")
        self.out.append(f"</{name}>")


def sanitize_svg(text: str, where: str = "figure") -> CleanSvg:
    """``text`` re-written as an SVG of drawing elements only (see the module docstring); a ReportError when it
    cannot be read as such at all (too large, NUL bytes, declarations, entities, not XML, not an <svg>)."""
    if not isinstance(text, str):
        raise _refuse("the figure is not SVG text", where)
    if len(text) > MAX_SVG_BYTES or len(text.encode("utf-8", "replace")) > MAX_SVG_BYTES:
        raise _refuse(f"the SVG is larger than {MAX_SVG_BYTES} bytes", where)
    if "\x00" in text:
        raise _refuse("the SVG holds NUL bytes", where)
    dropped: dict[str, int] = {}
    body = _without_comments(text, where)
    body, n = _without_doctype(body)
    if n:
        dropped["DOCTYPE declaration (never honoured: no entity is expanded)"] = 1
    if _DECLARATION.search(body):
        raise _refuse("the SVG holds XML declarations (<!ENTITY, <!DOCTYPE...), which the kit never expands", where)
    if body.count("<") > 2 * MAX_ELEMENTS + 2:  # before the tree is built: every element needs a '<'
        raise _refuse(f"the SVG has more than {MAX_ELEMENTS} elements", where)
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise _refuse(f"the SVG is not well-formed XML without a DTD ({exc})", where) from None
    n_elements = sum(1 for _ in root.iter())
    if n_elements > MAX_ELEMENTS:
        raise _refuse(f"the SVG has {n_elements} elements (at most {MAX_ELEMENTS})", where)
    if _local(root.tag) != "svg":
        raise _refuse("the document is not an <svg> element", where)
    w = _Writer(where)
    w.dropped.update(dropped)
    w.element(root, 0)
    return CleanSvg("".join(w.out), tuple(sorted(w.dropped.items())))


def _rules(text: str) -> list[tuple[str, str]] | None:
    """A style sheet as (selector, declarations) pairs, in one linear pass (a pattern retried at every position
    of a sheet without braces would take quadratic time); None when it is not plain ``selector { ... }`` rules."""
    out: list[tuple[str, str]] = []
    at = 0
    while True:
        start = text.find("{", at)
        if start < 0:
            return out if not text[at:].strip() else None
        end = text.find("}", start)
        selector, body = text[at:start], text[start + 1:end]
        if end < 0 or "}" in selector or "{" in body:
            return None
        out.append((selector, body))
        at = end + 1


def _without_doctype(body: str) -> tuple[str, int]:
    """``body`` without its DOCTYPE declaration, found in one linear pass and only in the prolog (before the first
    element, where XML allows it); (body, 1) when one was cut. Its internal subset is skipped whole, quotes
    honoured: no entity it declares is ever expanded (their use is then not well-formed). Anything else that
    looks like a declaration stays and is refused by the caller."""
    at = body.find("<!DOCTYPE")
    if at < 0:
        return body, 0
    pos = 0
    while True:  # the prolog: whitespace, an XML declaration and processing instructions only
        lt = body.find("<", pos, at)
        if lt < 0:
            break
        if not body.startswith("<?", lt):
            return body, 0
        end = body.find("?>", lt + 2, at)
        if end < 0:
            return body, 0
        pos = end + 2
    quote, subset = "", False
    for i in range(at + len("<!DOCTYPE"), len(body)):
        ch = body[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "[" and not subset:
            subset = True
        elif ch == "]" and subset:
            subset = False
        elif ch == ">" and not subset:
            return body[:at] + body[i + 1:], 1
    return body, 0


def _without_comments(text: str, where: str) -> str:
    """``text`` without its XML comments (dropped by the parser anyway), in one linear pass: the declaration
    checks then see what the parser will see. An unterminated comment is refused."""
    out, at = [], 0
    while (start := text.find("<!--", at)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:
            raise _refuse("the SVG holds an unterminated comment", where)
        out.append(text[at:start])
        at = end + 3
    out.append(text[at:])
    return "".join(out)


def png_data_url(data: bytes, where: str = "figure") -> str:
    """PNG bytes (signature and size checked) as a data: URL the kit wrote."""
    if not isinstance(data, bytes) or not data.startswith(PNG_SIGNATURE):
        raise _refuse("the image is not PNG bytes (no PNG signature)", where)
    if len(data) > MAX_PNG_BYTES:
        raise _refuse(f"the PNG is larger than {MAX_PNG_BYTES} bytes", where)
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
