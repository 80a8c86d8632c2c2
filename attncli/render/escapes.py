"""Every medium's escaping of user text (labels, titles, descriptions, file names, explanations),
at one place each: `md` (Markdown), `tex` (LaTeX), `csv_text` (CSV formulas; the csv
module quotes the cell), `html_text` and `script_json` (HTML), each starting from `shown` (attncli/base/errors.visible:
controls, separators and bidi characters as visible `\\uXXXX` escapes); and `dumps` (strict JSON,
which keeps the text exact and writes what must not reach a terminal raw as JSON's own escapes). The output formats' records (render/formats.py) name theirs, and
tests/test_safety.py runs hostile text through every registered text format with it.

Light: no numpy, no rich, and no pattern compiled at import (the format records, read at start-up,
point here): each pattern is a string `re` compiles on first use and keeps in its cache.
"""

from __future__ import annotations

import json
import re

from attncli.base.errors import visible as shown

_MD_INLINE = r"([\\`*_\[\]<>|#~&!$])"  # links, emphasis, code, HTML, table cells, math
_MD_LINE_START = r"^(\s*(?:\d+(?=[.)]))?)([-+=.)])"  # lists, rules, setext headings


# What GitHub Markdown turns into a link without brackets: a scheme's "://", "www." and an e-mail's
# "@"; a backslash before the punctuation keeps the text and stops the autolink.
_MD_AUTOLINK = r"(?<=[A-Za-z])(:)(?=//)|(?<![\w.])(www)(\.)|(@)"  # case-insensitive


def md(text: str) -> str:
    """Text for Markdown, shown literally: every inline special backslash-escaped (so `|` cannot
    add a column and `[x](y)` is no link), a bare URL or e-mail address kept from becoming an
    autolink, and a start that would open a list or rule escaped."""
    text = re.sub(_MD_INLINE, r"\\\1", shown(text))
    text = re.sub(_MD_AUTOLINK, lambda m: "\\" + m[1] if m[1] else m[2] + "\\" + m[3] if m[2] else "\\@", text,
                  flags=re.IGNORECASE)
    return re.sub(_MD_LINE_START, r"\1\\\2", text)


def fence(lines: list[str]) -> str:
    """A code block whose fence is longer than any run of backticks in it, so nothing closes it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return "\n".join([ticks, *(shown(line) for line in lines), ticks])


# Every character with a meaning to LaTeX, in a form user text cannot end: braces and backslash
# are escaped, so a label can neither close a group nor start a command. `[` and `*` are braced
# because `\\` at a row's end would read them as its optional arguments.
_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "[": "{[}", "]": "{]}", "*": "{*}", "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


# pdflatex reads UTF-8 but typesets only the characters its fonts have (ASCII, accented Latin
# letters): any other one, a full-width or CJK label say, stops it with "Unicode character … not
# set up for use with LaTeX". So the symbols attncli writes become math, full-width ASCII forms
# (ｃａｔ, U+FF01-FF5E) their ASCII letters, and every other character `\attnchar{HEX}`, its code
# point: pdflatex shows [U+732B] (the definition ATTNCHAR prepends when it is used); a document
# for xelatex or lualatex that defines `\newcommand{\attnchar}[1]{\symbol{"#1}}` first shows
# the character itself.
_TEX_SYMBOLS = {"−": "-", "∞": r"\infty", "·": r"\cdot", "×": r"\times", "÷": r"\div", "±": r"\pm", "≤": r"\le",
                "≥": r"\ge", "≈": r"\approx", "≠": r"\ne", "≪": r"\ll", "√": r"\surd", "Σ": r"\Sigma",
                "∂": r"\partial", "∘": r"\circ", "→": r"\to", "ℓ": r"\ell", "ᵀ": r"^{\top}", "²": "^{2}",
                "¹": "^{1}", "⁻": "^{-}", "′": "'", "″": "''", "‖": r"\|", "⌈": r"\lceil", "⌉": r"\rceil",
                "⋮": r"\vdots", "⋯": r"\cdots", "θ": r"\theta", "Θ": r"\Theta", "α": r"\alpha", "π": r"\pi"}
# LaTeX's UTF-8 input sets – — … ‘ ’ “ ” itself; the ideographic space (U+3000) is a space.
_TEX_RAW = "–—…‘’“”"
ATTNCHAR = r"\providecommand{\attnchar}[1]{\texttt{[U+#1]}}% a character pdflatex cannot set"


def tex_unicode(text: str) -> str:
    """Escaped LaTeX text with every character beyond ASCII and Latin-1 written so that pdflatex
    sets it (see `_TEX_SYMBOLS`); Latin-1 letters (é, ß) stay, as LaTeX's UTF-8 input reads them."""
    out = []
    for c in text:
        if c < "\x80" or ("\xc0" <= c <= "\xff" and c not in "×÷") or c in _TEX_RAW:
            out.append(c)
        elif c in _TEX_SYMBOLS:
            out.append(r"\ensuremath{" + _TEX_SYMBOLS[c] + "}")
        elif c == "\u3000":
            out.append(" ")
        elif "\uff01" <= c <= "\uff5e":  # full-width ASCII: the letter it is
            ascii = chr(ord(c) - 0xFEE0)
            out.append(_TEX.get(ascii, ascii))
        else:
            out.append(r"\attnchar{" + f"{ord(c):04X}" + "}")
    return "".join(out)


def tex(text: str, symbols: bool = True) -> str:
    """Text for LaTeX, shown literally, on one line; with `symbols`, every character pdflatex
    cannot set made one it can (`tex_unicode`)."""
    escaped = "".join(_TEX.get(c, c) for c in shown(text))
    return tex_unicode(escaped) if symbols else escaped


def with_attnchar(text: str) -> str:
    """A LaTeX fragment, with ATTNCHAR's fallback first when it writes a character as \attnchar."""
    return f"{ATTNCHAR}\n{text}" if r"\attnchar{" in text else text


def tex_lines(lines: list[str]) -> str:
    """Lines in typewriter type, spaces kept (each a `~`), as a verbatim block would show them,
    but escaped by `tex`: no line can end the block."""
    body = " \\\\\n".join(tex(line).replace(" ", "~") or r"\mbox{}" for line in lines)
    return "\\begin{flushleft}\\ttfamily\n" + body + "\n\\end{flushleft}"


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a cell as a formula
_NUMBER = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"


def csv_text(text: str) -> str:
    """A text cell: escaped by `shown`, and prefixed with `'` when it starts like a formula
    (OWASP's CSV injection advice) unless it is a plain number such as -1."""
    text = shown(text)
    return "'" + text if text.startswith(_FORMULA_START) and not re.fullmatch(_NUMBER, text) else text


_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})  # html.escape's


def html_text(text: str) -> str:
    """User text as HTML text or an attribute value: escaped by `shown` (controls made visible),
    then & < > " ' as `html.escape` writes them (whose module would load every HTML entity)."""
    return shown(str(text)).translate(_HTML)


def script_json(value) -> str:
    """JSON safe inside a <script> element: <, > and & as \\u escapes, so no text in it can
    close the element or open a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def dumps(doc) -> str:
    """Strict JSON, UTF-8 text kept as it is, except what must not reach a terminal raw (json.dumps
    escapes only C0): DEL, C1 controls, line separators, bidi controls and lone surrogates (a file
    name whose bytes are not UTF-8 reaches Python as one) are written as `\\uXXXX` escapes, which
    a reader decodes back to the same text."""
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False)
    if not text.isascii() or "\x7f" in text:  # both fast scans; the regex (3 times a dumps) is rarely needed
        text = re.sub(_UNSAFE, lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


# The same characters as `attncli.base.errors.visible`, less C0 (json.dumps escapes it already).
_UNSAFE = "[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def json_string(text: str) -> str:
    """User text as it stands inside a JSON string `dumps` writes (without the quotes)."""
    return dumps(text)[1:-1]
