r"""Wikipedia dump and Parquet readers: MB/s per worker, the cleaners compared, memory vs dump size.

  python -m bench.wiki_bench --dump=enwiki-sample.xml.bz2   # any dump: .xml, .xml.bz2, multistream

The dump's pages are repacked as a multistream dump with its index (100 pages a stream, as
Wikimedia's) and as Hugging Face-style Parquet (wikimedia/wikipedia's columns), in a temporary
directory. Then, one process, one core:

  * reader stage per worker: every unit read as the job's workers read it (decompress, parse XML,
    keep articles, clean wikitext, split sentences; Parquet: read row groups, split sentences).
    MB/s are bytes of uncompressed wikitext (Parquet: of the text column) per CPU second, best
    of --repeats (the flag of bench/data_prep_bench.py, imported here). The target: 5 MB/s per
    worker.
  * the whole job (data_prep.main, 1 worker, bert-base-uncased, L=128, dupe_factor=1) on the dump,
    the Parquet file and, for scale, examples/data/pydocs.txt (BERT-format text): tokenizing and
    building instances dominate it.
  * with --memory: peak memory (PSS of the process tree) of that job on the dump and on the dump
    repeated 10 times: flat in dump size.

Default input: examples/data's sample (141 real pages). The figures in docs/data_prep.md are for the
largest real sample found offline: gensim's test dump enwiki-latest-pages-articles1.xml-p000000010p
000030302-shortened.bz2 (206 pages, 6.1 MB of XML, 5.7 MB of article wikitext).
"""

import bz2
import os
import shutil
import tempfile
import time

from absl import app, flags

from bench import data_prep_bench
from data_prep import readers, units, wiki, wikitext
from data_prep.sentences import split_sentences
from tests.support import make_wiki_dump

REPO = data_prep_bench.REPO
FLAGS = flags.FLAGS
flags.DEFINE_string(
    "dump",
    os.path.join(REPO, "examples", "data", "enwiki-sample-pages-articles-multistream.xml.bz2"),
    "A MediaWiki dump to repack and read.",
)
flags.DEFINE_float("block_size_mb", 1.0, "Unit size of the timed reads and the job.")
flags.DEFINE_bool("job", True, "Also time the whole job (data_prep.main, 1 worker).")
flags.DEFINE_bool("memory", False, "Peak memory of the job on the dump at 1x and 10x.")


def _row(*cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |")


def _best(fn, repeats):
    """min CPU seconds of fn() over repeats, and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def _read_all(path, block_bytes, text_field="text"):
    sources = readers.parse_input([path])
    planned = units.plan_units(sources, block_bytes, 1000, text_field=text_field)
    stats = readers.ReadStats()
    documents = sum(1 for u in planned for _ in units.read_unit(u, stats, text_field))
    return documents, len(planned)


def _parse_only(dump):
    with open(dump, "rb") as f:
        chunks = wiki.chunks(f, "bz2", 0, os.path.getsize(dump), dump)
        return sum(1 for _ in wiki.pages(chunks, dump, False))


def main(argv):
    del argv
    work = tempfile.mkdtemp(prefix="wiki_bench_")
    try:
        pages = make_wiki_dump.read_pages(FLAGS.dump)
        dump = os.path.join(work, "bench-pages-articles-multistream.xml.bz2")
        make_wiki_dump.write_dump(pages, dump, pages_per_stream=100)
        table = os.path.join(work, "bench.parquet")
        rows = make_wiki_dump.write_parquet(pages, table, row_group_rows=100)
        xml = (
            make_wiki_dump.HEADER + "".join(x for *_, x in pages) + make_wiki_dump.FOOTER
        ).encode()
        parsed = list(wiki.pages(iter([xml]), dump, False))
        articles = [p.text for p in parsed if wiki.article(p)]
        size = sum(len(t.encode()) for t in articles)
        all_text = sum(len(p.text.encode()) for p in parsed)
        print(
            f"{os.path.basename(FLAGS.dump)}: {len(parsed)} pages, {len(articles)} articles, "
            f"{size / 1e6:.2f} MB of article wikitext ({all_text / 1e6:.2f} MB of page text); "
            f"repacked: {os.path.getsize(dump) / 1e6:.2f} MB multistream bz2, "
            f"{os.path.getsize(table) / 1e6:.2f} MB Parquet ({rows} rows)"
        )
        block = max(1, int(FLAGS.block_size_mb * units.MB))
        print("\nReader stage, one worker (CPU seconds, best of --repeats):")
        print("| stage | CPU s | MB/s of wikitext |")
        print("| --- | ---: | ---: |")
        seconds, (docs, count) = _best(lambda: _read_all(dump, block), FLAGS.repeats)
        _row(
            f"dump: decompress + parse + clean + split ({count} units, {docs} documents)",
            f"{seconds:.2f}",
            f"{size / seconds / 1e6:.2f}",
        )
        compressed = open(dump, "rb").read()
        seconds, _ = _best(lambda: bz2.decompress(compressed), FLAGS.repeats)
        _row(
            "for scale: bz2 decompression alone (the floor of any .bz2 reader)",
            f"{seconds:.2f}",
            f"{size / seconds / 1e6:.2f}",
        )
        seconds, _ = _best(lambda: _parse_only(dump), FLAGS.repeats)
        print(f"| of which decompress + parse XML | {seconds:.2f} | {size / seconds / 1e6:.2f} |")
        seconds, cleaned = _best(lambda: [wikitext.paragraphs(t) for t in articles], FLAGS.repeats)
        print(f"| of which clean wikitext | {seconds:.2f} | {size / seconds / 1e6:.2f} |")
        seconds, _ = _best(
            lambda: [split_sentences(p) for page in cleaned for p in page], FLAGS.repeats
        )
        print(f"| of which split sentences | {seconds:.2f} | {size / seconds / 1e6:.2f} |")
        text_bytes = sum(len("\n\n".join(page).encode()) for page in cleaned)
        seconds, (docs, count) = _best(lambda: _read_all(table, block), FLAGS.repeats)
        _row(
            f"Parquet: read row groups + split ({count} units, {docs} documents)",
            f"{seconds:.2f}",
            f"{text_bytes / seconds / 1e6:.2f} (of text)",
        )
        vocab = os.path.join(REPO, "data_prep", "testdata", "bert-base-uncased-vocab.txt")
        common = [
            f"--vocab_file={vocab}",
            "--dupe_factor=1",
            "--num_workers=1",
            f"--block_size_mb={FLAGS.block_size_mb}",
        ]
        if FLAGS.job or FLAGS.memory:
            print("\nWhole job, data_prep.main, 1 worker (wall includes interpreter start):")
            print("| input | wall s | job s | MB/s wikitext (job) | peak MB |")
            print("| --- | ---: | ---: | ---: | ---: |")
            runs = [("dump 1x", dump, size)]
            if FLAGS.memory:
                big = os.path.join(work, "big-pages-articles-multistream.xml.bz2")
                make_wiki_dump.write_dump(pages * 10, big, pages_per_stream=100)
                runs.append(("dump 10x", big, 10 * size))
            runs.append(("Parquet 1x", table, text_bytes))
            pydocs = data_prep_bench.FLAGS.corpus  # BERT-format text, for scale
            runs.append((f"for scale: {os.path.basename(pydocs)}", pydocs, os.path.getsize(pydocs)))
            for name, path, nbytes in runs:
                r = data_prep_bench._measure(
                    [f"--input={path}", *common], os.path.join(work, "out")
                )
                job_s = r["manifest"]["seconds"]
                mb_s = nbytes / job_s / 1e6
                _row(name, f"{r['wall']:.1f}", f"{job_s:.1f}", f"{mb_s:.2f}", f"{r['peak_mb']:.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
