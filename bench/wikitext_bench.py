r"""What a reader of the records notices in sentences cleaned from real Wikipedia dumps, counted.

  python -m bench.wikitext_bench                      # examples/data's sample (141 real pages)
  python -m bench.wikitext_bench --dumps=a.xml.bz2,b.xml.bz2 --templates=40

Each dump is read as the job reads it (data_prep.readers: articles, cleaned, split into
sentences) and every sentence is checked for the faults a reader of the records notices:

  * hard-wrap fragment: a sentence that ends without punctuation and is followed, in its
    document, by one that starts in lower case ("... is a major advantage of multiple" /
    "factor ANOVA.");
  * hole: what a removed template or formula left: an empty list slot (", ,", ",."), a sentence
    starting with a separator (", the population ..."), an empty bracket start ("( ,"), "such as"
    or "the" right before punctuation;
  * ends in ":": a list's, table's, formula's or quotation's introduction (the first three have
    lost what they introduce; a quotation's is kept with it);
  * one word: a sentence of one word without sentence-final punctuation (a column header);
  * markup: leftover wikitext or HTML.

Then the reader's own counts of the sentences it repaired and dropped, and (with --templates) the
templates found inside prose lines by frequency, each marked rendered or dropped: how
data_prep/templates.py's table was chosen. The fault counts need only data_prep.readers, so the
same file run against an older checkout gives the "before" column of docs/data_prep.md.
"""

import collections
import os
import re

from absl import app, flags

from data_prep import readers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
flags.DEFINE_list(
    "dumps",
    [os.path.join(REPO, "examples", "data", "enwiki-sample-pages-articles-multistream.xml.bz2")],
    "MediaWiki dumps to read (.xml, .xml.bz2, multistream or not).",
)
flags.DEFINE_integer("templates", 0, "Also list this many templates in prose, by frequency.")
flags.DEFINE_integer("examples", 0, "Print this many sentences of each fault.")

_MARKUP = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|</?[a-z]+[ >/]|\{\||\|\}|==|''|&[a-z]+;|thumb\|")
_HOLE = re.compile(r"[,;:]\s*[,;:.!?]|^[,;:]|\(\s*[,;:]|\b(?:such as|the)\s*[,;:.!?](?:\s|$)", re.I)
_FINAL = re.compile(r"[.!?…\"'”’»)\]:;]$")
FAULTS = ("hard-wrap fragment", "hole", "ends in ':'", "one word", "markup")


def faults(document: list[str]) -> list[tuple[str, str]]:
    """(fault, sentence) for every fault of a document's sentences."""
    found = []
    for i, sentence in enumerate(document):
        following = document[i + 1] if i + 1 < len(document) else ""
        if not _FINAL.search(sentence) and following[:1].islower():
            found.append(("hard-wrap fragment", f"{sentence} | {following}"))
        if _HOLE.search(sentence):
            found.append(("hole", sentence))
        if sentence.endswith(":"):
            found.append(("ends in ':'", sentence))
        if " " not in sentence and not re.search(r"[.!?。！？…]", sentence):
            found.append(("one word", sentence))
        if _MARKUP.search(sentence):
            found.append(("markup", sentence))
    return found


def count(path: str) -> tuple[int, int, collections.Counter, dict, readers.ReadStats]:
    """(documents, sentences, fault counts, fault examples, read stats) of one dump."""
    (source,) = readers.parse_input([path])
    stats = readers.ReadStats()
    documents = sentences = 0
    counts, examples = collections.Counter(), collections.defaultdict(list)
    for document in readers.documents(source, stats):
        documents += 1
        sentences += len(document)
        for fault, sentence in faults(document):
            counts[fault] += 1
            examples[fault].append(sentence)
    return documents, sentences, counts, examples, stats


def template_counts(path: str) -> collections.Counter:
    """Templates (outermost, after references, comments and math are removed) inside prose
    lines of a dump's articles: lines with text outside the template that are not lists, tables,
    headings."""
    from data_prep import templates, wiki, wikitext

    (source,) = readers.parse_input([path])
    found = collections.Counter()
    with open(path, "rb") as f:
        chunks = wiki.chunks(f, source.compression, 0, os.path.getsize(path), path)
        for page in wiki.pages(chunks, path, inside_root=False):
            if not wiki.article(page):
                continue
            text = wikitext._SELF_CLOSED.sub("", wikitext._comments_and_nowiki(page.text))
            text = wikitext._drop_elements(text, wikitext._REF_TAG)
            text = wikitext._drop_elements(text, wikitext._DROPPED_TAG)
            for start, end in wikitext._brace_pairs(text)[0]:
                line_start = text.rfind("\n", 0, start) + 1
                line_end = text.find("\n", end)
                line_end = len(text) if line_end < 0 else line_end
                outside = text[line_start:start] + text[end:line_end]
                if outside.strip() and text[line_start:line_end].lstrip()[0] not in "{|!=*#:;":
                    found[templates.template_name(text[start:end])] += 1
    return found


def main(argv):
    del argv
    totals = collections.Counter()
    print("| dump | articles | sentences | " + " | ".join(FAULTS) + " | repaired | dropped |")
    print("| --- " * (len(FAULTS) + 5) + "|")
    for path in FLAGS.dumps:
        documents, sentences, counts, examples, stats = count(path)
        repaired = getattr(stats, "repaired_sentences", "n/a")
        dropped = getattr(stats, "dropped_sentences", "n/a")
        cells = [os.path.basename(path), documents, sentences, *(counts[f] for f in FAULTS)]
        print("| " + " | ".join(map(str, [*cells, repaired, dropped])) + " |")
        totals.update(counts)
        for fault in FAULTS:
            for sentence in examples[fault][: FLAGS.examples]:
                print(f"    {fault}: {sentence[:200]}")
    if FLAGS.templates:
        from data_prep import templates

        found = collections.Counter()
        for path in FLAGS.dumps:
            found.update(template_counts(path))
        print(f"\nTemplates in prose lines: {sum(found.values())}, {len(found)} names")
        print("| template | count | rendered |")
        print("| --- | ---: | --- |")
        for name, n in found.most_common(FLAGS.templates):
            rendered = "yes" if templates._renderer(name) else "dropped"
            print(f"| {{{{{name}}}}} | {n} | {rendered} |")


if __name__ == "__main__":
    app.run(main)
