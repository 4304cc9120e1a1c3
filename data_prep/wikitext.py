"""Wikitext -> plain prose paragraphs and sentences, in linear time.

What is removed, what is kept, which templates are rendered (data_prep/templates.py) and which
sentences are dropped or repaired, and why not a maintained parser: docs/data_prep.md,
"Wikipedia dumps" ("Wikitext to prose" on).

The invariant every pattern here keeps: linear on hostile pages. No pattern may scan to the end
of the page from each of many starts (an unclosed "<ref>" or "<math>" repeated, "[http://a b"
repeated, a long run of ", " in brackets): elements are found by scanning their tags in order,
each regex stops at the next bracket, and bracket tokens nest by a stack (an unclosed opener
stays text, as in MediaWiki). tests/unit/data_prep/test_wiki.py times such pages.
"""

import bisect
import html
import re
from typing import NamedTuple

from data_prep import templates
from data_prep.sentences import split_sentences

# Where inline math (or chemistry, hieroglyphs) was removed: a character XML 1.0 cannot hold, so
# no page text has it. A sentence holding one has lost words and is dropped.
HOLE = "\x01"
# Ends a paragraph that is unfinished (a ":" or no sentence's end) and is followed by a removed
# block (a list, a formula, a table, a heading, the article's end): its last sentence lost what
# it went on with. Not XML text either.
OPEN_END = "\x02"

# Sections that hold lists of links and citations, not prose: skipped up to the next heading of
# the same or a higher level.
SKIPPED_SECTIONS = frozenset(
    {
        "see also", "references", "external links", "further reading", "notes", "bibliography",
        "sources", "citations", "footnotes", "works cited", "notes and references",
        "references and notes", "gallery",
    }
)  # fmt: skip
# Elements dropped whole, content included; every other tag is removed but its content kept (<b>,
# <span>, <small>, <sup>, ...). References are most of them, and go first: a <ref> may hold any
# of the others.
_DROPPED_TAGS = (
    "references|gallery|math|chem|ce|timeline|imagemap|score|syntaxhighlight|source|hiero|graph|"
    "mapframe|maplink|templatedata|includeonly|table|pre|inputbox|categorytree"
)
# Comments and <nowiki> elements, read in one pass from the page's start as MediaWiki's
# preprocessor reads them (a comment inside a <nowiki> is text; a <nowiki> inside a comment is
# hidden). An unclosed comment hides the rest of the page; an unclosed <nowiki> is text. Inline
# code (<syntaxhighlight inline>, a word or two of code in a sentence, as <code> is) is literal
# text too; a block of code is dropped (_DROPPED_TAGS).
_COMMENT_OR_NOWIKI = re.compile(
    r"<!--|<(nowiki)(?:\s[^<>/]*)?>|<(syntaxhighlight|source)\s(?:[^<>]*?\s)?inline(?=[\s=>])[^<>/]*>",
    re.I,
)
_LITERAL_CLOSE = {
    name: re.compile(rf"</{name}\s*>", re.I) for name in ("nowiki", "syntaxhighlight", "source")
}
_NEXT_COMMENT = re.compile(r"[ \t]*<!--")
_LINE_SPACE = re.compile(r"[ \t]*")
# A <nowiki>'s content is shown literally: its markup characters as entities, which no later step
# reads as markup and _close decodes. MediaWiki decodes the entities it holds ("&amp;" is "&"), so
# "&", "#" and ";" stay, but for a first "#" or ";" (a list item's mark at a line's start).
_LITERAL = str.maketrans({c: f"&#{ord(c)};" for c in "{}[]|'<>=!*:_~-"} | {"\n": " "})
# A self-closed element (<ref name="CNN/Money" />, <references group="n"/>): a "/" before its
# ">", whatever "/"s its attributes hold, as MediaWiki reads it. Taken for an opening tag, it
# dropped the prose up to the next closing tag of its name.
_SELF_CLOSED = re.compile(rf"<(?:ref|{_DROPPED_TAGS})\b[^<>]*/\s*>", re.I)
# An opening tag (group 1: its name) or a closing one (group 2), as MediaWiki matches extension
# tags: a closing tag has no attributes ("</ref name=x>" closes nothing).
_REF_TAG = re.compile(r"<(?:(ref)\b[^<>]*|/(ref)\s*)>", re.I)
_DROPPED_TAG = re.compile(rf"<(?:({_DROPPED_TAGS})\b[^<>]*|/({_DROPPED_TAGS})\s*)>", re.I)
# Runs of braces, as MediaWiki's preprocessor counts them: a run of 3 or more opening braces
# matched with one of 3 or more closing ones is a template parameter ("{{{1|default}}}"), of 2 a
# template; the braces a match leaves are text, or match further out.
_BRACE_RUN = re.compile(r"\{\{+|\}\}+")
_TABLE_TOKEN = re.compile(r"^[ \t]*(?:\{\||\|\})", re.M)
# A run of "]"s is one token: its closers pair from its end, so the odd "]" of "...|[http://x.org
# a source]]]" ends the external link inside, as MediaWiki reads it (it was left as text).
_LINK_TOKEN = re.compile(r"\[\[|\]\]+")
# Namespaces whose links are not text: files and categories, by their English names and those of
# large Wikipedias (a dump in another language links [[Datei:...]], [[Kategorie:...]]); and an
# interlanguage link, whose prefix is a language code ("de", "zh-min-nan", "simple"). A leading ":"
# makes such a link an ordinary one.
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
# Links without nested brackets, the vast majority, by substitution; the rest by a scan.
_NOT_TEXT_LINK = re.compile(rf"\[\[{_NOT_TEXT_PREFIX}[^\[\]]*\]\]")
# One "|" only: a link with more is a file link of a namespace not listed ([[Fitxer:a.jpg|thumb|
# a caption]]), dropped by _render_link.
_PIPED_LINK = re.compile(r"\[\[[^\[\]|]*\|([^\[\]|]*)\]\]")
_PLAIN_LINK = re.compile(r"\[\[:?([^\[\]|]*)\]\]")
# The URL, then a label after whitespace that ends at the line's end as in MediaWiki; neither
# crosses a bracket (MediaWiki's label may hold a "[": rare, and quadratic to allow), and the
# quantifiers are possessive: no backtracking.
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|//)[^\s\[\]]*+(?:[^\S\n]++([^\[\]\n]*+))?\]", re.I)
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_BR = re.compile(r"<br\s*/?>", re.I)
# HTML elements that MediaWiki shows as blocks of their own, and a horizontal rule (a line that
# starts with "----"; the rest of the line is the next paragraph): they end a paragraph.
_BLOCK_TAG = re.compile(
    r"</?(?:blockquote|div|p|center|poem|h[1-6]|hr|ul|ol|li|dl|dt|dd)\b[^<>]*>|^-{4,}", re.I | re.M
)
# Behaviour switches (__NOTOC__): capitals, or letters of other scripts, words joined by "_"
# (__EXPECTED_UNCONNECTED_PAGE__, __KEIN_INHALTSVERZEICHNIS__, __БЕЗ_ОГЛАВЛЕНИЯ__, __目次非表示__);
# lower-case Latin is left, as "__init__" in prose is no switch.
_MAGIC_WORD = re.compile(r"__(?:[A-Z]|[^\x00-\x7f\s])+(?:_(?:[A-Z]|[^\x00-\x7f\s])+)*__")
_BOLD_ITALIC = re.compile(r"'{2,}")
_QUOTES = re.compile(r"('{2,})")
# <nowiki/> keeps the apostrophes on either side apart ("''Star Wars''<nowiki/>'s", common on
# enwiki): a mark in its place until bold and italics are read, as MediaWiki's strip marker.
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
# Sentence-final marks of the large Wikipedias' scripts (danda, Urdu's full stop, Arabic's
# question mark, Khmer, Burmese, Tibetan).
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
# Disambiguation templates: English names holding "disambig" ({{Disambiguation}}, {{Hospital
# disambiguation}}, ...), their short forms, and the main template of other large Wikipedias (de,
# fr, it, es, pt, ru, zh, ja, pl, sv). Exact names there: their hatnotes on ordinary articles
# share the stem ({{Begriffsklärungshinweis}}, {{Voir homonymes}}).
_DISAMBIGUATION_NAMES = frozenset(
    {
        "dab", "disamb", "hndis", "geodis", "numberdis", "set index article", "sia",
        "begriffsklärung", "homonymie", "disambigua", "desambiguación", "desambiguação",
        "неоднозначность", "消歧义", "消歧義", "aimai", "曖昧さ回避", "ujednoznacznienie",
        "förgrening",
    }
)  # fmt: skip
# Templates with "disambig" in the name that are put on ordinary articles: cleanup tags asking
# for a link to be disambiguated.
_NOT_DISAMBIGUATION = frozenset(
    {"disambiguation needed", "disambiguate", "disambiguation needed span"}
)


def is_disambiguation(title: str, text: str) -> bool:
    """A disambiguation page: by its title or one of the disambiguation templates."""
    names = (match.group(1).strip().lower() for match in _TEMPLATE_NAME.finditer(text))
    return title.endswith("(disambiguation)") or any(
        name in _DISAMBIGUATION_NAMES or ("disambig" in name and name not in _NOT_DISAMBIGUATION)
        for name in names
    )


def _drop_elements(text: str, tag_pattern: re.Pattern) -> str:
    """Elements whose tags `tag_pattern` finds (group 1: an opening tag's name, 2: a closing one's)
    dropped with their content: each opening tag to the first closing tag of its name after it
    (these elements do not nest); an opening tag never closed is left as text (and later removed as
    a tag). One pass over the tags, a binary search per opening tag into its name's closing tags."""
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
    """Comments removed and each non-empty <nowiki>'s (and inline code's) content made literal
    text (<nowiki/> and empty ones are left for `paragraphs`: they only part apostrophes).
    Linear: each search starts where the last ended, and once an element is found unclosed no
    later one of its name is closed."""
    out, position, closable = [], 0, set(_LITERAL_CLOSE)
    while match := _COMMENT_OR_NOWIKI.search(text, position):
        if match.group() == "<!--":
            start, end = match.start(), text.find("-->", match.end())
            while end >= 0 and (more := _NEXT_COMMENT.match(text, end + 3)):
                end = text.find("-->", more.end())  # comments in a row, as one
            if end < 0:
                out.append(text[position:start])
                return "".join(out)
            # Comments alone on a line go with the line, as in MediaWiki: the paragraph
            # around them goes on ("is\n<!-- note -->\nlarge" is "is large").
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
    """(level, title) of a heading line ("== History =="), as MediaWiki reads it: the level is
    the fewer of the "="s on either side, at most 6; extra "="s belong to the title."""
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
            # A pair inside a span already recorded is absorbed by the outer one when it closes.
            while spans and spans[-1][0] > start:
                spans.pop()
            spans.append((start, end))
    return spans


def _replace_pairs(text: str, spans, render) -> str:
    out, position = [], 0
    for start, end in spans:
        out += (text[position:start], render(text[start:end]))
        position = end
    return "".join(out) + text[position:]


def _brace_pairs(text: str) -> tuple[list[tuple[int, int]], set[int]]:
    """Outermost (start, end) spans of templates and template parameters, brace runs matched as
    MediaWiki matches them: a closing run pairs with the innermost open run, taking 3 braces
    from each where both have 3 or more, else 2; an open run keeps its leftover braces (2 or
    more) for an outer match; unmatched braces are text. And the starts of the parameters."""
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
    """A template parameter ("{{{1|x}}}") as MediaWiki shows one outside a template: its default,
    its templates rendered (to data_prep/templates.py's depth: a page nested without end stays
    linear), else itself, braces and all."""
    _, bar, default = source[3:-3].partition("|")
    if not bar:
        return source
    return expand_templates(default, depth + 1) if depth < _MAX_TEMPLATE_DEPTH else ""


def expand_templates(text: str, depth: int = 0) -> str:
    """Every outermost template rendered by data_prep/templates.py's table ("" for the rest), and
    every template parameter as `_parameter` shows it."""
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


_MAX_TEMPLATE_DEPTH = 6  # as data_prep/templates.py's

# Links inside links' text are rendered to this depth (a file caption's link is depth 1); deeper
# is no prose, and the recursion, unbounded, overflowed Python's stack on 500 nested "[[".
_MAX_LINK_DEPTH = 6


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
    return _links(text, depth + 1) if depth < _MAX_LINK_DEPTH else ""  # a link in the label


def _links(text: str, depth: int = 0) -> str:
    """Every link rendered: those without nested brackets by substitution, then the rest."""
    text = _PLAIN_LINK.sub(r"\1", _PIPED_LINK.sub(r"\1", _NOT_TEXT_LINK.sub("", text)))
    if "[[" in text:  # file captions holding links, now plain: drop the file links, then the rest
        text = _NOT_TEXT_LINK.sub("", text)
        spans = _matched_pairs(text, _LINK_TOKEN, "[[")
        text = _replace_pairs(text, spans, lambda link: _render_link(link, depth))
    return text


def _quotes(line: str) -> str:
    """A line's bold and italic marks removed as MediaWiki reads them (Parser::doQuotes): of a run
    of 4 apostrophes the first is text, of more than 5 one, and where bold and italic marks
    are both odd in number one bold mark is an apostrophe and italics ("''Star Wars'''s" shows
    "Star Wars's"): the first after a one-letter word, else after a longer one, else after a
    space. Removing every run of 2 or more lost those apostrophes ("Star Warss")."""
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
    """The lines of one paragraph joined as MediaWiki joins them (a single newline is a space),
    bold, italics, entities and the leftovers of removed templates cleaned, appended to `out`;
    whether it is unfinished: it ends in ":" (an introduction) or with no sentence's end (text
    that goes on in a block: "... such as" / an indented code line / "instead of"). No lines:
    nothing."""
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
    """The prose paragraphs of an article's wikitext, markup removed; HOLE marks where inline math
    (or chemistry, hieroglyphs) was: its sentence has lost words; OPEN_END ends an unfinished
    paragraph followed by a removed block."""
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
    # The last paragraph is unfinished (it ends in ":" or with no sentence's end) and only blank
    # lines have followed: what it goes on with may yet be prose (a quotation), or a list, a
    # formula, code or a table that is removed.
    unfinished = False
    for raw in text.split("\n"):
        heading, line = _heading(raw), raw.strip()
        if not heading and not line:
            if lines:
                unfinished = _close(lines, out)
            continue
        if not heading and not skip_level and line[0] not in "*#:;|!{}":
            unfinished = False  # prose follows: what it introduced is there
            if raw[0] in " \t":
                # Preformatted (MediaWiki's <pre>): each line a paragraph, kept: most are prose
                # paragraphs typed after a space (95 sentences of gensim's sample), the rest
                # pseudocode lines.
                _close(lines, out)
                lines.append(line)
                unfinished = _close(lines, out)
            else:
                lines.append(line)
            continue
        # A heading, a list item, an indented line (display math), a table's leftover or a line
        # of a skipped section: it ends a paragraph, and what an unfinished one went on with is
        # gone: its last sentence is dropped.
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
    """A sentence as a removal left it: None when it lost words that cannot be put back (its math,
    marked by a HOLE; the items of a list, ", , and"; all but a one-word header), else with a
    leading separator taken off (", the population ..."). `suspect`: its paragraph holds a HOLE or
    an empty slot (most do not, and then the sentence is not searched for them); `spaced`: its
    language puts spaces between words (in Chinese or Thai a whole sentence has none)."""
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
    """An article's prose: its paragraphs split into sentences by data_prep/sentences.py in
    `language`, each sentence that a removal left broken repaired or dropped, and their counts."""
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
