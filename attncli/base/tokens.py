"""Tokens as people read them, and the words they make. No numpy: the commands read it at start-up.

A captured layer's labels are the tokenizer's own tokens: byte-level BPE (GPT-2, Llama 3, SmolLM2)
writes a space as `Ġ` and every byte as a printable stand-in, SentencePiece (Llama 2, T5) a space
as `▁` and an unknown byte as `<0x0A>`, WordPiece (BERT) a word's later pieces as `##oot`.
`readable` writes each as its text (`Ġit` → `it`, `▁it` → `it`, `<0x0A>` → a line break, which
the views then escape as any label); the raw token stays in the JSON. `words` groups the pieces
into words: by the word ids `attn capture` stores (the tokenizer's own word boundaries), else by
the pieces' marks.
"""

from __future__ import annotations

import re


def _byte_table() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: each stand-in character to its byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


BYTES = _byte_table()
BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
SPACE_MARKS = ("Ġ", "Ċ")  # a byte-level vocabulary's space and line break: only such a vocabulary has them
PIECE = "##"  # WordPiece: a word's later pieces


def style(tokens: list[str]) -> str | None:
    """The tokenizer the labels come from: "bytes" (byte-level BPE), "sentencepiece",
    "wordpiece", or None (labels a person wrote)."""
    if any(mark in t for t in tokens for mark in SPACE_MARKS):
        return "bytes"
    if any(t.startswith("▁") or BYTE_TOKEN.fullmatch(t) for t in tokens):
        return "sentencepiece"
    if any(t.startswith(PIECE) and len(t) > 2 for t in tokens):
        return "wordpiece"
    return None


def _decoded(token: str, kind: str | None) -> str:
    if kind == "bytes" and all(c in BYTES for c in token):
        return bytes(BYTES[c] for c in token).decode("utf-8", errors="replace")
    if kind == "sentencepiece":
        match = BYTE_TOKEN.fullmatch(token)
        return chr(int(match.group(1), 16)) if match else token.replace("▁", " ")
    return token


def readable(tokens: list[str]) -> list[str]:
    """Each token as its text, its leading and trailing spaces dropped (a token of spaces alone
    as `␣`); labels a person wrote are returned as they are."""
    kind = style(tokens)
    if kind is None:
        return list(tokens)
    found = []
    for token in tokens:
        text = _decoded(token, kind)
        found.append(text.strip(" ") or "␣" * len(text) or token)
    return found


def starts_word(token: str, kind: str | None) -> bool:
    """Whether a token starts a word, by its marks (when no word ids were stored)."""
    if kind == "wordpiece":
        return not token.startswith(PIECE)
    if kind == "bytes":
        return token[:1] in SPACE_MARKS or not token[:1].isalnum()
    if kind == "sentencepiece":
        return token.startswith("▁") or not token[:1].isalnum()
    return True


def words(tokens: list[str], word_ids: list | None = None) -> list[tuple[str, list[int]]]:
    """(the word's text, its tokens' positions) for each word in order: tokens sharing a word id
    (null: a token alone, as special tokens are), else joined by their marks."""
    kind = style(tokens)
    shown = readable(tokens)
    groups: list[list[int]] = []
    for i, token in enumerate(tokens):
        if word_ids is not None:
            same = groups and word_ids[i] is not None and word_ids[groups[-1][-1]] == word_ids[i]
        else:
            same = groups and not starts_word(token, kind)
        if same:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [("".join(_piece(shown[i], kind, n) for n, i in enumerate(group)), group) for group in groups]


def _piece(text: str, kind: str | None, place: int) -> str:
    return text[len(PIECE):] if kind == "wordpiece" and place and text.startswith(PIECE) else text
