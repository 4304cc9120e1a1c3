"""Running text -> sentences, for every input that is not already one sentence per line: Wikimedia's
sentencex, with the rules of the text's language (--language; a dump's own <siteinfo> overrides
it). A piece sentencex cut off after an abbreviation ("approx. 20 ml") starts in lower case and is
merged back, except in lower-cased text. Why sentencex, and its scores: docs/data_prep.md,
"Sentence segmentation".
"""

import re

import sentencex

from bert_jax import cli

DEFAULT_LANGUAGE = "en"
# A Wikimedia language code: "en", "de", "zh-min-nan", "be-tarask", "simple" (Simple English).
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*|simple")


def language_code(code: str) -> str:
    """A language code as sentencex takes it ("simple" is English); ValueError for one that is
    not a code."""
    code = code.strip().lower().replace("_", "-")
    if not _LANGUAGE_CODE.fullmatch(code):
        raise cli.UserError(
            f"{code!r} is not a language code: pass an ISO 639 / Wikimedia code such as en, de, "
            "fr, zh or zh-min-nan"
        )
    return DEFAULT_LANGUAGE if code == "simple" else code


def split_sentences(text: str, language: str = DEFAULT_LANGUAGE) -> list[str]:
    """Paragraphs at newlines, then sentences by `language`'s rules, stripped; empty pieces
    dropped."""
    # Each sentence's pieces, joined at the end: a long run of merges stays linear.
    sentences: list[list[str]] = []
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


# Whitespace of more than one UTF-8 byte. sentencex (1.0.32) panics (a Rust PanicException, which
# no `except Exception` catches) on an ASCII capital, such a space and a period ("vitamin
# B\u00a0."): segmented with " " in their place, one character too, so every piece is cut from
# the paragraph as it was.
_WIDE_SPACE = re.compile("[\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


# Characters sentencex is given at once. Its time grows with the square of the text's length when
# sentence ends have no space after them (Chinese, Japanese, Hindi written so: 90 kB of Chinese in
# 0.2 s, 360 kB in 3 s, a 1 MB paragraph in minutes), so a longer paragraph is segmented a window
# at a time: a window keeps the sentences that end at least _MARGIN characters before its end
# (their ends were decided with the text after them), and the next starts where the first sentence
# it did not keep starts, with the _MARGIN characters before as context. The sentences are one
# call's, except where a quote or bracket (inside which sentencex does not split) runs across a
# window's start; paragraphs up to _WINDOW characters, nearly all, are one call. A sentence that
# fills a window of _LONGEST characters is cut (at a space in its second half if it has one):
# sentencex is quadratic on some text it does not split at all (a run of unpaired quotes, "' "
# repeated, took 3 s at 400 kB, minutes at 1 MB), so a window never grows past _LONGEST.
_WINDOW = 20_000
_MARGIN = 200
_LONGEST = 20_000
# sentencex's quote pairing costs (quote marks) x (characters) a call: 20,000 characters of `"「`
# took 2 s a window, 100 kB 159 s. A window also ends at its _QUOTE_SHARE-th quote mark (2,000 in
# 20,000 characters: prose has far fewer), though never before 2 x _MARGIN characters.
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
    """sentencex's sentences of `text`, in windows of about _WINDOW characters."""
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
    """sentencex's sentences of `paragraph`, as substrings of it."""
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
