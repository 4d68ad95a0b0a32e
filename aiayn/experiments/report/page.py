"""The report as markdown (report.md) and as one offline HTML page (report.html): images inlined as data: URIs,
no script, and a Content-Security-Policy that lets nothing be fetched."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from aiayn.viz.attention import offline_page

# Nothing may leave the page: no default source, images only inline, styles only inline.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """body{font:15px/1.45 system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f3f3f3}code{background:#f5f5f5;padding:0 2px}img{max-width:100%;border:1px solid #eee}
.meta{color:#666;font-size:13px}.smoke{background:#fff3cd;border:2px solid #c90;padding:.6rem;font-weight:bold}
.verdict{background:#eef6ee;padding:.4rem .6rem}section{border-top:2px solid #ddd;margin-top:1.5rem}"""


def _meta(s: dict[str, Any]) -> str:
    return (f"Command: `{s['command']}` · {s['source']} · hardware: {s['hardware']} · {s['date']} · "
            f"budget {s['budget']}")


def markdown(header: dict[str, Any], sections: list[dict[str, Any]]) -> str:
    """The report as markdown; images by relative path (img/...)."""
    out = [f"# Attention Is All You Need: the paper's results regenerated ({header['budget']} budget)", ""]
    if header["smoke"]:
        out += [f"> **{header['about']}**", ""]
    else:
        out += [f"Budget: {header['about']}.", ""]
    out += [f"Made {header['date']} by `{header['command']}` on {header['hardware']}.", ""]
    for s in sections:
        out += [f"## {s['title']}", "", "**Paper.**", "", s["paper"], "", "**Ours.**", "", s["ours"], ""]
        out += [f"![{img['alt']}]({img['file']})" for img in s["images"]]
        out += ["", f"**What agrees, what does not.** {s['verdict']}", "", f"<sub>{_meta(s)}</sub>", ""]
    return "\n".join(out)


def html_page(header: dict[str, Any], sections: list[dict[str, Any]], root: Path) -> str:
    """The report as one HTML page; the images under `root` inlined."""
    title = f"Attention Is All You Need: the paper's results regenerated ({header['budget']} budget)"
    body = [f"<h1>{html.escape(title)}</h1>"]
    if header["smoke"]:
        body.append(f'<p class="smoke">{html.escape(header["about"])}</p>')
    else:
        body.append(f"<p>Budget: {html.escape(header['about'])}.</p>")
    body.append(f'<p class="meta">Made {html.escape(header["date"])} by <code>{html.escape(header["command"])}'
                f"</code> on {html.escape(header['hardware'])}.</p>")
    for s in sections:
        body += [f'<section id="{s["id"]}"><h2>{html.escape(s["title"])}</h2>',
                 f"<p><b>Paper.</b></p>{md_to_html(s['paper'])}", f"<p><b>Ours.</b></p>{md_to_html(s['ours'])}"]
        for img in s["images"]:
            data = base64.b64encode((root / img["file"]).read_bytes()).decode("ascii")
            body.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(img["alt"])}"></p>')
        body += [f'<p class="verdict"><b>What agrees, what does not.</b> {_inline(s["verdict"])}</p>',
                 f'<p class="meta">{_inline(_meta(s))}</p></section>']
    return offline_page(title, CSP, f"<style>{STYLE}</style>", "\n".join(body) + "\n")


def _inline(text: str) -> str:
    """Escaped text with `code` and **bold**."""
    text = html.escape(text, quote=False)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def md_to_html(text: str) -> str:
    """The markdown the sections use: pipe tables, '- ' lists, paragraphs (split at blank lines)."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if all(line.startswith("|") for line in lines):
            rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
            rows = [r for r in rows if not all(re.fullmatch(r":?-+:?", c) for c in r)]
            head, *rest = rows
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rest)
                       + "</table>")
        elif all(line.startswith("- ") for line in lines):
            out.append("<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>")
        else:
            out.append("<p>" + "<br>".join(_inline(line) for line in lines) + "</p>")
    return "\n".join(out)
