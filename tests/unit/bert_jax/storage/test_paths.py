"""bert_jax.storage's path parser (storage.parse, storage.check_paths): a sweep of paths by class
(schemes, slashes, dots, empty parts, bucket names, unicode, control characters, lengths,
trailing slashes, local paths). A refused path is one StorageError naming the flag and the path
and saying what is wrong; an accepted one comes back in the form every storage call takes, and
parsing it again changes nothing. No server needed: parsing asks none."""

import os

import pytest

from bert_jax import cli, storage

FLAG = "--output_dir"

# (path, words the refusal must hold), by class.
REFUSED = {
    "schemes": [
        ("http://example.com/x", "http:// paths are not supported"),
        ("https://storage.googleapis.com/b/x", "https:// paths are not supported"),
        ("ftp://host/x", "ftp:// paths are not supported"),
        ("hdfs://namenode/x", "hdfs:// paths are not supported"),
        ("gcs://bkt/x", "gcs:// paths are not supported"),
        ("s3a://bkt/x", "s3a:// paths are not supported"),
        ("az://container/x", "az:// paths are not supported"),
        ("file:///tmp/x", "pass the local path itself"),
        ("GS://bkt/x", "write gs:// in lower case"),
        ("Gs://bkt/x", "write gs:// in lower case"),
        ("S3://bkt/x", "write s3:// in lower case"),
    ],
    "slashes": [
        ("gs:/x", "needs two slashes, one given (did you mean 'gs://x'?"),
        ("gs:/bkt/dir", "did you mean 'gs://bkt/dir'?"),
        ("gs:bkt/x", "needs two slashes, none given"),
        ("s3:/bkt/x", "did you mean 's3://bkt/x'?"),
        ("GS:/bkt/x", "did you mean 'gs://bkt/x'?"),
        ("gs:", "needs two slashes, none given"),
        ("http:/x", "did you mean 'a local path or gs://'?"),
        ("gs:///x", "names no bucket"),
        ("gs:////x", "names no bucket"),
    ],
    "empty parts": [
        ("gs://", "names no bucket; write gs://BUCKET/PATH"),
        ("s3://", "names no bucket; write s3://BUCKET/PATH"),
        ("gs://bkt//x", "has an empty part ('//')"),
        ("gs://bkt/a//b/c", "has an empty part ('//')"),
        ("s3://bkt//", None),  # the trailing slashes go; an empty key is the bucket: accepted
    ],
    "dots": [
        ("gs://bkt/../x", "has a '..' part; an object store does not resolve it"),
        ("gs://bkt/a/../../x", "has a '..' part"),
        ("gs://bkt/..", "has a '..' part"),
        ("gs://bkt/./x", "has a '.' part"),
        ("gs://bkt/a/.", "has a '.' part"),
        ("s3://bkt/a/../b", "has a '..' part"),
    ],
    "bucket names": [
        ("gs://ab/x", "'ab' is not a valid bucket name"),
        ("gs://-bkt/x", "'-bkt' is not a valid bucket name"),
        ("gs://bkt-/x", "'bkt-' is not a valid bucket name"),
        ("gs://Bkt/x", "'Bkt' is not a valid bucket name"),
        ("gs://b kt/x", "'b kt' is not a valid bucket name"),
        ("gs://bkt:443/x", "'bkt:443' is not a valid bucket name"),
        ("gs://user@bkt/x", "'user@bkt' is not a valid bucket name"),
        ("s3://bkt_/x", "'bkt_' is not a valid bucket name"),
    ],
    "unicode and control characters": [
        ("gs://bücket/x", "'bücket' is not a valid bucket name"),
        ("gs://bkt/a\nb", "holds a control character"),
        ("gs://bkt/a\tb", "holds a control character"),
        ("gs://bkt/a\x7fb", "holds a control character"),
        ("gs://bkt/a\x00b", "holds a NUL byte"),
        ("/tmp/a\x00b", "holds a NUL byte"),
    ],
    "lengths": [
        ("gs://bkt/" + "x" * 1025, "longer than the 1024 bytes"),
        ("gs://bkt/" + "é" * 513, "longer than the 1024 bytes"),  # 1,026 bytes in UTF-8
    ],
}
REFUSED["empty parts"] = [c for c in REFUSED["empty parts"] if c[1]]

# (path, what parse gives), by class.
ACCEPTED = {
    "urls": [
        ("gs://bkt/x", "gs://bkt/x"),
        ("gs://bkt", "gs://bkt"),
        ("s3://bkt/a/b.txt", "s3://bkt/a/b.txt"),
        ("gs://my.bucket.name/x", "gs://my.bucket.name/x"),
        ("gs://my_bucket-2/x", "gs://my_bucket-2/x"),
        ("s3://Legacy_Bucket/x", "s3://Legacy_Bucket/x"),  # S3 buckets from before 2018
        ("gs://bkt/rec/train-*", "gs://bkt/rec/train-*"),  # a glob
        ("gs://bkt/.hidden/..x/a..b/...", "gs://bkt/.hidden/..x/a..b/..."),
        ("gs://bkt/" + "x" * 1024, "gs://bkt/" + "x" * 1024),
    ],
    "trailing slashes": [
        ("gs://bkt/dir/", "gs://bkt/dir"),
        ("gs://bkt/dir//", "gs://bkt/dir"),
        ("gs://bkt/", "gs://bkt"),
        ("s3://bkt//", "s3://bkt"),
        ("/tmp/dir/", "/tmp/dir/"),
    ],
    "unicode": [
        ("gs://bkt/données/ñ.txt", "gs://bkt/données/ñ.txt"),
        ("gs://bkt/日本語/x", "gs://bkt/日本語/x"),
        ("/tmp/données/x", "/tmp/données/x"),
    ],
    "local": [
        ("relative/x", "relative/x"),
        ("../up/x", "../up/x"),
        ("/a/./b/../c", "/a/./b/../c"),  # the file system's to resolve
        ("./gs:/x", "./gs:/x"),  # a local file named like a half URL: written with ./
        ("/data/a:b", "/data/a:b"),
        ("tfds:wikipedia/20230601.en:train", "tfds:wikipedia/20230601.en:train"),  # data_prep's
        ("~/x", os.path.expanduser("~/x")),
    ],
}


def _cases(table):
    return [
        pytest.param(path, want, id=f"{kind}: {path[:40]!r}")
        for kind, cases in table.items()
        for path, want in cases
    ]


@pytest.mark.parametrize("path, words", _cases(REFUSED))
def test_a_refused_path_is_one_line_naming_the_flag_and_what_is_wrong(path, words):
    with pytest.raises(storage.StorageError) as refused:
        storage.parse(path, FLAG)
    text = str(refused.value)
    assert isinstance(refused.value, cli.UserError)  # the binaries print it as `error: ...`
    assert text.startswith(f"{FLAG}={path!r} "), text
    assert words in text, text
    assert "\n" not in cli.message(refused.value)
    # Deeper down, without a flag: the same refusal wherever such a path reaches the package.
    if "://" in path or ":" in path[:6] or "\x00" in path:
        with pytest.raises(storage.StorageError) as deeper:
            storage.is_url(path)
        assert str(deeper.value) == f"{path!r} {text[len(f'{FLAG}={path!r} ') :]}"


@pytest.mark.parametrize("path, want", _cases(ACCEPTED))
def test_an_accepted_path_comes_back_as_the_package_takes_it(path, want):
    got = storage.parse(path, FLAG)
    assert got == want
    assert storage.parse(got) == got  # parsing again changes nothing
    assert storage.is_url(got) == ("://" in want)


def test_every_class_has_cases():
    """The sweep's classes, as the issue names them; each with paths refused or accepted."""
    classes = set(REFUSED) | set(ACCEPTED)
    assert {"schemes", "slashes", "dots", "empty parts", "unicode", "trailing slashes"} <= {
        c.split(" and ")[0] for c in classes
    } | classes
    assert {"local"} <= set(ACCEPTED)


def test_an_empty_path_names_its_flag():
    for empty in ("", "  "):
        with pytest.raises(storage.StorageError, match=f"^{FLAG} is empty"):
            storage.parse(empty, FLAG)


def test_check_paths_parses_every_flag_and_names_the_first_problem():
    storage.check_paths({"--a": "/tmp/x", "--b": None, "--c": ["gs://bkt/x", "", "rel"]})
    with pytest.raises(storage.StorageError, match=r"^--c='gs:/y' is not a bucket URL"):
        storage.check_paths({"--a": "/tmp/x", "--c": ["gs://bkt/x", "gs:/y"], "--d": "gs://"})
    with pytest.raises(storage.StorageError, match=r"--cache='gs://bkt/c' must be a local dir"):
        storage.check_paths({"--cache": "gs://bkt/c"}, local=["--cache"])
    storage.check_paths({"--cache": "/tmp/c"}, local=["--cache"])


def test_an_output_that_another_flag_reads_is_refused(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("x")
    os.symlink(text, tmp_path / "link.txt")
    for given in (str(text), str(tmp_path / "link.txt"), str(tmp_path / "*.txt")):
        with pytest.raises(storage.StorageError, match=r"would replace that input"):
            storage.check_paths({"--input": given, "--output": str(text)}, outputs=["--output"])
    fine = {"--input": [str(text), "gs://bkt/*", "*"], "--output": str(tmp_path / "new.txt")}
    storage.check_paths(fine, outputs=["--output"])
    storage.check_paths({"--input": "gs://bkt/*", "--output": str(text)}, outputs=["--output"])


def test_checkpoints_are_refused_in_s3_up_front():
    """Orbax writes local and gs:// checkpoints only (an s3:// workdir failed inside it with 521
    lines of traceback): refused with one line naming the flag before anything is written."""
    with pytest.raises(storage.StorageError) as refused:
        storage.check_paths({"--workdir": "s3://bkt/run"}, checkpoints=["--workdir"])
    assert str(refused.value).startswith("--workdir='s3://bkt/run': checkpoints cannot be kept")
    storage.check_paths({"--workdir": "/tmp/run"}, checkpoints=["--workdir"])
    storage.check_paths({"--model": "s3://bkt/hf"})  # s3:// for what is no checkpoint: fine


@pytest.mark.parametrize("name", ["run#1", "run?x", "run%41", "a#b/run", "p%zz"])
def test_checkpoints_are_refused_under_a_name_tensorstore_reads_as_a_url(name):
    """A gs:// workdir whose name holds '#', '?' or '%': TensorStore (the checkpoints' arrays)
    reads it as a URL, so `gs://b/w#1 ?x%y` had its metadata under `w#1 ?x%y/` and its arrays
    under `w/` (another run's directory, maybe); a read back found neither. Refused up front, and
    by the checkpoint manager itself for whatever reaches it; the other odd names work."""
    path = f"gs://bkt/{name}"
    with pytest.raises(storage.StorageError, match="TensorStore") as refused:
        storage.check_paths({"--workdir": path}, checkpoints=["--workdir"])
    assert str(refused.value).startswith(f"--workdir={path!r}: checkpoints cannot be kept")
    storage.check_paths({"--output_dir": path})  # data_prep's and export's files: fine there
    from bert_jax.training import checkpoints

    with pytest.raises(storage.StorageError, match="TensorStore"):
        checkpoints.make_manager(path)
    for fine in ("run 1", "run-ü", "run[1]", "run+x", "run=1;a@b"):
        assert storage.checkpoint_problem(f"gs://bkt/{fine}") is None


@pytest.mark.parametrize(
    "base, parts, joined, parent, name",
    [
        (
            "gs://bkt/run",
            ("checkpoints", "4"),
            "gs://bkt/run/checkpoints/4",
            "gs://bkt/run/checkpoints",
            "4",
        ),
        ("gs://bkt/run/", ("x",), "gs://bkt/run/x", "gs://bkt/run", "x"),
        ("s3://bkt", ("a.txt",), "s3://bkt/a.txt", "s3://bkt", "a.txt"),
        ("/tmp/run", ("x",), "/tmp/run/x", "/tmp/run", "x"),
    ],
)
def test_join_dirname_and_basename_as_each_kind_does(base, parts, joined, parent, name):
    assert storage.join(base, *parts) == joined
    assert storage.dirname(joined) == parent
    assert storage.basename(joined) == name
    assert storage.parse(joined) == joined
