"""Wikitext -> plain prose paragraphs and sentences (docs/data_prep.md, "Wikitext to prose"), in
linear time: no pattern scans to the page's end from each of many starts (elements are found by
their tags in order, each regex stops at the next bracket, brackets nest by a stack).
"""

import bisect
import html
import re
from typing import NamedTuple

from data_prep import templates
from data_prep.sentences import split_sentences

# Marks no XML text holds: where inline math was removed (its sentence lost words), and the end of
# an unfinished paragraph followed by a removed block (its last sentence lost what it went on with).
HOLE = "\x01"
OPEN_END = "\x02"

# Sections of links and citations: skipped up to the next heading of the same or a higher level.
SKIPPED_SECTIONS = frozenset(
    {
        "see also", "references", "external links", "further reading", "notes", "bibliography",
        "sources", "citations", "footnotes", "works cited", "notes and references",
        "references and notes", "gallery",
    }
)  # fmt: skip
# Elements dropped with their content (other tags go, their content stays); <ref> goes first.
_DROPPED_TAGS = (
    "references|gallery|math|chem|ce|timeline|imagemap|score|syntaxhighlight|source|hiero|graph|"
    "mapframe|maplink|templatedata|includeonly|table|pre|inputbox|categorytree"
)
# Comments, <nowiki> and inline code, read in one pass as MediaWiki's preprocessor reads them.
_COMMENT_OR_NOWIKI = re.compile(
    r"<!--|<(nowiki)(?:\s[^<>/]*)?>|<(syntaxhighlight|source)\s(?:[^<>]*?\s)?inline(?=[\s=>])[^<>/]*>",
    re.I,
)
_LITERAL_CLOSE = {
    name: re.compile(rf"</{name}\s*>", re.I) for name in ("nowiki", "syntaxhighlight", "source")
}
_NEXT_COMMENT = re.compile(r"[ \t]*<!--")
_LINE_SPACE = re.compile(r"[ \t]*")
# A <nowiki>'s markup characters as entities, which no later step reads as markup.
_LITERAL = str.maketrans({c: f"&#{ord(c)};" for c in "{}[]|'<>=!*:_~-"} | {"\n": " "})
# A self-closed element (<ref name="CNN/Money" />): a "/" before its ">", as MediaWiki reads it.
_SELF_CLOSED = re.compile(rf"<(?:ref|{_DROPPED_TAGS})\b[^<>]*/\s*>", re.I)
# An opening tag (group 1) or a closing one, which has no attributes (group 2), as MediaWiki's.
_REF_TAG = re.compile(r"<(?:(ref)\b[^<>]*|/(ref)\s*)>", re.I)
_DROPPED_TAG = re.compile(rf"<(?:({_DROPPED_TAGS})\b[^<>]*|/({_DROPPED_TAGS})\s*)>", re.I)
_BRACE_RUN = re.compile(r"\{\{+|\}\}+")
_TABLE_TOKEN = re.compile(r"^[ \t]*(?:\{\||\|\})", re.M)
# A run of "]"s is one token, its closers paired from its end ("[http://x a]]]"), as MediaWiki's.
_LINK_TOKEN = re.compile(r"\[\[|\]\]+")
# Links that are not text: files and categories (English and large Wikipedias' names) and
# interlanguage links (a language code); a leading ":" makes one an ordinary link.
_FILE_AND_CATEGORY_NAMES = "|".join(
    map(
        re.escape,
        (
            "file image media category datei bild kategorie fichier catégorie archivo imagen "
            "categoría ficheiro arquivo imagem categoria immagine файл изображение категория "
            "文件 檔案 图像 圖像 分类 分類 ファイル 画像 カテゴリ plik grafika kategoria bestand "
            "afbeelding categorie fil kategori tiedosto kuva luokka soubor obrázek dosya resim "
            "ملف صورة تصنيف 파일 그림 분류 קובץ תמונה קטגוריה berkas gambar चित्र श्रेणी hình"
        ).split()
        + ["tập tin", "thể loại"],
    )
)
_NOT_TEXT_PREFIX = (
    rf"\s*(?:(?i:{_FILE_AND_CATEGORY_NAMES})|[a-z]{{2,3}}(?:-[a-z]{{2,8}})*|simple)\s*:"
)
_NOT_TEXT_TARGET = re.compile(_NOT_TEXT_PREFIX)
_NOT_TEXT_LINK = re.compile(rf"\[\[{_NOT_TEXT_PREFIX}[^\[\]]*\]\]")
# One "|" only: more is a file link of a namespace not listed, dropped by _render_link.
_PIPED_LINK = re.compile(r"\[\[[^\[\]|]*\|([^\[\]|]*)\]\]")
_PLAIN_LINK = re.compile(r"\[\[:?([^\[\]|]*)\]\]")
# The URL, then a label to the line's end; neither crosses a bracket (a "[" in a label, rare, is
# quadratic to allow); possessive quantifiers: no backtracking.
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|//)[^\s\[\]]*+(?:[^\S\n]++([^\[\]\n]*+))?\]", re.I)
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_BR = re.compile(r"<br\s*/?>", re.I)
# Block elements and a horizontal rule ("----"; the rest of its line is the next paragraph).
_BLOCK_TAG = re.compile(
    r"</?(?:blockquote|div|p|center|poem|h[1-6]|hr|ul|ol|li|dl|dt|dd)\b[^<>]*>|^-{4,}", re.I | re.M
)
# Behaviour switches in any script (__NOTOC__); lower-case Latin ("__init__") is text.
_MAGIC_WORD = re.compile(r"__(?:[A-Z]|[^\x00-\x7f\s])+(?:_(?:[A-Z]|[^\x00-\x7f\s])+)*__")
_BOLD_ITALIC = re.compile(r"'{2,}")
_QUOTES = re.compile(r"('{2,})")
# <nowiki/> keeps the apostrophes on either side apart: a mark in its place until they are read.
_NOWIKI_BREAK = "\x03"
_EMPTY_NOWIKI = re.compile(r"<nowiki\s*/>|<nowiki\s*>\s*</nowiki\s*>", re.I)
_SPACES = re.compile(r"\s+")
# Leftovers of removed templates (pronunciations, dates): "(; born 1947", "(ANSI, )", "( )".
_BRACKET_HEAD = re.compile(r"\(\s*[,;:][\s,;:]*")
_BRACKET_TAIL = re.compile(r"(?<![\s,;:])[\s,;:]*[,;:]\s*\)")  # from a run's start only
_EMPTY_BRACKETS = re.compile(r"(?:\s+|(?<!\w))\(\s*\)")  # not a call: "print()" is text
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
# A list's items removed with their templates: "particularly ,,, and." or ", ." left.
_EMPTY_SLOT = re.compile(r"[,;:]\s*[,;:.!?。]")
# Sentence-final marks of the large Wikipedias' scripts.
_ENDS = ".!?。！？…।۔؟។။།"
_SENTENCE_END = re.compile(f"[{_ENDS}]")
# Languages written without spaces between words: a sentence of theirs is one "word".
_UNSPACED = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "dz", "yue", "wuu", "gan", "lzh"})
# Languages whose sentences end with no mark (Thai, Lao): a paragraph without one is finished.
_UNMARKED = frozenset({"th", "lo"})
_WORD = re.compile(r"\w")
_FINISHED = re.compile(f"[{_ENDS}\"'”’»)\\]」』]$")
# Removed elements that stand inside a sentence: a HOLE is left where they were.
_INLINE_ELEMENT = re.compile(r"<(?:math|chem|ce|hiero)\b", re.I)
_TEMPLATE_NAME = re.compile(r"\{\{([^{}|]*+)(?:\||\}\})")
# Disambiguation templates besides English names holding "disambig": short forms and other large
# Wikipedias' main template, by exact name (their hatnotes share the stem).
_DISAMBIGUATION_NAMES = frozenset(
    {
        "dab", "disamb", "hndis", "geodis", "numberdis", "set index article", "sia",
        "begriffsklärung", "homonymie", "disambigua", "desambiguación", "desambiguação",
        "неоднозначность", "消歧义", "消歧義", "aimai", "曖昧さ回避", "ujednoznacznienie",
        "förgrening",
    }
)  # fmt: skip
# Cleanup tags on ordinary articles.
_NOT_DISAMBIGUATION = frozenset(
    {"disambiguation needed", "disambiguate", "disambiguation needed span"}
)


def is_disambiguation(title: str, text: str) -> bool:
    names = (match.group(1).strip().lower() for match in _TEMPLATE_NAME.finditer(text))
    return title.endswith("(disambiguation)") or any(
        name in _DISAMBIGUATION_NAMES or ("disambig" in name and name not in _NOT_DISAMBIGUATION)
        for name in names
    )


def _drop_elements(text: str, tag_pattern: re.Pattern) -> str:
    """Each opening tag (group 1) dropped with what follows up to the first closing tag (group 2)
    of its name (these elements do not nest); one never closed stays (later removed as a tag)."""
    tags = list(tag_pattern.finditer(text))
    closes: dict[str, list[re.Match]] = {}
    for tag in tags:
        if tag.group(2):
            closes.setdefault(tag.group(2).lower(), []).append(tag)
    spans, end = [], 0
    for tag in tags:
        if tag.group(1) and tag.start() >= end:
            candidates = closes.get(tag.group(1).lower(), [])
            k = bisect.bisect_left(candidates, tag.end(), key=re.Match.start)
            if k < len(candidates):
                end = candidates[k].end()
                spans.append((tag.start(), end))
    return _replace_pairs(text, spans, lambda e: HOLE if _INLINE_ELEMENT.match(e) else "")


def _comments_and_nowiki(text: str) -> str:
    """Comments removed, non-empty <nowiki>s' (and inline code's) content made literal text; empty
    ones are left for `paragraphs`. An element found unclosed closes no later one of its name."""
    out, position, closable = [], 0, set(_LITERAL_CLOSE)
    while match := _COMMENT_OR_NOWIKI.search(text, position):
        if match.group() == "<!--":
            start, end = match.start(), text.find("-->", match.end())
            while end >= 0 and (more := _NEXT_COMMENT.match(text, end + 3)):
                end = text.find("-->", more.end())  # comments in a row, as one
            if end < 0:
                out.append(text[position:start])
                return "".join(out)
            # Comments alone on a line go with the line: the paragraph around them goes on.
            after = _LINE_SPACE.match(text, end + 3).end()
            line_start = start - len(text[position:start]) + len(text[position:start].rstrip(" \t"))
            if line_start > 0 and text[line_start - 1] == "\n" and text[after : after + 1] == "\n":
                start, end = line_start, after - 2
            out.append(text[position:start])
            position = end + 3
            continue
        name = (match.group(1) or match.group(2)).lower()
        close = _LITERAL_CLOSE[name].search(text, match.end()) if name in closable else None
        content = close and text[match.end() : close.start()]
        if not content or content.isspace():
            if close is None:
                closable.discard(name)
            out.append(text[position : match.end()])
            position = match.end()
            continue
        if name != "nowiki":
            content = content.replace("&", "&#38;")  # code shows its entities as written
        if content[0] in "#; \t":  # no list item, no preformatted line
            content = f"&#{ord(content[0])};{content[1:]}"
        out += (text[position : match.start()], content.translate(_LITERAL))
        position = close.end()
    return "".join(out) + text[position:]


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a heading line: the level is the fewer "="s on a side, at most 6."""
    if not line.startswith("="):
        return None
    line = line.rstrip()
    lead = len(line) - len(line.lstrip("="))
    trail = len(line) - len(line.rstrip("="))
    level = min(lead, trail, 6, len(line) // 2)
    return (level, line[level : len(line) - level].strip()) if level else None


def _matched_pairs(text: str, tokens: re.Pattern, opener: str) -> list[tuple[int, int]]:
    """Outermost (start, end) spans of matched opener/closer tokens; unmatched tokens are text."""
    stack, spans = [], []
    for match in tokens.finditer(text):
        token = match.group()
        if token.strip() == opener:
            stack.append(match.start())
            continue
        closers = len(token) // 2 if token[0] == "]" else 1  # "]]]]": two closers, "]]]": one
        for end in range(match.end() - 2 * (closers - 1), match.end() + 1, 2):
            if not stack:
                break
            start = stack.pop()
            while spans and spans[-1][0] > start:
                spans.pop()  # absorbed by this outer one
            spans.append((start, end))
    return spans


def _replace_pairs(text: str, spans, render) -> str:
    out, position = [], 0
    for start, end in spans:
        out += (text[position:start], render(text[start:end]))
        position = end
    return "".join(out) + text[position:]


def _brace_pairs(text: str) -> tuple[list[tuple[int, int]], set[int]]:
    """Outermost spans of templates and parameters ({{{1}}}), and the parameters' starts: a closing
    run of braces takes 3 (parameter) or 2 (template) from the innermost open run, as MediaWiki's
    preprocessor does; the braces left match further out, unmatched ones are text."""
    stack, spans, parameters = [], [], set()  # stack: [start of the open run, its braces left]
    for match in _BRACE_RUN.finditer(text):
        if match.group()[0] == "{":
            stack.append([match.start(), len(match.group())])
            continue
        position, left = match.start(), len(match.group())
        while left >= 2 and stack:
            opened = stack[-1]
            count = 3 if min(opened[1], left) >= 3 else 2
            opened[1] -= count
            start, end = opened[0] + opened[1], position + count
            if opened[1] < 2:
                stack.pop()
            position, left = end, left - count
            while spans and spans[-1][0] > start:
                spans.pop()  # absorbed by this outer one
            spans.append((start, end))
            if count == 3:
                parameters.add(start)
    return spans, parameters


def _parameter(source: str, depth: int) -> str:
    """A template parameter ("{{{1|x}}}") as MediaWiki shows one outside a template: its default
    (to templates.py's depth), else itself."""
    _, bar, default = source[3:-3].partition("|")
    if not bar:
        return source
    return expand_templates(default, depth + 1) if depth < templates.MAX_DEPTH else ""


def expand_templates(text: str, depth: int = 0) -> str:
    """Every outermost template rendered by templates.py ("" for the rest), and every parameter."""
    spans, parameters = _brace_pairs(text)
    out, position = [], 0
    for start, end in spans:
        source = text[start:end]
        if start in parameters:
            out += (text[position:start], _parameter(source, depth))
        else:
            out += (text[position:start], templates.render(source, expand_templates, depth))
        position = end
    return "".join(out) + text[position:]


def _render_link(source: str, depth: int = 0) -> str:
    """[[target|text]] -> text (or the target); files, categories and interlanguage: ""."""
    inner = source[2:-2]
    target, bar, label = inner.partition("|")
    if not target.startswith(":") and _NOT_TEXT_TARGET.match(target):
        return ""
    if "|" in label:  # parameters and a caption: a file link of a namespace not listed
        return ""
    text = label if bar else target.lstrip(":")
    if "[[" not in text:
        return text
    # A link in the label; deeper nesting is no prose (unbounded, it overflowed the stack).
    return _links(text, depth + 1) if depth < templates.MAX_DEPTH else ""


def _links(text: str, depth: int = 0) -> str:
    """Every link: those without nested brackets by substitution, then the rest by a scan."""
    text = _PLAIN_LINK.sub(r"\1", _PIPED_LINK.sub(r"\1", _NOT_TEXT_LINK.sub("", text)))
    if "[[" in text:  # file captions holding links, now plain: drop the file links, then the rest
        text = _NOT_TEXT_LINK.sub("", text)
        spans = _matched_pairs(text, _LINK_TOKEN, "[[")
        text = _replace_pairs(text, spans, lambda link: _render_link(link, depth))
    return text


def _quotes(line: str) -> str:
    """A line's bold and italic marks removed as MediaWiki's Parser::doQuotes reads them, the
    apostrophes it keeps kept ("''Star Wars'''s" is "Star Wars's")."""
    parts = _QUOTES.split(line)
    if len(parts) == 1:
        return line
    texts, runs = parts[0::2], parts[1::2]  # texts[k] stands before runs[k]
    for k, run in enumerate(runs):
        if len(run) == 4 or len(run) > 5:
            texts[k] += "'"  # MediaWiki keeps len - 5; one is as much prose, and linear
            runs[k] = run[: 3 if len(run) == 4 else 5]
    italics = sum(len(run) in (2, 5) for run in runs)
    if italics % 2 and sum(len(run) in (3, 5) for run in runs) % 2:
        single = multi = space = None
        for k, run in enumerate(runs):
            if len(run) != 3:
                continue
            if texts[k].endswith(" "):
                space = k if space is None else space
            elif texts[k][-2:-1] == " ":
                single = k
                break
            elif multi is None:
                multi = k
        k = next((k for k in (single, multi, space) if k is not None), None)
        if k is not None:
            texts[k] += "'"
    return "".join(texts)


def _close(lines: list[str], out: list[str]) -> bool:
    """Appends a paragraph's lines, joined by spaces and cleaned, to `out` (none: nothing); whether
    it is unfinished: it ends in ":" or with no sentence's end."""
    if not lines:
        return False
    text = _MAGIC_WORD.sub("", " ".join(map(_quotes, lines))).replace(_NOWIKI_BREAK, "")
    lines.clear()
    if "&" in text:
        text = html.unescape(text)
    text = _SPACES.sub(" ", text)
    if "(" in text:
        text = _BRACKET_TAIL.sub(")", _BRACKET_HEAD.sub("(", text))
        text = _EMPTY_BRACKETS.sub("", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text).strip()
    if text:
        out.append(text)
    return bool(text) and not _FINISHED.search(text)


def paragraphs(wikitext: str) -> list[str]:
    """The prose paragraphs of an article's wikitext, markup removed, with HOLE and OPEN_END."""
    text = _SELF_CLOSED.sub("", _comments_and_nowiki(wikitext))
    text = _drop_elements(_drop_elements(text, _REF_TAG), _DROPPED_TAG)
    text = expand_templates(text)
    # A table is a block that is removed: a line of its own, so a ":" before it has lost it.
    text = _replace_pairs(text, _matched_pairs(text, _TABLE_TOKEN, "{|"), lambda _: "\n{|\n")
    text = _links(text)
    text = _EXTERNAL_LINK.sub(lambda m: m.group(1) or "", text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", _BLOCK_TAG.sub("\n\n", _EMPTY_NOWIKI.sub(_NOWIKI_BREAK, text)))
    out, lines, skip_level = [], [], 0
    unfinished = False  # the last paragraph is, and only blank lines have followed
    for raw in text.split("\n"):
        heading, line = _heading(raw), raw.strip()
        if not heading and not line:
            if lines:
                unfinished = _close(lines, out)
            continue
        if not heading and not skip_level and line[0] not in "*#:;|!{}":
            unfinished = False  # prose follows: what it introduced is there
            if raw[0] in " \t":
                # Preformatted: each line a paragraph, kept (most are prose typed after a space).
                _close(lines, out)
                lines.append(line)
                unfinished = _close(lines, out)
            else:
                lines.append(line)
            continue
        # A heading, list item, indented line, table leftover or skipped line: it ends a
        # paragraph, and what an unfinished one went on with is gone.
        if _close(lines, out) or unfinished:
            out[-1] += OPEN_END
        unfinished = False
        if heading:
            level, title = heading
            if skip_level and level > skip_level:
                continue  # a subsection of a skipped section
            title = _SPACES.sub(" ", _BOLD_ITALIC.sub("", title)).strip().lower()
            skip_level = level if title in SKIPPED_SECTIONS else 0
    if _close(lines, out) or unfinished:
        out[-1] += OPEN_END  # the article ends after an introduction
    return out


def _repaired(sentence: str, suspect: bool, spaced: bool) -> str | None:
    """A sentence as a removal left it: None when it lost words that cannot be put back, else with
    a leading separator taken off. `suspect`: its paragraph holds a HOLE or an empty slot;
    `spaced`: its language puts spaces between words."""
    if suspect and (HOLE in sentence or _EMPTY_SLOT.search(sentence)):
        return None
    if spaced and " " not in sentence and not _SENTENCE_END.search(sentence):
        return None  # a column header or a caption's stray word: no sentence
    if not _WORD.search(sentence):
        return None  # "...", "(, )": what is left of a quotation's or a list's removed words
    if sentence[0] in ",;:":
        sentence = sentence.lstrip(",;: ")
        return sentence[:1].upper() + sentence[1:] if sentence else None
    return sentence


class Prose(NamedTuple):
    paragraphs: list[list[str]]  # each paragraph's sentences
    repaired: int  # sentences a removal left broken that were repaired
    dropped: int  # and dropped (`_repaired`)


def prose(wikitext: str, language: str) -> Prose:
    """An article's paragraphs as sentences, those a removal left broken repaired or dropped."""
    out, repaired, dropped = [], 0, 0
    base = language.partition("-")[0]
    spaced, marked = base not in _UNSPACED, base not in _UNMARKED
    for paragraph in paragraphs(wikitext):
        kept = []
        suspect = HOLE in paragraph or bool(_EMPTY_SLOT.search(paragraph))
        sentences = split_sentences(paragraph.removesuffix(OPEN_END), language)
        if paragraph.endswith(OPEN_END) and sentences and (marked or sentences[-1].endswith(":")):
            sentences.pop()  # what its last sentence went on with is removed
            dropped += 1
        for sentence in sentences:
            fixed = _repaired(sentence, suspect, spaced)
            if fixed is None:
                dropped += 1
                continue
            repaired += fixed != sentence
            kept.append(fixed)
        if kept:
            out.append(kept)
    return Prose(out, repaired, dropped)
