"""Paths, local or in a bucket (gs://, s3://): which a path is, and joining and splitting them as
its kind does. The package docstring (bert_jax/storage/__init__.py) says what stands for what."""

import os
import posixpath

from bert_jax import cli

SCHEMES = ("gs", "s3")


class StorageError(cli.UserError):
    """A bucket path that cannot be used as given (unknown scheme, a bucket that is not there)."""


def is_url(path: str) -> bool:
    """Whether `path` names an object in a bucket (gs://, s3://) rather than a local file."""
    scheme, sep, _ = str(path).partition("://")
    if not sep:
        return False
    if scheme not in SCHEMES:
        raise StorageError(
            f"{path}: {scheme}:// paths are not supported; use a local path, gs:// or s3://"
        )
    return True


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def dirname(path: str) -> str:
    if is_url(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
    return posixpath.basename(str(path).rstrip("/"))


def expand(path: str) -> str:
    """A user's path as this module takes it: `~` expanded for local paths, URLs as given."""
    return path if is_url(path) else os.path.expanduser(path)
