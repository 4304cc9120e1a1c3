"""Issue 23's cases for the bad-input sweep (tests/e2e/test_bad_input_sweep.py): the record data.

Damaged records (TFRecord CRCs, ArrayRecord chunk hashes) through the trainer, decode and
--verify; records with extra or missing features; manifests whose shard paths leave their
directory, whose counts are false or whose fields are malformed; train and eval sharing a shard.
Model directories, text inputs, paths, seeds and outputs: tests/support/sweep_inputs.py, which
shares this module's command lines. `make_files(d, server, vocab)` writes the files under the
sweep's directory; `CASES` are (id, command line, expected) as the sweep's own: expected is the text
(or tuple of texts) the one error line must hold, or a check(ctx, o, stdout) of an input that must
work.
"""

import hashlib
import json
import os
import re
import shutil

from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest, record_io

RECORD_FLAGS = "--max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=1"
PREP_FLAGS = (
    "--num_workers=1 --progress=false --eval_fraction=0.2 --num_shards=2 --num_eval_shards=1 "
    + RECORD_FLAGS
)


def _write(path, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def _shard(directory, split: str = "eval", i: int = 0) -> str:
    return manifest.read(str(directory))["shards"][split][i]["file"]


def _edit(path, offset: int, data: bytes | None = None) -> None:
    """Inverts the byte at `offset` (or writes `data` there)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1 if data is None else len(data))
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in old) if data is None else data)


# --- damaged records ----------------------------------------------------------------------------
# Each variant damages the eval shard of a copy of a data_prep output, as a disk, a copy or a
# transfer does; `record` is the record index the error must name.


def _tf_damage(path: str) -> dict[str, int | None]:
    """Damages copies of a TFRecord shard, one way each; {variant: record index named}."""
    offsets, lengths = record_io.tfrecord_index(path)
    k, start = 3, int(offsets[3])  # record 3's data starts at `start`, its header 12 bytes before
    size = os.path.getsize(path)
    ways = {
        "data": lambda p: _edit(p, start + int(lengths[k]) // 2),  # a masked-LM label, say
        "length": lambda p: _edit(p, start - 12),
        "length CRC": lambda p: _edit(p, start - 2),
        "data CRC": lambda p: _edit(p, start + int(lengths[k]) + 1),
        "zeroed block": lambda p: _edit(p, start, bytes(int(lengths[k]) - 8)),
        "cut inside": lambda p: os.truncate(p, start + 10),
        "tail garbage": lambda p: open(p, "ab").write(b"\x07" * 7),
    }
    out = {}
    for name, damage in ways.items():
        copy = f"{os.path.dirname(os.path.dirname(path))}/tf_{_id(name)}"
        shutil.copytree(os.path.dirname(path), copy)
        damage(os.path.join(copy, os.path.basename(path)))
        out[name] = len(offsets) if name == "tail garbage" else k
    assert size == os.path.getsize(path)
    return out


def _data_chunk_offsets(path: str) -> list[int]:
    """Offsets (every 257th byte) where a flipped byte changes what an ArrayRecord file holds:
    its chunks of records. Riegeli pads the file to its 64 KiB blocks with a padding chunk that
    is never read (a flip there damages nothing), and a flip in the footer fails at open."""
    from array_record.python import array_record_module

    with open(path, "rb") as f:
        data = f.read()
    found = []
    for offset in range(0, min(len(data), 1 << 16), 257):  # the data sit in the first block
        changed = bytearray(data)
        changed[offset] ^= 0xFF
        probe = f"{path}.probe"
        with open(probe, "wb") as f:
            f.write(changed)
        reader = array_record_module.ArrayRecordReader(probe)
        try:
            if reader.ok():
                reader.read(list(range(reader.num_records())))
        except RuntimeError:
            found.append(offset)
        finally:
            try:
                reader.close()
            except RuntimeError:
                pass
        os.remove(probe)
    return found


def _ar_damage(path: str) -> list[str]:
    """Damages copies of an ArrayRecord shard inside its chunks (Riegeli's hashes catch each)."""
    inside = _data_chunk_offsets(path)
    ways = {
        "first chunk": lambda p: _edit(p, 200),
        "middle chunk": lambda p: _edit(p, inside[len(inside) // 2]),
        "zeroed block": lambda p: _edit(p, 100, bytes(300)),
    }
    for name, damage in ways.items():
        copy = f"{os.path.dirname(os.path.dirname(path))}/ar_{_id(name)}"
        shutil.copytree(os.path.dirname(path), copy)
        damage(os.path.join(copy, os.path.basename(path)))
    return list(ways)


def _damage_every_record(directory: str, shard: str) -> None:
    """Flips a byte in every record of a TFRecord shard: the first batch meets one."""
    path = os.path.join(directory, shard)
    offsets, lengths = record_io.tfrecord_index(path)
    for offset, length in zip(offsets, lengths):
        _edit(path, int(offset) + int(length) // 2)


# --- records with other features -----------------------------------------------------------


def _example_pb2():
    from tensorflow_datasets.proto import tf_example_pb2

    return tf_example_pb2


def _rewrite_records(path: str, change) -> None:
    """Rewrites a TFRecord shard with change(example proto) applied to every record."""
    pb = _example_pb2()
    records = []
    for raw in record_io.read_records(path):
        example = pb.Example.FromString(raw)
        change(example)
        records.append(example.SerializeToString())
    with record_io.RecordWriter(path, record_io.TFRECORD) as w:
        for r in records:
            w.write(r)


def _feature_changes() -> dict:
    def add_int(e):
        e.features.feature["doc_id"].int64_list.value.extend([7, 8])

    def add_bytes(e):
        e.features.feature["text"].bytes_list.value.append(b"the original sentence")

    def add_float(e):
        e.features.feature["score"].float_list.value.append(0.5)

    def drop(name):
        return lambda e: e.features.feature.pop(name)

    def as_bytes(e):
        e.features.feature[F.INPUT_IDS].ClearField("int64_list")
        e.features.feature[F.INPUT_IDS].bytes_list.value.append(b"1 2 3")

    def shorter(e):
        del e.features.feature[F.INPUT_IDS].int64_list.value[-1]

    return {
        "extra int": (add_int, None),
        "extra bytes": (add_bytes, None),
        "extra float": (add_float, None),
        "no input_ids": (drop(F.INPUT_IDS), "'input_ids'"),
        "no segment_ids": (drop(F.SEGMENT_IDS), "'segment_ids'"),
        "no masked_lm_ids": (drop(F.MASKED_LM_IDS), "masked_lm_ids"),
        "no next_sentence_labels": (drop(F.NEXT_SENTENCE_LABELS), "'next_sentence_labels'"),
        "input_ids as bytes": (as_bytes, "input_ids"),
        "input_ids one short": (shorter, "input_ids"),
        "empty Example": (lambda e: e.features.feature.clear(), "input_ids"),
    }


# --- manifests -------------------------------------------------------------------------------


def _manifest_changes() -> dict:
    """{variant: (change(doc, records), what the error names)}: an edit of a copy of the clean
    manifest; `records` is the clean output's directory. In a new value "{records}" and "{name}"
    stand for that directory and the entry's own file name."""

    def entry(split, key, value):
        def change(doc, records):
            shard = doc["shards"][split][0]
            new = value
            if isinstance(value, str):
                new = value.format(records=records, name=shard["file"])
            shard[key] = new

        return change

    def setter(path, value):
        def change(doc, records):
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value(doc) if callable(value) else value

        return change

    def without(*path):
        """Deletes doc[path[0]][path[1]]... (one top-level key each when all are strings)."""

        def change(doc, records):
            if all(isinstance(key, str) for key in path):
                for key in path:
                    del doc[key]
                return
            node = doc
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]

        return change

    def both(doc, records):
        doc["shards"]["train"].append(dict(doc["shards"]["eval"][0]))

    train0 = "shards.train[0].file"
    return {
        "shard absolute": (entry("train", "file", "{records}/{name}"), train0),
        "shard ../": (entry("train", "file", "../records/{name}"), train0),
        "shard in a subdirectory": (entry("train", "file", "sub/{name}"), train0),
        "shard .": (entry("train", "file", "."), train0),
        "shard ..": (entry("train", "file", ".."), train0),
        "shard empty name": (entry("train", "file", ""), train0),
        "shard a number": (entry("train", "file", 7), train0),
        "eval shard ../": (entry("eval", "file", "../records/{name}"), "shards.eval[0].file"),
        "shard under both splits": (both, "both train and eval"),
        "shards a list": (setter(["shards"], []), "shards is list"),
        "shards null": (setter(["shards"], None), "shards is NoneType"),
        "train an object": (setter(["shards", "train"], {}), "shards.train is dict"),
        "entry a string": (
            setter(["shards", "train", 0], lambda doc: doc["shards"]["train"][0]["file"]),
            "shards.train[0] is str",
        ),
        "entry without md5": (without("shards", "train", 0, "md5"), "lacks 'md5'"),
        "count negative": (entry("train", "instances", -5), "shards.train[0].instances"),
        "count a word": (entry("train", "instances", "ten"), "shards.train[0].instances"),
        "count a fraction": (entry("train", "instances", 3.5), "shards.train[0].instances"),
        "count true": (entry("train", "instances", True), "shards.train[0].instances"),
        "no schema nor flags": (without("schema", "flags"), "max_seq_length"),
        "no masked": (without("masked"), "'masked'"),
        "version a word": (setter(["manifest_version"], "two"), "manifest_version"),
    }


def _count_changes() -> dict:
    def count(change):
        def edit(doc, records):
            shard = doc["shards"]["train"][0]
            shard["instances"] = change(shard["instances"])

        return edit

    return {
        "count +1": count(lambda n: n + 1),
        "count -1": count(lambda n: n - 1),
        "count 0": count(lambda n: 0),
    }


def _json_texts() -> dict[str, bytes]:
    return {
        "not JSON": b'{"manifest_version": 2, "shards": {',
        "a JSON array": b"[1, 2, 3]",
        "empty": b"",
        "UTF-16": json.dumps({"manifest_version": 2}).encode("utf-16"),
    }


def make_files(d, server, vocab: str) -> dict[str, str]:
    """Writes every file the cases name under `d` (the sweep's directory, which already holds
    the sweep's own files: records, hf, run, corpus.txt, ...); returns more placeholders."""
    status, _, err = server.run(
        "data_prep.main",
        f"--input={d}/corpus.txt --vocab_file={vocab} --output_dir={d}/rec_tf --format=tfrecord "
        f"{PREP_FLAGS}".split(),
    )
    assert status == 0, err
    tf_eval, tf_train = _shard(d / "rec_tf"), _shard(d / "rec_tf", "train")
    _tf_damage(str(d / "rec_tf" / tf_eval))
    _ar_damage(str(d / "records" / _shard(d / "records")))
    shutil.copytree(d / "rec_tf", d / "tf_every")
    for i in range(2):
        _damage_every_record(str(d / "tf_every"), _shard(d / "rec_tf", "train", i))
    for name, (change, _) in _feature_changes().items():
        copy = d / f"feat_{_id(name)}"
        shutil.copytree(d / "rec_tf", copy)
        _rewrite_records(str(copy / tf_eval), change)
    records = str(d / "records")
    edits = {**{k: v for k, (v, _) in _manifest_changes().items()}, **_count_changes()}
    for name, change in edits.items():
        copy = d / f"man_{_id(name)}"
        shutil.copytree(d / "records", copy)
        os.makedirs(copy / "sub")
        shutil.copy(copy / _shard(records, "train"), copy / "sub")
        doc = json.loads((copy / "manifest.json").read_text())
        change(doc, records)
        (copy / "manifest.json").write_text(json.dumps(doc))
    for name, text in _json_texts().items():
        copy = d / f"mj_{_id(name)}"
        shutil.copytree(d / "records", copy)
        (copy / "manifest.json").write_bytes(text)
    os.symlink(d / "records", d / "rec_link")
    return {"tfeval": tf_eval, "tftrain": tf_train, "areval": _shard(d / "records")}


# --- checks of inputs that must work ---------------------------------------------------------


def _decoded_as_clean(ctx, o, stdout):
    """The records with an extra feature decode exactly as the clean ones."""
    args = f"--input={ctx['d']}/rec_tf/{ctx['tfeval']} --vocab_file={ctx['vocab']} --limit=3"
    assert "--- record 2" in stdout
    assert (0, stdout, "") == ctx["server"].run("data_prep.decode", args.split())


def _skipped_and_counted(ctx, o, stdout):
    """Every damaged record met was skipped and counted in the train metrics."""
    with open(os.path.join(o, "run", "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    train = [r for r in rows if r.get("split", "train") == "train" and "bad_records" in r]
    assert train and train[-1]["bad_records"] > 0, rows


# --- the cases -------------------------------------------------------------------------------


# TRAINER_RUNS: a bert_jax.main or finetune case costs 1-4 s (a JAX backend, the data contract,
# records read), a decode or --verify case a fraction of one. So every variant of a class goes
# through decode / --verify / embed, and a few of each class (one per kind of mechanism) through
# the trainer and fine-tuning, which read through the same functions.
MANIFESTS_TRAINED = (
    "shard absolute",
    "shard ../",
    "eval shard ../",
    "shard under both splits",
    "shards a list",
    "entry a string",
    "count a word",
    "no masked",
    "version a word",
)


class AfterStart(tuple):
    """The texts of an error found while a run reads its training records, after it started:
    its stdout may hold its start line ("training N parameters ..."), nothing else."""

    START = "training "


TRAIN = (
    "bert_jax.main --config=configs/tiny.py --workdir={o}/run --config.mesh.num_devices=1 "
    "--config.data.train_files={d}/records --config.data.eval_files={d}/records"
)
TRAIN_TF = TRAIN + " --config.data.train_files={d}/rec_tf --config.data.eval_files={d}/rec_tf"
TRAIN_EVERY = TRAIN + " --config.data.train_files={d}/tf_every --config.data.eval_files="
DECODE = "data_prep.decode --vocab_file={vocab} --limit=0 --input="
# Reads (and checks) every record but prints none: the error is the only output.
DECODE_ALL = "data_prep.decode --vocab_file={vocab} --skip=1000000 --limit=1 --input="
EMBED = "bert_jax.embed --model={d}/hf --input={d}/clean.txt --output={o}/e.npz"
FINETUNE = (
    "bert_jax.finetune --config=configs/finetune/sst2.py --init={d}/hf --workdir={o}/ft "
    "--config.data.train_file={d}/ft/sst_good.tsv --config.mesh.num_devices=1 "
    "--config.data.max_seq_length=16"
)
PREP = (
    "data_prep.main --input={d}/corpus.txt --vocab_file={vocab} --output_dir={o}/out " + PREP_FLAGS
)
VOCAB = "data_prep.vocab --input={d}/corpus.txt --output={o}/v.txt --vocab_size=400"
EXPORT = "bert_jax.export --workdir={d}/run --output_dir={o}/hf"


def _id(name: str) -> str:
    """A directory name for a variant: its words, and a hash that keeps ".", ".." and "../"
    (or "+1" and "-1") apart."""
    words = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    return f"{words}_{hashlib.md5(name.encode()).hexdigest()[:4]}"


def _damage_cases(fmt: str, prefix: str, shard: str, name: str, where, trained: bool) -> list:
    """decode, --verify and (when `trained`: see TRAINER_RUNS) the trainer's eval over the copy
    of a data_prep output whose eval shard `shard` is damaged the way `name` says."""
    directory = f"{{d}}/{prefix}_{_id(name)}"
    train = TRAIN_TF if fmt == "TFRecord" else TRAIN
    cases = [
        (f"decode: {fmt} {name}", f"{DECODE_ALL}{directory}/{shard}", where),
        (f"verify: {fmt} {name}", f"data_prep.main --verify --output_dir={directory}", shard),
    ]
    if trained:
        cases.append(
            (f"train: {fmt} {name}", f"{train} --config.data.eval_files={directory}", where)
        )
    return cases


def _damaged_records() -> list:
    cases = []
    for name in ("data", "length", "length CRC", "data CRC", "zeroed block", "cut inside"):
        trained = name in ("data", "length CRC", "cut inside")
        cases += _damage_cases(
            "TFRecord", "tf", "{tfeval}", name, ("{tfeval}", "record 3"), trained
        )
    cases += _damage_cases(
        "TFRecord",
        "tf",
        "{tfeval}",
        "tail garbage",
        ("{tfeval}", "truncated TFRecord header"),
        True,
    )
    for name in ("first chunk", "middle chunk", "zeroed block"):
        where = ("{areval}", "record ", "hash mismatch")
        cases += _damage_cases("ArrayRecord", "ar", "{areval}", name, where, name == "middle chunk")
    return cases + [
        (
            "train: every training record damaged",
            TRAIN_EVERY,
            AfterStart(("tf_every", "is damaged", "bad_records=skip")),
        ),
        (
            "train: damaged record in a Grain worker process",
            TRAIN_EVERY + " --config.data.num_workers=1",
            AfterStart(("tf_every", "is damaged", "bad_records=skip")),
        ),
        (
            "train: skip past max_bad_records",
            TRAIN_EVERY + " --config.data.bad_records=skip --config.data.max_bad_records=0",
            AfterStart(("max_bad_records=0", "tf_every")),
        ),
        (
            "train: eval skip past max_bad_records",
            TRAIN_TF + f" --config.data.eval_files={{d}}/tf_{_id('data')}"
            " --config.data.bad_records=skip --config.data.max_bad_records=0",
            ("max_bad_records=0", "{tfeval}"),
        ),
        ("train: bad_records unknown", TRAIN + " --config.data.bad_records=ignore", "bad_records"),
        (
            "train: max_bad_records negative",
            TRAIN + " --config.data.max_bad_records=-1",
            "max_bad_records",
        ),
        (
            "train: skip trains around damaged records",
            TRAIN_EVERY + " --config.data.bad_records=skip --config.data.max_bad_records=100000"
            " --config.train.num_train_steps=2 --config.train.log_every_steps=1"
            " --config.checkpoint.every_steps=0",
            _skipped_and_counted,
        ),
    ]


def _features() -> list:
    cases = []
    for name, (_, names) in _feature_changes().items():
        directory = f"{{d}}/feat_{_id(name)}"
        expected = _decoded_as_clean if names is None else (names, "record 0")
        cases.append((f"decode: {name}", f"{DECODE}{directory}/{{tfeval}} --limit=3", expected))
        if name in ("no input_ids", "input_ids as bytes", "empty Example"):  # TRAINER_RUNS
            cases.append(
                (
                    f"train: {name}",
                    f"{TRAIN_TF} --config.data.eval_files={directory}",
                    (names, "{tfeval} (record 0)"),
                )
            )
    return cases


def _manifests() -> list:
    cases = []
    for name, (_, field) in _manifest_changes().items():
        directory = f"{{d}}/man_{_id(name)}"
        expected = (f"man_{_id(name)}/manifest.json", field)
        if name in MANIFESTS_TRAINED:
            cases.append(
                (
                    f"train: manifest {name}",
                    f"{TRAIN} --config.data.train_files={directory}"
                    f" --config.data.eval_files={directory}",
                    expected,
                )
            )
        cases += [
            (
                f"verify: manifest {name}",
                f"data_prep.main --verify --output_dir={directory}",
                expected,
            ),
        ]
    for name in ("shard absolute", "shard ../", "shards a list", "entry a string"):
        cases.append(
            (
                f"rerun: manifest {name}",
                f"{PREP} --output_dir={{d}}/man_{_id(name)}",
                f"man_{_id(name)}/manifest.json",
            )
        )
    for name in _count_changes():
        directory = f"{{d}}/man_{_id(name)}"
        cases += [
            (
                f"train: manifest {name}",
                f"{TRAIN} --config.data.train_files={directory}",
                ("{shard}", "its manifest lists"),
            ),
            (
                f"verify: manifest {name}",
                f"data_prep.main --verify --output_dir={directory}",
                ("{shard}", "the manifest lists"),
            ),
        ]
    for name in _json_texts():
        directory = f"{{d}}/mj_{_id(name)}"
        cases += [
            (
                f"train: manifest {name}",
                f"{TRAIN} --config.data.train_files={directory}",
                f"mj_{_id(name)}/manifest.json",
            ),
            (
                f"verify: manifest {name}",
                f"data_prep.main --verify --output_dir={directory}",
                f"mj_{_id(name)}/manifest.json",
            ),
        ]
    return cases + [
        (
            "train: train and eval globs share a shard",
            TRAIN
            + " --config.data.train_files={d}/records/train-* --config.data.eval_files={d}/records/"
            "train-00000*",
            ("{shard}", "both a training and an eval shard"),
        ),
        (
            "train: eval shard through a link is a train shard",
            TRAIN + " --config.data.eval_files={d}/rec_link/train-00001*",
            "train-00001",
        ),
        (
            "train: eval_files the train shard's own path",
            TRAIN + " --config.data.eval_files={d}//records/./{shard}",
            ("{shard}", "eval shard"),
        ),
    ]


CASES = [*_damaged_records(), *_features(), *_manifests()]
