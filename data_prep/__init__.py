"""data_prep: raw text -> masked MLM/NSP training records (TFRecord or ArrayRecord) + manifest.

Data flows one way, text -> units -> instances -> records -> shards + manifest.json:

    main.py            the binary: python -m data_prep.main (--mode=scaled | beam | reference)
    readers.py         corpora -> documents: BERT-format text, JSONL, TFDS datasets; opens and
                       lists every input file, local or in a bucket (bert_jax/storage.py)
    sniff.py           what an input file holds, by its first bytes
    wiki.py            MediaWiki XML dumps -> articles (wikitext.py: wikitext -> prose;
                       templates.py: the inline templates rendered as their words)
    parquet.py         Parquet files -> documents, by row groups
    sentences.py       running text -> sentences (dumps, Parquet, JSONL, books)
    units.py           inputs cut into work units that are read independently
    instances.py       the default path: NSP pairs or MLM-only segments as [N, L] arrays, masked
                       by bert_jax/masking.py (the one masking rule, shared with the trainer)
    example_encoder.py those arrays -> serialized tf.train.Example bytes (fast, byte-exact)
    job.py             the scaled job's pure parts: a unit's records, the shard plan, the manifest,
                       the settings' fingerprint; shared by the local and the Beam runner
    content.py         input content hashes: how a rerun knows the input is what it was
    scaled.py          the local runner: worker processes, progress
    resume.py          its work directory (_work): what makes it resumable, what a rerun checks,
                       on a local disk or in a bucket (its lock there too)
    beam_pipeline.py   the same job on Apache Beam (Dataflow, Flink, Spark)
    reference.py       google-research/bert's create_pretraining_data.py step for step: the
                       specification the default path is tested against, and --mode=reference
    output.py          the output directory: shard names, atomic writes, statistics, the checks
                       of a finished output (--verify)
    decode.py          python -m data_prep.decode: records as readable text
    vocab.py           python -m data_prep.vocab: trains a WordPiece or SentencePiece vocabulary

Record files themselves are read and written by bert_jax/record_io.py, their schema is
bert_jax/features.py, and the manifest's fields are bert_jax/manifest.py: the contract the trainer
reads.
"""
