"""bert_jax.hf.publish: a model directory is new, empty or a previous export of ours replaced whole;
written inside itself (mount points work); readable as the umask allows; left as it was when a
write fails."""

import errno
import os
import stat

import pytest

from bert_jax.hf import publish
from bert_jax.storage import workdir_lock


def writer(files: dict[str, str]):
    def write(scratch):
        for name, text in files.items():
            with open(os.path.join(scratch, name), "w") as f:
                f.write(text)
        os.chmod(os.path.join(scratch, next(iter(files))), 0o600)  # as safetensors' file was

    return write


def contents(directory) -> dict[str, str]:
    return {
        n: open(os.path.join(directory, n)).read()
        for n in sorted(os.listdir(directory))
        if n != publish.MARKER
    }


def test_a_new_directory_gets_the_files_readable_as_the_umask_allows(tmp_path):
    out = str(tmp_path / "new" / "model")
    old_mask = os.umask(0o022)
    try:
        assert publish.directory(out, writer({"model.safetensors": "w", "config.json": "c"})) == [
            "config.json",
            "model.safetensors",
        ]
        os.umask(0o002)
        publish.directory(out, writer({"model.safetensors": "w2", "config.json": "c2"}))
    finally:
        os.umask(old_mask)
    assert contents(out) == {"config.json": "c2", "model.safetensors": "w2"}
    assert stat.S_IMODE(os.stat(os.path.join(out, "model.safetensors")).st_mode) == 0o664
    assert sorted(os.listdir(out)) == [publish.MARKER, "config.json", "model.safetensors"]


def test_a_previous_export_of_ours_is_replaced_whole(tmp_path):
    """The issue's case: a stale tokenizer.json beside new weights made transformers load a
    200-entry tokenizer for a 30,522-row model. An export of ours that wrote one is replaced
    whole: the new export has no tokenizer.json, so none is left."""
    out = str(tmp_path / "hf")
    publish.directory(out, writer({"model.safetensors": "old", "tokenizer.json": "200 entries"}))
    publish.directory(out, writer({"model.safetensors": "new", "vocab.txt": "30522 entries"}))
    assert contents(out) == {"model.safetensors": "new", "vocab.txt": "30522 entries"}


@pytest.mark.parametrize("foreign", ["tokenizer.json", "pytorch_model.bin", "README.md"])
def test_files_we_did_not_write_are_refused_and_kept(tmp_path, foreign):
    out = tmp_path / "hf"
    out.mkdir()
    (out / foreign).write_text("theirs")
    with pytest.raises(publish.cli.UserError) as refused:
        publish.directory(str(out), writer({"model.safetensors": "new"}))
    assert f"holds files that are not an export of ours ({foreign})" in str(refused.value)
    assert contents(out) == {foreign: "theirs"}
    # Beside an export of ours, too: nothing of theirs is deleted.
    (out / foreign).unlink()
    publish.directory(str(out), writer({"model.safetensors": "ours"}))
    (out / foreign).write_text("theirs")
    with pytest.raises(publish.cli.UserError, match=foreign):
        publish.directory(str(out), writer({"model.safetensors": "new"}))
    assert contents(out) == {foreign: "theirs", "model.safetensors": "ours"}


def test_hidden_files_are_kept_and_a_directory_of_only_them_counts_as_empty(tmp_path):
    """The issue's case: an output directory kept in a repository by its .gitkeep was refused."""
    out = tmp_path / "hf"
    out.mkdir()
    (out / ".gitkeep").write_text("")
    publish.directory(str(out), writer({"model.safetensors": "first"}))
    publish.directory(str(out), writer({"model.safetensors": "second"}))  # replaced, kept
    assert contents(out) == {".gitkeep": "", "model.safetensors": "second"}


def test_an_output_dir_that_is_a_mount_point_works(tmp_path, monkeypatch):
    """A rename from outside a mount point into it fails with EXDEV (a Docker volume, NFS): the
    scratch directory used to be made beside the target."""
    out = str(tmp_path / "volume")
    os.mkdir(out)
    real_rename, real_replace = os.rename, os.replace

    def inside(path):
        return os.path.abspath(path).startswith(out + os.sep)

    def cross_device(real):
        def rename(src, dst, *args, **kwargs):
            if inside(src) != inside(dst):
                raise OSError(errno.EXDEV, "Invalid cross-device link", src)
            return real(src, dst, *args, **kwargs)

        return rename

    monkeypatch.setattr(os, "rename", cross_device(real_rename))
    monkeypatch.setattr(os, "replace", cross_device(real_replace))
    publish.directory(out, writer({"model.safetensors": "w", "config.json": "c"}))
    publish.directory(out, writer({"model.safetensors": "w2", "config.json": "c2"}))
    assert contents(out) == {"config.json": "c2", "model.safetensors": "w2"}


def test_a_full_disk_leaves_the_previous_export_as_it_was(tmp_path):
    out = str(tmp_path / "hf")
    publish.directory(out, writer({"model.safetensors": "old", "vocab.txt": "v"}))

    def full(scratch):
        writer({"model.safetensors": "half"})(scratch)
        raise OSError(errno.ENOSPC, "No space left on device", os.path.join(scratch, "vocab.txt"))

    with pytest.raises(OSError, match="No space left"):
        publish.directory(out, full)
    assert contents(out) == {"model.safetensors": "old", "vocab.txt": "v"}
    # And into a new directory: nothing is left at all.
    with pytest.raises(OSError, match="No space left"):
        publish.directory(str(tmp_path / "new"), full)
    assert not os.path.exists(tmp_path / "new")


def test_a_killed_exports_scratch_is_cleared_and_a_live_export_refuses_a_second(tmp_path):
    out = tmp_path / "hf"
    (out / ".export-tmp-999999").mkdir(parents=True)
    (out / ".export-tmp-999999" / "model.safetensors").write_text("half")
    with workdir_lock.hold(str(out), "bert_jax.export", flag="--output_dir"):
        with pytest.raises(workdir_lock.Busy, match=r"--output_dir=.* is in use by bert_jax"):
            publish.directory(str(out), writer({"model.safetensors": "new"}))
    publish.directory(str(out), writer({"model.safetensors": "new"}))
    assert sorted(os.listdir(out)) == [publish.MARKER, "model.safetensors"]


@pytest.mark.parametrize("renames", range(4))
def test_an_export_killed_between_its_renames_has_no_config_json(tmp_path, monkeypatch, renames):
    """A kill at any moment of the publishing renames: the directory holds config.json only when
    every file is in place (before: config.json, renamed first, came with weights and no
    vocabulary, a model transformers loads without its tokenizer)."""
    out = str(tmp_path / "hf")
    publish.directory(out, writer({"model.safetensors": "old", "config.json": "c0"}))
    files = {"model.safetensors": "w", "config.json": "c", "vocab.txt": "v", "tokenizer.json": "t"}
    done, real_replace = [], os.replace

    def replace(src, dst):
        if publish._SCRATCH in src and len(done) == renames:
            raise KeyboardInterrupt  # the kill
        real_replace(src, dst)
        if publish._SCRATCH in src:
            done.append(dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        publish.directory(out, writer(files))
    published = {n for n in os.listdir(out) if not n.startswith(".")}
    assert "config.json" not in published and published < set(files), published
