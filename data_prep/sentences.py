"""Running text -> sentences, for every input that is not already one sentence per line: Wikimedia's
sentencex, with the rules of the text's language (--language; a dump's own <siteinfo> overrides
it; sentencex falls back along MediaWiki's language chain).

sentencex splits after an abbreviation followed by a lower-case word ("approx. 20 ml"); no
English sentence starts in lower case except brand names (iPhone, eBay), so such a piece is
merged back, except in lower-cased text (BookCorpus as distributed), where every sentence starts
so. Why sentencex, and the scores on data_prep/testdata/sentences_labelled.txt:
docs/data_prep.md, "Sentence segmentation".
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
        for sentence in sentencex.segment(language, paragraph):
            sentence = sentence.strip()
            if not sentence:
                continue
            if cased and not first and sentence[0].islower():
                sentences[-1].append(sentence)
            else:
                sentences.append([sentence])
            first = False
    return [" ".join(pieces) for pieces in sentences]
