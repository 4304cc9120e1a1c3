"""Running text -> sentences by Wikimedia's sentencex, in the text's language; a piece cut off
after an abbreviation ("approx. 20 ml") starts in lower case and is merged back, except in
lower-cased text. Why, its scores and its windows: docs/data_prep.md, "Sentence segmentation".
"""

import re

import sentencex

from bert_jax import cli

DEFAULT_LANGUAGE = "en"
# A Wikimedia language code: "en", "de", "zh-min-nan", "be-tarask", "simple" (Simple English).
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*|simple")


def language_code(code: str) -> str:
    """A language code as sentencex takes it ("simple" is English); a UserError for no code."""
    code = code.strip().lower().replace("_", "-")
    if not _LANGUAGE_CODE.fullmatch(code):
        raise cli.UserError(
            f"{code!r} is not a language code: pass an ISO 639 / Wikimedia code such as en, de, "
            "fr, zh or zh-min-nan"
        )
    return DEFAULT_LANGUAGE if code == "simple" else code


def split_sentences(text: str, language: str = DEFAULT_LANGUAGE) -> list[str]:
    """Paragraphs at newlines, then sentences by `language`'s rules, stripped, none empty."""
    sentences: list[list[str]] = []  # pieces, joined at the end: many merges stay linear
    for paragraph in text.split("\n"):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        first = True  # a paragraph's first sentence is never merged into the previous paragraph
        cased = not paragraph.islower()
        for sentence in _segment(language, paragraph):
            sentence = sentence.strip()
            if not sentence:
                continue
            if cased and not first and sentence[0].islower():
                sentences[-1].append(sentence)
            else:
                sentences.append([sentence])
            first = False
    return [" ".join(pieces) for pieces in sentences]


# Whitespace of more than one UTF-8 byte, on which sentencex 1.0.32 can panic: given as " ".
_WIDE_SPACE = re.compile("[\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")

# sentencex is quadratic in some text: a longer paragraph is segmented a window at a time, keeping
# the sentences that end _MARGIN characters before the window's end; a sentence filling _LONGEST
# is cut there.
_WINDOW = 20_000
_MARGIN = 200
_LONGEST = 20_000
# Quote pairing costs (quote marks) x (characters): a window also ends at its (size /
# _QUOTE_SHARE)-th quote mark (prose has far fewer), never before 2 x _MARGIN characters.
_QUOTE = re.compile("[\"'`\u00ab\u00bb\u2018-\u201f\u2039\u203a\u300a\u300b\u300c-\u300f]")
_QUOTE_SHARE = 10


def _pieces_from(language: str, text: str, start: int, stop: int, margin: int) -> list | None:
    """(position, sentence) of the sentences of text[start:stop], segmented with the `margin`
    characters before `start` as context; None when, so segmented, none starts at `start`."""
    context = max(0, start - margin)
    window, pieces, at = text[context:stop], [], 0
    for piece in sentencex.segment(language, window):
        position = window.find(piece, at)
        if position < 0:
            return None
        at = position + len(piece)
        if context + position < start:
            continue  # a sentence of the context
        if not pieces and context < start and context + position != start:
            return None
        pieces.append((context + position, piece))
    return pieces if pieces or context == start else None


def _windowed(language: str, text: str) -> list[str]:
    out, start, size = [], 0, _WINDOW
    while True:
        stop = min(start + size, len(text))
        for count, quote in enumerate(_QUOTE.finditer(text, start, stop)):
            if count == size // _QUOTE_SHARE:
                stop = min(len(text), max(quote.start(), start + 2 * _MARGIN))
                break
        pieces = _pieces_from(language, text, start, stop, _MARGIN)
        if pieces is None:  # the context moved a sentence's start: this window without it
            pieces = _pieces_from(language, text, start, stop, 0)
        if pieces is None:  # (never seen) a piece that is not a substring
            return list(sentencex.segment(language, text))
        if stop == len(text):
            return out + [piece for _, piece in pieces]
        kept = [piece for position, piece in pieces if position + len(piece) <= stop - _MARGIN]
        if kept and len(kept) < len(pieces):
            out += kept
            start, size = pieces[len(kept)][0], _WINDOW
        elif size < _LONGEST:
            size *= 2  # one sentence fills the window
        else:  # a sentence longer than _LONGEST
            cut = text.rfind(" ", (start + stop) // 2, stop - _MARGIN)
            cut = cut if cut > start else stop - _MARGIN
            out.append(text[start:cut])
            start, size = cut, _WINDOW


def _segment(language: str, paragraph: str) -> list[str]:
    spaced = _WIDE_SPACE.sub(" ", paragraph)
    if spaced == paragraph:
        return _windowed(language, paragraph)
    out, start = [], 0
    for piece in _windowed(language, spaced):
        at = spaced.find(piece, start)
        if at < 0:  # not a substring (never seen): the piece as sentencex gave it
            out.append(piece)
            continue
        out.append(paragraph[at : at + len(piece)])
        start = at + len(piece)
    return out
