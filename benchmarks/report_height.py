"""Issue 39, item 7: how long a report reads, measured in headless Chromium and from its LaTeX build.

    .venv/bin/python benchmarks/report_height.py RUN/report/index.html [--latex RUN/report/latex] \
        [--shots docs/evidence/issue39-report-after] [--json]

Prints, for the page at 1280 x 800 (one screen = 800 px of CSS height):

* its height in px and in screens, and the height above its appendices (the element ``id="appendices"``; a page
  without one has no appendix, so the whole page counts);
* the offsets of the answer, of the claims ledger and of the first figure (px and screens);
* the words a line break cuts inside (between two letters or digits: "tr/ai/n" is two), with the first few, and
  breaks at punctuation inside a token (after "/" or "-", which wrapping at spaces should make rare);
* with ``--latex``: the PDF's page count and every overfull \\hbox in the LaTeX log, attributed to the table
  fragment being read (tables/*.tex) where there is one.

``--shots PREFIX`` saves ``PREFIX-first2screens-1280.png`` (1280 x 1600) and ``PREFIX-full-1280.png`` (the whole
page, scaled down so that the file stays small). The measuring script is added to a copy of the page without its
Content-Security-Policy (which forbids every script); the page itself is not changed.
"""

from __future__ import annotations

import argparse
import html as htmllib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WIDTH, SCREEN = 1280, 800
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)

# Runs in the page once it has loaded: offsets, height and every word a line break cuts. A word is cut where two
# characters of one whitespace-free token sit on different lines; the cut is "inside" when both characters are
# letters or digits, "at punctuation" otherwise.
PROBE = r"""<script>
window.addEventListener('load', () => {
  const top = el => el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null;
  const out = {vw: window.innerWidth, height: document.documentElement.scrollHeight,
               answer: top(document.getElementById('answer')), claims: top(document.getElementById('claims')),
               figure: top(document.querySelector('figure')), appendices: top(document.getElementById('appendices')),
               inside: [], punct: [], sections: {}};
  document.querySelectorAll('body > section, body > header, #appendices > section').forEach(s => {
    const r = s.getBoundingClientRect();
    out.sections[s.id || s.tagName.toLowerCase()] = Math.round(r.height);
  });
  out.wide = [];
  document.querySelectorAll('table').forEach(t => {
    const c = t.parentElement;
    if (c.scrollWidth > c.clientWidth + 1 || t.scrollWidth > c.clientWidth + 1)
      out.wide.push(((t.closest('section') || {}).id || '') + ': ' + ((t.querySelector('th') || {}).textContent || '')
                    + ' ' + t.scrollWidth + ' > ' + c.clientWidth);
  });
  out.page_wider = document.documentElement.scrollWidth > window.innerWidth;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const alnum = /[\p{L}\p{N}]/u;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest('pre, script, style, details:not([open])') || !p.getClientRects().length) continue;
    const text = n.data;
    for (const m of text.matchAll(/\S{2,}/g)) {
      let prev = null;
      for (let i = m.index; i < m.index + m[0].length; i++) {
        range.setStart(n, i); range.setEnd(n, i + 1);
        const r = range.getClientRects()[0];
        if (!r || r.width === 0) continue;
        if (prev && r.top > prev.top + prev.r.height / 2) {
          const a = text[prev.i], b = text[i];
          const where = (alnum.test(a) && alnum.test(b)) ? out.inside : out.punct;
          where.push(m[0].slice(0, 60) + ' @' + (i - m.index));
        }
        prev = {top: r.top, r: r, i: i};
      }
    }
  }
  const pre = document.createElement('pre');
  pre.id = 'kit-height';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body>"""


def without_policy(text: str) -> str:
    return re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text, count=1)


def chromium(page: Path, profile: Path, *args: str, height: int = SCREEN, timeout_s: float = 180) -> str:
    if CHROMIUM is None:
        raise SystemExit("headless Chromium not installed (apt-get install chromium)")
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"chromium exit {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def measure_html(page: Path, work: Path) -> dict[str, Any]:
    """The page's height, offsets and cut words at 1280 x 800 (see the module docstring)."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / f"{page.stem}-height.html"
    probe.write_text(without_policy(page.read_text(encoding="utf-8")).replace("</body>", PROBE), encoding="utf-8")
    dom = chromium(probe, work / "profile-measure", "--dump-dom")
    m = re.search(r'<pre id="kit-height">(.*?)</pre>', dom, re.S)
    if not m:
        raise SystemExit("the measuring script left no result: " + dom[-1500:])
    got: dict[str, Any] = json.loads(htmllib.unescape(m.group(1)))
    above = got["appendices"] if got["appendices"] is not None else got["height"]
    got["above_appendices"] = above
    for k in ("height", "above_appendices", "answer", "claims", "figure"):
        got[f"{k}_screens"] = None if got[k] is None else round(got[k] / SCREEN, 2)
    return got


def screenshots(page: Path, prefix: Path, height_px: int, work: Path) -> list[Path]:
    """The first two screens at 1280 px, and the whole page scaled to a quarter (a small PNG)."""
    first = prefix.with_name(prefix.name + "-first2screens-1280.png")
    full = prefix.with_name(prefix.name + "-full-1280.png")
    chromium(page, work / "profile-shot1", f"--screenshot={first}", height=2 * SCREEN)
    big = work / "full.png"
    chromium(page, work / "profile-shot2", f"--screenshot={big}", height=height_px)
    try:
        from PIL import Image
    except ImportError:  # no Pillow: keep the full-size shot
        shutil.copyfile(big, full)
    else:
        with Image.open(big) as im:
            small = im.convert("RGB").resize((im.width // 4, im.height // 4), Image.LANCZOS)
            small.quantize(colors=64).save(full, optimize=True)
    return [first, full]


_OVERFULL = re.compile(r"Overfull \\hbox \(([\d.]+)pt too wide\) (in \w+) at lines? (\d+)(?:--(\d+))?")


def overfull_boxes(log_text: str) -> list[dict[str, Any]]:
    """Every overfull \\hbox in a LaTeX log with the file TeX was reading: the log opens a file with "(path" and
    closes it with ")", so the innermost open file at the message is the fragment the box belongs to."""
    out: list[dict[str, Any]] = []
    stack: list[str] = []
    pos = 0
    token = re.compile(r"\((\.?/?[\w./-]+\.(?:tex|sty|cls|cfg|def|fd|clo|aux|out|ldf|dfu|mkii|code\.tex))|\(|\)|"
                       + _OVERFULL.pattern)
    for m in token.finditer(log_text, pos):
        s = m.group(0)
        if s.startswith("Overfull"):
            o = _OVERFULL.match(s)
            assert o is not None
            files = [f for f in stack if f]
            out.append({"pt": float(o.group(1)), "kind": o.group(2), "file": files[-1] if files else "",
                        "lines": o.group(3) + (f"--{o.group(4)}" if o.group(4) else "")})
        elif s == ")":
            if stack:
                stack.pop()
        elif s == "(":
            stack.append("")
        else:
            stack.append(m.group(1))
    return out


def measure_latex(latex_dir: Path) -> dict[str, Any]:
    log = (latex_dir / "report.log").read_text(encoding="utf-8", errors="replace")
    boxes = overfull_boxes(log)
    pages = None
    pdf = latex_dir / "report.pdf"
    if pdf.exists():
        try:
            from pypdf import PdfReader

            pages = len(PdfReader(str(pdf)).pages)
        except ImportError:
            m = re.search(r"Output written on \S+ \((\d+) pages?", log)
            pages = int(m.group(1)) if m else None
    # a box "in alignment" is a table row wherever TeX reports it (a longtable's rows can be reported after its
    # fragment was closed); a box "in paragraph" is in a table when it is in a table fragment (a p-column cell)
    in_tables = [b for b in boxes if b["kind"] == "in alignment" or "tables/" in b["file"]]
    return {"pdf_pages": pages, "overfull": boxes, "overfull_in_tables_over_2pt": [b for b in in_tables if b["pt"] > 2]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--latex", type=Path, help="the report's latex directory, built with --format pdf")
    ap.add_argument("--shots", type=Path, help="file name prefix of the two screenshots")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        got: dict[str, Any] = {"html": measure_html(args.page, work)}
        if args.latex:
            got["latex"] = measure_latex(args.latex)
        if args.shots:
            got["shots"] = [str(p) for p in screenshots(args.page, args.shots, got["html"]["height"], work)]
    if args.json:
        print(json.dumps(got, indent=1))
        return 0
    h = got["html"]
    print(f"page at {WIDTH} px: {h['height']} px = {h['height_screens']} screens of {SCREEN} px; "
          f"above the appendices {h['above_appendices']} px = {h['above_appendices_screens']} screens")
    for k in ("answer", "claims", "figure"):
        print(f"  {k}: {h[k]} px = {h[k + '_screens']} screens down")
    print("  section heights (px): " + ", ".join(f"{k} {v}" for k, v in h["sections"].items()))
    print(f"  tables wider than their container: {len(h['wide'])} {h['wide'][:8]}; page wider than the window: "
          f"{h['page_wider']}")
    print(f"  words cut inside: {len(h['inside'])} {h['inside'][:8]}")
    print(f"  tokens cut at punctuation: {len(h['punct'])} {h['punct'][:8]}")
    if "latex" in got:
        lx = got["latex"]
        print(f"PDF: {lx['pdf_pages']} pages; overfull \\hbox: {len(lx['overfull'])}, in tables over 2 pt: "
              f"{len(lx['overfull_in_tables_over_2pt'])}")
        for b in lx["overfull"]:
            print(f"  {b['pt']:.1f} pt {b['kind']} {b['file'] or '(main)'} lines {b['lines']}")
    for s in got.get("shots", []):
        print(f"screenshot: {s} ({Path(s).stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
