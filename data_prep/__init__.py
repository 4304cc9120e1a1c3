"""data_prep: raw text -> masked MLM/NSP training records (TFRecord or ArrayRecord) + manifest.

Data flows one way, text -> units -> instances -> records -> shards + manifest.json
(docs/data_prep.md says how each step works):

    main.py            the binary: python -m data_prep.main (--mode=scaled | beam | reference)
    readers.py         --input -> sources (what each file is: sniff.py, by its first bytes), and a
                       whole source's documents (one unit); lists every input file, local or in a
                       bucket
    inputs.py          what every reader shares: Source, ReadStats, InputError, open_input, lines
    lines.py           BERT-format text, books and JSONL, by byte blocks
    wiki.py            MediaWiki XML dumps -> articles (wikitext.py: wikitext -> prose;
                       templates.py: the inline templates rendered as their words)
    parquet.py         Parquet files -> documents, by row groups
    sentences.py       running text -> sentences (dumps, Parquet, JSONL, books)
    units.py           inputs cut into work units that are read independently, by the one
                       table of input kinds (how each is planned, how a unit is read; TFDS
                       datasets by example ranges)
    instances.py       the default path: NSP pairs or MLM-only segments as [N, L] arrays, masked
                       by bert_jax/data/input/masking.py (the one masking rule, shared with the
                       trainer), encoded as tf.train.Example bytes (fast, byte-exact)
    job.py             the scaled job's spec, plan, shard plan and shuffle, settings' fingerprint
                       and manifest; with job_units.py (a unit's records), the pure parts shared by
                       the local and the Beam runner
    content.py         input content hashes: how a rerun knows the input is what it was
    scaled.py          the local runner: worker processes, progress
    resume.py          its work directory (_work) and lock: what a rerun checks, locally or in a
                       bucket
    beam_pipeline.py   the same job on Apache Beam (Dataflow, Flink, Spark)
    reference.py       google-research/bert's create_pretraining_data.py step for step: the
                       specification the default path is tested against, and --mode=reference
    output.py          the output directory: shard names, atomic writes, statistics, --verify
    decode.py          python -m data_prep.decode: records as readable text
    vocab.py           python -m data_prep.vocab: trains a WordPiece, SentencePiece or BPE
                       vocabulary

The contract the trainer reads lives in bert_jax/data/contract/: record_io.py (record files),
features.py (their schema), manifest.py (the manifest's fields and reader, the output's file
names) and shard_files.py (the shard check that --verify runs).
"""
