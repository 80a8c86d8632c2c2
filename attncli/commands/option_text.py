"""The text of `attn compute`'s problem options (--scale, --tiles, --q-positions, --alibi-slopes,
--row, …) as the values they stand for; an error names the option it came from."""

import math
import re

from attncli.base import tokens
from attncli.base.errors import InputError, comma_items, did_you_mean, plural, quote


def scale(text: str | None) -> float | None:
    """--scale: a number (0.7071), a fraction (1/1.4142), or either side a square root
    (1/sqrt(2), 1/√2). NaN and infinities pass through: the problem check names them."""
    if text is None:
        return None

    def number(part: str) -> float:
        part = part.strip()
        root = part.startswith("√") or (part.lower().startswith("sqrt(") and part.endswith(")"))
        inner = part[1:] if part.startswith("√") else part[5:-1] if root else part
        value = float(inner)
        if root and not value >= 0:
            raise ValueError(part)
        return value ** 0.5 if root else value

    try:
        top, slash, bottom = text.partition("/")
        value = number(top) / number(bottom) if slash else number(top)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise InputError(f"{quote(text)} is not a scale; expected a number (0.7071), a fraction (1/1.4142) "
                         "or a square root (1/sqrt(2), 1/√2)", "--scale") from None
    return value


def mask_fill(text: str):
    """--mask-fill: -inf, min (the dtype's most negative finite number) or a number (-1e4); the
    reader (attncli/document/reading.py) checks the number."""
    if text in ("-inf", "min"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{quote(text)} is not a mask fill; expected -inf, min, -1e4, -1e9 or a number",
                         "--mask-fill") from None
    if value == -math.inf and text.strip().lower() in ("-infinity", "-inf"):
        return "-inf"
    if not math.isfinite(value):  # -1e400 reads as −∞: past float64's range, not a number it can hold
        past = " (past float64's range)" if math.isinf(value) else ""
        raise InputError(f"{quote(text)} reads as {value}{past}, not a finite number; expected -inf, min or a "
                         "finite number such as -1e4", "--mask-fill")
    return value


def tile_sizes(text: str | None) -> tuple[int, int] | None:
    """--tiles BQ,BK: two whole numbers of at least 1 (larger than the problem: one tile)."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) < 40 and int(p) >= 1 for p in parts):
        raise InputError(f"got {quote(text)}; expected two whole numbers BQ,BK of at least 1 (query rows "
                         "and keys per tile), such as 2,2", "--tiles")
    return int(parts[0]), int(parts[1])


def labels(option: str):
    """--query-labels / --key-labels: comma-separated labels (a blank one among them is kept, as a
    document's may be); a whole value of nothing is refused (`option` names it): labels are off when
    the option is left out."""
    def read(text: str | None) -> list[str] | None:
        if text is None:
            return None
        if not text.strip():
            raise InputError(f"is {quote(text)}, which gives no label; labels are off when the option is left out: "
                             f"drop {option}", option)
        return [label.strip() for label in text.split(",")]
    return read


# No option value means "off": a variant is off when its option is left out. A whole value that
# is empty, none or null (`--softcap ""`, `--sinks null`) is refused, saying so; inside a list,
# none or nothing is one null entry (`--window none,0`: an unbounded side).
OFF_WORDS = ("", "none", "null")


def values(text: str | None, option: str | None = None) -> list | None:
    """A comma-separated option (--q-positions, --window, --key-mask) as the JSON list it stands
    for: whole numbers, true/false, none/null or nothing for null; anything else is passed on as
    text for the problem check to name. A whole value of nothing, none or null is refused
    (`option` names it): an option is off when it is left out."""
    if text is None:
        return None
    if option is not None and text.strip().lower() in OFF_WORDS:
        raise InputError(f"is {quote(text)}, which gives no value; an option is off when it is left out: "
                         f"drop {option} (and the key from the file, if it has one)", option)
    words = {"": None, "none": None, "null": None, "true": True, "false": False}
    items = []
    for word in text.split(","):
        word = word.strip().replace("−", "-")
        if word.lower() in words:
            items.append(words[word.lower()])
        elif re.fullmatch(r"[+-]?[0-9]{1,30}", word):
            items.append(int(word))
        else:
            try:
                items.append(float(word))
            except ValueError:
                items.append(word)
    return items


def one(items: list | None):
    """One number given alone (--softcap 30, --sinks 0.5) as itself, not a list of one."""
    return items[0] if items is not None and len(items) == 1 else items


def alibi(paper: bool, slopes: str | None):
    """The `alibi` key: true (--alibi), the slopes (--alibi-slopes), or None."""
    if paper and slopes is not None:
        raise InputError("gives ALiBi's slopes, and --alibi asks for the paper's; give one of them",
                         "--alibi-slopes")
    return True if paper else values(slopes, "--alibi-slopes")


def rows(chosen: list[str] | None, query_labels: list[str] | None, lq: int) -> list[int] | None:
    """--row values to row indices: a label wins (`1` is the query labelled "1" when there is one);
    `#N` is always index N, and a plain N the index when no label is N. A label that names several
    queries is refused, listing their indices as `#N`."""
    if not chosen:
        return None
    rows = []
    for value in chosen:
        number = value[1:] if value.startswith("#") else value
        found = [i for i, label in enumerate(query_labels or []) if label == value]
        if len(found) > 1:
            raise InputError(f"{quote(value)} labels {len(found)} queries ({', '.join(f'#{i}' for i in found)}); "
                             f"give the one to explain by index: --row {' or --row '.join(f'#{i}' for i in found)}",
                             "--row")
        if found:
            rows.append(found[0])
        elif number.isascii() and number.isdigit() and len(number) < 19 and int(number) < lq:
            # ASCII only: str.isdigit accepts "²" and "٣", which int() refuses or reads as 3.
            rows.append(int(number))
        else:
            names = ", ".join(query_labels) + f" (by index #0 to #{lq - 1})" if query_labels else f"0 to {lq - 1}"
            hint = did_you_mean(value, query_labels, 0.5) if query_labels else ""
            raise InputError(f"no query {quote(value)}{hint}; the queries are {names}", "--row")
    return rows


def head(head: int, heads: int) -> int:
    if not 0 <= head < heads:
        raise InputError(f"head is {head}; this problem has heads 0 to {heads - 1}", "--head")
    return head


def picks(chosen: list[str] | None, names: list[str] | None, n: int, flag: str, word_ids: list | None = None,
          what: str = "query") -> list[tuple[str, list[int]]] | None:
    """--query / --key values (repeatable, each comma-separated) as (name, positions) in the order
    given: `#N` is position N; a label (the token as given, or as read: `Ġit` as `it`) is its one
    position; a word (`scooter`: the tokens sc, ##oot, ##er, by the stored word ids or the tokens'
    marks) is its tokens' positions; a plain N is position N when nothing is called N. A label or
    word found at several places is refused, naming each as #N."""
    if not chosen:
        return None
    raw = list(names) if names else [str(i) for i in range(n)]
    shown = tokens.readable(raw)
    groups = tokens.words(raw, word_ids if word_ids is not None and len(word_ids) == n else None)
    found: list[tuple[str, list[int]]] = []
    expected = f"{what} labels, words or positions (#N), comma-separated"
    for value in (part for text in chosen for part in comma_items(text, expected, flag)):  # '': refused
        number = value[1:] if value.startswith("#") else None
        if number is not None and number.isascii() and number.isdigit() and len(number) < 19 and int(number) < n:
            found.append((shown[int(number)], [int(number)]))
            continue
        places = [[i] for i, label in enumerate(raw) if label == value] or \
            [[i] for i, label in enumerate(shown) if label == value] or \
            [group for word, group in groups if word == value and len(group) > 1] or \
            [[i] for i, label in enumerate(shown) if label.lower() == value.lower()] or \
            [group for word, group in groups if word.lower() == value.lower() and len(group) > 1]
        if len(places) > 1:
            where = [f"#{group[0]}" if len(group) == 1 else f"#{group[0]}–#{group[-1]}" for group in places]
            raise InputError(f"{quote(value)} names {len(places)} {what} places ({', '.join(where)}); give the one "
                             f"you mean by index: {' or '.join(f'{flag} #{group[0]}' for group in places)}", flag)
        if places:
            found.append((value, places[0]))
        elif value.isascii() and value.isdigit() and len(value) < 19 and int(value) < n:
            found.append((shown[int(value)], [int(value)]))
        else:
            listed = ", ".join(f"{label} (#{i})" for i, label in enumerate(shown[:40])) + (" …" if n > 40 else "")
            hint = did_you_mean(value, shown, 0.5) if names else ""
            every = f"the {plural(n, what)} are" if n != 1 else f"the one {what} is"
            raise InputError(f"no {what} {quote(value)}{hint}; {every} {listed}", flag)
    return found


def positions(picked: list[tuple[str, list[int]]] | None) -> list[int]:
    """Every position the picks name, in order, once."""
    return list(dict.fromkeys(i for _, group in picked or () for i in group))
