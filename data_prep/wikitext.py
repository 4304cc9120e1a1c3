"""Wikitext -> plain prose paragraphs, in linear time.

What BERT's authors kept of Wikipedia: "we extract only the text passages and ignore lists, tables,
and headers". So: templates (infoboxes, citations, navboxes; nested), references, tables, galleries,
math, file/image links, categories, interlanguage links, comments, HTML tags and magic words are
removed; link text is kept ([[Paris|the capital]] -> "the capital"), as is the text of external
links with a label; headings end paragraphs and are dropped, as are list items and the sections
that hold no prose (See also, References, External links, ...). A few inline templates whose text
is part of the sentence are rendered: {{lang|fr|texte}}, {{nowrap|text}}, {{convert|5|km}}.

Why not mwparserfromhell (the maintained parser) or wikiextractor: on real enwiki pages they clean
0.1-0.2 and 0.45 MB/s (bench/wiki_bench.py), 25-50x short of the 5 MB/s per worker the job needs;
wikiextractor is also AGPL. Every construct here is removed by a regex or a linear scan of
bracket tokens (nesting handled by a stack, an unclosed opener left as text, as MediaWiki does).
"""

import html
import re

# Sections that hold lists of links and citations, not prose: skipped up to the next heading of
# the same or a higher level.
SKIPPED_SECTIONS = frozenset(
    {
        "see also",
        "references",
        "external links",
        "further reading",
        "notes",
        "bibliography",
        "sources",
        "citations",
        "footnotes",
        "works cited",
        "notes and references",
        "references and notes",
        "gallery",
    }
)
# Elements dropped whole, content included; every other tag is removed but its content kept (<b>,
# <span>, <small>, <sup>, ...). References are most of them, hence their own patterns. Patterns are
# written so that the regex engine never backtracks far (no lazy ".*?" beside alternatives):
# the cleaner must stay linear on pages of any size.
_DROPPED_TAGS = (
    "references|gallery|math|chem|ce|timeline|imagemap|score|syntaxhighlight|source|hiero|graph|"
    "mapframe|maplink|templatedata|includeonly|table|pre|inputbox|categorytree"
)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_SELF_CLOSED_REF = re.compile(r"<ref(?:\s[^<>/]*)?/\s*>", re.I)
_REF = re.compile(r"<ref\b[^<>]*>[^<]*(?:<(?!/ref\s*>)[^<]*)*</ref\s*>", re.I)
_DROPPED_ELEMENT = re.compile(rf"<({_DROPPED_TAGS})\b[^<>]*>.*?</\1\s*>", re.I | re.S)
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}")
_TABLE_TOKEN = re.compile(r"^[ \t]*(?:\{\||\|\})", re.M)
_LINK_TOKEN = re.compile(r"\[\[|\]\]")
# Links without nested brackets, the vast majority, by substitution; the rest by a scan.
_NOT_TEXT_LINK = re.compile(
    r"\[\[\s*(?:(?i:file|image|media|category)\s*:|(?:[a-z]{2,3}(?:-[a-z]{2,8})*|simple)\s*:)"
    r"[^\[\]]*\]\]"
)
_PIPED_LINK = re.compile(r"\[\[[^\[\]|]*\|([^\[\]]*)\]\]")
_PLAIN_LINK = re.compile(r"\[\[:?([^\[\]|]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|//)[^\s\]]*\s*([^\]]*)\]", re.I)
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_BR = re.compile(r"<br\s*/?>", re.I)
_HEADING = re.compile(r"^(={1,6})\s*(.*?)\s*\1\s*$")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_BOLD_ITALIC = re.compile(r"'{2,}")
_SPACES = re.compile(r"\s+")
# Leftovers of removed templates (pronunciations, dates): "(; born 1947", "(ANSI, )", "( )".
_BRACKET_HEAD = re.compile(r"\(\s*[,;:][\s,;:]*")
_BRACKET_TAIL = re.compile(r"[\s,;:]*[,;:]\s*\)")
_EMPTY_BRACKETS = re.compile(r"\(\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
# Namespaces whose links are not text: files and categories; an interlanguage link's prefix is a
# language code ("de", "zh-min-nan", "simple"). A leading ":" makes such a link an ordinary one.
_FILE_OR_CATEGORY = re.compile(r"^\s*(?:file|image|media|category)\s*:", re.I)
_INTERLANGUAGE = re.compile(r"^\s*(?:[a-z]{2,3}(?:-[a-z]{2,8})*|simple)\s*:")
# Templates rendered as their text: name -> index of the parameter that is the text.
_INLINE_TEMPLATES = {"lang": 2, "nowrap": 1, "nobr": 1, "small": 1}
_DISAMBIGUATION = re.compile(
    r"\{\{\s*(?:[^{}|]*disambig[^{}|]*|dab|disamb|hndis|geodis|numberdis|set index article|sia)"
    r"\s*(?:\||\}\})",
    re.I,
)


def is_disambiguation(title: str, text: str) -> bool:
    """A disambiguation page: by its title or one of the disambiguation templates."""
    return title.endswith("(disambiguation)") or bool(_DISAMBIGUATION.search(text))


def _matched_pairs(text: str, tokens: re.Pattern, opener: str) -> list[tuple[int, int]]:
    """Outermost (start, end) spans of matched opener/closer tokens; unmatched tokens are text."""
    stack, spans = [], []
    for match in tokens.finditer(text):
        if match.group().strip() == opener:
            stack.append(match.start())
        elif stack:
            start = stack.pop()
            # A pair inside a span already recorded is absorbed by the outer one when it closes.
            while spans and spans[-1][0] > start:
                spans.pop()
            spans.append((start, match.end()))
    return spans


def _replace_pairs(text: str, spans, render) -> str:
    if not spans:
        return text
    out, position = [], 0
    for start, end in spans:
        out.append(text[position:start])
        out.append(render(text[start:end]))
        position = end
    out.append(text[position:])
    return "".join(out)


def _render_template(source: str) -> str:
    """{{...}} -> "" except the few inline templates whose text belongs to the sentence."""
    inner = source[2:-2]
    if "{" in inner or "[" in inner:  # nested markup: an infobox or a citation, dropped whole
        return ""
    parts = inner.split("|")
    name = parts[0].strip().lower()
    if name == "convert" and len(parts) >= 3:
        return f"{parts[1].strip()} {parts[2].strip()}"
    index = _INLINE_TEMPLATES.get(name)
    if index is not None and len(parts) > index and "=" not in parts[index]:
        return parts[index]
    return ""


def _render_link(source: str) -> str:
    """[[target|text]] -> text (or the target); files, categories and interlanguage: ""."""
    inner = source[2:-2]
    target, bar, label = inner.partition("|")
    if not target.startswith(":") and (
        _FILE_OR_CATEGORY.match(target) or _INTERLANGUAGE.match(target)
    ):
        return ""
    text = label if bar else target.lstrip(":")
    if "[[" in text:  # a link inside a link's label
        text = _PLAIN_LINK.sub(r"\1", _PIPED_LINK.sub(r"\1", _NOT_TEXT_LINK.sub("", text)))
    if "[[" in text:  # file captions holding links, now plain: drop the file links, then the rest
        text = _NOT_TEXT_LINK.sub("", text)
        text = _replace_pairs(text, _matched_pairs(text, _LINK_TOKEN, "[["), _render_link)
    return text


def paragraphs(wikitext: str) -> list[str]:
    """The prose paragraphs of an article's wikitext, markup removed."""
    text = _COMMENT.sub("", wikitext)
    start = text.find("<!--")
    if start >= 0:  # an unclosed comment hides the rest of the page, as in MediaWiki
        text = text[:start]
    text = _REF.sub("", _SELF_CLOSED_REF.sub("", text))
    text = _DROPPED_ELEMENT.sub("", text)
    text = _replace_pairs(text, _matched_pairs(text, _TEMPLATE_TOKEN, "{{"), _render_template)
    text = _replace_pairs(text, _matched_pairs(text, _TABLE_TOKEN, "{|"), lambda _: "\n")
    text = _PLAIN_LINK.sub(r"\1", _PIPED_LINK.sub(r"\1", _NOT_TEXT_LINK.sub("", text)))
    if "[[" in text:  # file captions holding links, now plain: drop the file links, then the rest
        text = _NOT_TEXT_LINK.sub("", text)
        text = _replace_pairs(text, _matched_pairs(text, _LINK_TOKEN, "[["), _render_link)
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", text)
    out, skip_level = [], 0
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            if skip_level and level > skip_level:
                continue  # a subsection of a skipped section
            title = _SPACES.sub(" ", _BOLD_ITALIC.sub("", heading.group(2))).strip().lower()
            skip_level = level if title in SKIPPED_SECTIONS else 0
            continue
        line = line.strip()
        if skip_level or not line or line[0] in "*#:;|!{}":
            continue  # a skipped section, a list item or a table's leftover
        line = _BOLD_ITALIC.sub("", _MAGIC_WORD.sub("", line))
        if "&" in line:
            line = html.unescape(line)
        line = _SPACES.sub(" ", line)
        if "(" in line:
            line = _BRACKET_TAIL.sub(")", _BRACKET_HEAD.sub("(", line))
            line = _EMPTY_BRACKETS.sub("", line)
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", line).strip()
        if line:
            out.append(line)
    return out
