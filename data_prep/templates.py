"""Inline templates that carry words, rendered as the text MediaWiki shows (`_RENDER`: name -> how
to render); every other template is dropped. Which, and why: docs/data_prep.md, "Templates that
carry words". Nothing rendered depends on the day: records must not change with their date.
"""

import re
from collections.abc import Callable

MAX_DEPTH = 6  # of nesting rendered: each character is scanned at most this often
_MAX_NUMBERED = 20  # "99999=" must not make a list of that length
# Splits a template's inside: nesting openers and closers, and the parameter separator.
_PARAMETER_TOKEN = re.compile(r"\{\{|\}\}|\[\[|\]\]|\||=")
_NAME = re.compile(r"[^{}|\[\]]*+")
_SPACES = re.compile(r"[\s_]+")
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_DMY = frozenset({"y", "yes", "true", "1"})


class Arguments:
    """A template's parameters, rendered and stripped: positional (1-based) and named."""

    def __init__(self, positional: list[str], named: dict[str, str]):
        self.positional, self.named = positional, named

    def __getitem__(self, i: int) -> str:
        return self.positional[i - 1] if 0 < i <= len(self.positional) else ""

    def get(self, name: str) -> str:
        return self.named.get(name, "")


def _text(i: int) -> Callable[[Arguments], str]:
    return lambda a: a[i]


def _wrapped(left: str, right: str, i: int = 1) -> Callable[[Arguments], str]:
    return lambda a: f"{left}{a[i]}{right}" if a[i] else ""


# {{convert|55|to|80|cm|in}}: "55 to 80 centimetres", the converted figure left out; the units of
# the real samples (another is shown as its code).
_RANGE_WORDS = frozenset({"to", "to(-)", "and", "and(-)", "or", "by", "x", "×", "+", "+/-", "±"})
_RANGE_DASHES = frozenset({"-", "–", "—"})
_UNIT_NAMES = {  # code: (singular, plural, symbol)
    "km": ("kilometre", "kilometres", "km"), "m": ("metre", "metres", "m"),
    "cm": ("centimetre", "centimetres", "cm"), "mm": ("millimetre", "millimetres", "mm"),
    "mi": ("mile", "miles", "mi"), "nmi": ("nautical mile", "nautical miles", "nmi"),
    "ft": ("foot", "feet", "ft"), "in": ("inch", "inches", "in"),
    "kg": ("kilogram", "kilograms", "kg"), "lb": ("pound", "pounds", "lb"),
    "g": ("gram", "grams", "g"), "oz": ("ounce", "ounces", "oz"),
    "t": ("tonne", "tonnes", "t"), "ha": ("hectare", "hectares", "ha"),
    "acre": ("acre", "acres", "acre"), "km2": ("square kilometre", "square kilometres", "km²"),
    "sqmi": ("square mile", "square miles", "sq mi"), "m2": ("square metre", "square metres", "m²"),
    "m3": ("cubic metre", "cubic metres", "m³"), "C": ("°C", "°C", "°C"), "F": ("°F", "°F", "°F"),
    "°C": ("°C", "°C", "°C"), "°F": ("°F", "°F", "°F"), "K": ("kelvin", "kelvins", "K"),
    "m/s": ("metre per second", "metres per second", "m/s"),
    "ft/s": ("foot per second", "feet per second", "ft/s"),
    "km/h": ("kilometre per hour", "kilometres per hour", "km/h"),
    "mph": ("mile per hour", "miles per hour", "mph"),
    "oilbbl": ("barrel", "barrels", "bbl"), "e6ha": ("million hectares", "million hectares", "Mha"),
    "koilbbl/d": ("thousand barrels per day", "thousand barrels per day", "kbbl/d"),
    "st": ("stone", "stone", "st"),
}  # fmt: skip
# A value in several units ({{convert|6|ft|2|in|m}}: "6 feet 2 inches").
_NUMBER = re.compile(r"[\d.,/+]+")


def _convert(a: Arguments) -> str:
    values, k = [a[1]], 2
    while a[k] in _RANGE_WORDS or a[k] in _RANGE_DASHES:
        if a[k] in _RANGE_DASHES:
            values[-1] += "–" + a[k + 1]
        else:
            values += [a[k], a[k + 1]]
        k += 2
    parts = [(values, a[k])]
    while _NUMBER.fullmatch(a[k + 1]) and a[k + 2] in _UNIT_NAMES:
        parts.append(([a[k + 1]], a[k + 2]))
        k += 2
    adjective = a.get("adj") == "on" and a.get("abbr") not in ("on", "in")  # "6-foot-1-inch"
    return ("-" if adjective else " ").join(_quantity(values, unit, a) for values, unit in parts)


def _quantity(values: list[str], unit: str, a: Arguments) -> str:
    if unit in _UNIT_NAMES:
        singular, plural, symbol = _UNIT_NAMES[unit]
        if a.get("abbr") in ("on", "in"):
            unit = symbol
        elif a.get("adj") == "on":  # an adjective: "a 5-mile-wide crater"
            return "-".join(v for v in (*values, singular) if v)
        else:
            unit = singular if values == ["1"] else plural
            if a.get("sp") == "us":  # American spelling: "kilometers"
                unit = unit.replace("metre", "meter")
    return " ".join(v for v in (*values, unit) if v)


def _date(year: str, month: str = "", day: str = "", dmy: bool = True) -> str:
    """ "1 April 1947" (or "April 1, 1947"), "April 1947", "1947": what the date templates show."""
    if month.isascii() and month.isdigit() and 1 <= int(month) <= 12:
        month = _MONTHS[int(month) - 1]
    day = day.lstrip("0")
    if not month:
        return year
    if not day:
        return f"{month} {year}"
    return f"{day} {month} {year}" if dmy else f"{month} {day}, {year}"


def _as_of(a: Arguments) -> str:
    """{{as of|2015|6|30}} -> "As of 30 June 2015"; lc=y lower-cases, alt= replaces the text."""
    if a.get("alt"):
        return a.get("alt")
    date = _date(a[1], a[2], a[3], dmy=a.get("df").upper() != "US")
    if a.get("bare").lower() in _DMY:
        return date
    lead = "since" if a.get("since") else "as of"
    return f"{lead if a.get('lc').lower() in _DMY else lead.capitalize()} {date}"


def _quote(a: Arguments) -> str:
    """{{quote|text|author}}: the quotation, a paragraph of its own (the author is a caption)."""
    text = a[1] or a.get("text") or a.get("quote")
    return f"\n\n{text}\n\n" if text else ""


def _nihongo(a: Arguments) -> str:
    """{{nihongo|headquarters|本部道場|honbu dōjō}} -> "headquarters (本部道場, honbu dōjō)"."""
    inside = ", ".join(p for p in (a[2], a[3]) if p)
    return f"{a[1]} ({inside})" if a[1] and inside else a[1] or inside


# IPAc-en's labels ("lang" -> "English pronunciation:"): notes beside the transcription.
_IPAC_LABELS = frozenset(
    {"lang", "local", "pron", "also", "uk", "us", "ipa", "audio", "uklang", "uspron", "ukpron"}
)


def _ipac(a: Arguments) -> str:
    """{{IPAc-en|ˈ|æ|n|s|i}} -> "/ˈænsi/" ("_" is a space, "'" and "," the stress marks)."""
    parts = [p for p in a.positional if p.lower() not in _IPAC_LABELS]
    text = "".join(parts).replace("_", " ").replace("'", "ˈ").replace(",", "ˌ")
    return f"/{text}/" if text else ""


def _frac(a: Arguments) -> str:
    """{{frac|3}} -> "1⁄3", {{frac|3|2}} -> "3⁄2", {{frac|1|1|2}} -> "1 1⁄2" (U+2044)."""
    parts = [p for p in a.positional[:3] if p]
    if len(parts) == 1:
        return f"1⁄{parts[0]}"
    if len(parts) == 2:
        return f"{parts[0]}⁄{parts[1]}"
    return f"{parts[0]} {parts[1]}⁄{parts[2]}" if parts else ""


_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-zA-Z0-9]+)*")


def _ipa(a: Arguments) -> str:
    """{{IPA|/ˈpærɪs/}} -> "/ˈpærɪs/"; since 2024 also {{IPA|fr|paʁi}} -> "[paʁi]"."""
    if a[2] and _LANGUAGE_CODE.fullmatch(a[1]):
        return f"[{a[2]}]"
    return a[1]


def _val(a: Arguments) -> str:
    """{{val|6.241|e=18|u=C}} -> "6.241×10^18 C"."""
    text = a[1] + (f"±{a[2]}" if a[2] else "")
    if a.get("e"):
        text += f"×10^{a.get('e')}"
    unit = a.get("u") or a.get("ul")
    return f"{text} {unit}" if unit else text


# The date templates ({{birth date|1947|4|1|df=y}}): the first three parameters; no age.
_DATES = (
    "birth date", "death date", "start date", "end date", "birth date and age",
    "death date and age", "start date and age", "end date and age", "birth year and age",
    "death year and age", "film date", "dob",
)  # fmt: skip
# Templates shown as their first parameter: formatting, a formula, a transcription.
_PLAIN = (
    "nowrap", "nobr", "small", "smaller", "big", "large", "sc", "smallcaps", "math", "mvar",
    "not a typo", "chem2", "sup", "sub",
)  # fmt: skip
_RENDER: dict[str, Callable[[Arguments], str]] = {
    "convert": _convert,
    # {{cvt}} is {{convert}} with abbr=on: "3 mi", where {{convert}} shows "3 miles".
    "cvt": lambda a: _convert(Arguments(a.positional, {"abbr": "on", **a.named})),
    # {{langx|fr|Paris}}: what {{lang-fr|Paris}} became on the English Wikipedia in 2024.
    **dict.fromkeys(("lang", "rtl-lang", "langx"), _text(2)),
    "ipa": _ipa,
    **dict.fromkeys(("transl", "transliteration"), lambda a: (a.positional or [""])[-1]),
    **dict.fromkeys(_PLAIN, _text(1)),
    **dict.fromkeys(("angbr", "vr"), _wrapped("⟨", "⟩")),
    **dict.fromkeys(("quote", "blockquote", "quotation", "cquote"), _quote),
    **dict.fromkeys(_DATES, lambda a: _date(a[1], a[2], a[3], dmy=a.get("df").lower() in _DMY)),
    "ipac-en": _ipac,
    "respell": lambda a: "-".join(a.positional),
    "as of": _as_of,
    "chem": lambda a: "".join(a.positional),
    "nihongo": _nihongo,
    "val": _val,
    # {{circa|1480}}: "c. 1480" (a biography's dates: "(c. 1480 – 1530)"); {{fl.|1480}}: "fl. 1480".
    **dict.fromkeys(("circa", "c."), lambda a: f"c. {a[1]}".strip()),
    **dict.fromkeys(("floruit", "fl."), lambda a: f"fl. {a[1]}".strip()),
    **dict.fromkeys(("frac", "sfrac", "fraction"), _frac),
    "e": lambda a: f"×10^{a[1]}",
    # As MediaWiki's output has them, entities: an apostrophe beside two or three must not be read
    # as italics or bold (''Eagle''{{'s}} is "Eagle's").
    "'s": lambda a: "&#39;s",
    "'": lambda a: "&#39;",
    "' \"": lambda a: '&#39;"',
    "\" '": lambda a: '"&#39;',
    "=": lambda a: "=",
    "!": lambda a: "|",
    "nbsp": lambda a: " ",
    **dict.fromkeys(("snd", "spaced ndash"), lambda a: " – "),
    "ndash": lambda a: "–",
    **dict.fromkeys(("mdash", "mdashb"), lambda a: "—"),
    "music": lambda a: {"flat": "♭", "sharp": "♯", "natural": "♮"}.get(a[1].lower(), ""),
}


def _renderer(name: str) -> Callable[[Arguments], str] | None:
    """The table's entry for a template name; {{lang-sq|...}} and {{IPA-fr|...}} by prefix."""
    found = _RENDER.get(name)
    if found is None and name.startswith("lang-"):
        return _text(1)  # {{lang-sq|Shqipëri}}: the text (MediaWiki prefixes "Albanian: ")
    if found is None and name.startswith("ipa-"):
        return _wrapped("[", "]")  # {{IPA-fr|alɛ̃ kɔn|lang}}
    return found


def _parameters(inner: str) -> list[tuple[str | None, str]]:
    """(name or None, raw value) of each parameter: split at "|"s outside nested {{ }} and [[ ]];
    named where an "=" lies outside them."""
    out, depth, start, equals = [], 0, 0, -1
    for token in _PARAMETER_TOKEN.finditer(inner):
        text = token.group()
        if text in ("{{", "[["):
            depth += 1
        elif text in ("}}", "]]"):
            depth = max(depth - 1, 0)
        elif depth:
            continue
        elif text == "=":
            equals = token.start() if equals < 0 else equals
        else:
            out.append((start, equals, token.start()))
            start, equals = token.end(), -1
    out.append((start, equals, len(inner)))
    return [
        (None, inner[s:e]) if eq < 0 else (inner[s:eq].strip().lower(), inner[eq + 1 : e])
        for s, eq, e in out[1:]  # the first piece is the name
    ]


def template_name(source: str) -> str:
    """A template's name as the table keys it: lower case, "_" a space, spaces squeezed."""
    name = _NAME.match(source, 2).group()
    return _SPACES.sub(" ", name).strip().lower().removeprefix("template:")


def render(source: str, expand: Callable[[str, int], str], depth: int = 0) -> str:
    """The text of one "{{...}}": the table's rendering, or "" for a template not in it.
    `expand(text, depth)` renders the templates nested in a parameter."""
    render_as = _renderer(template_name(source)) if depth <= MAX_DEPTH else None
    if render_as is None:
        return ""
    positional, named = [], {}
    for name, value in _parameters(source[2:-2]):
        if "{{" in value:
            value = expand(value, depth + 1)
        if name is None:
            positional.append(value.strip())
        else:
            named[name] = value.strip()
    for name in [n for n in named if n.isascii() and n.isdigit() and 0 < int(n) <= _MAX_NUMBERED]:
        # "1=" names the first positional parameter ({{nowrap|1=x = y}}: the "=" is text).
        positional += [""] * (int(name) - len(positional))
        positional[int(name) - 1] = named.pop(name)
    return render_as(Arguments(positional, named))
