"""tasks.py's config fields as a saved run's config may hold them (JSON anyone can edit): a value
of the wrong kind is one UserError naming the field, not a TypeError."""

import ml_collections
import pytest

from bert_jax import cli
from bert_jax.finetune import glue, tasks


@pytest.mark.parametrize(
    "labels, names",
    [
        ("neg,neutral,pos", ("neg", "neutral", "pos")),
        (("neg,pos",), ("neg", "pos")),
        ((0, 1), ("0", "1")),
        ([""], ()),
        ((), ()),
    ],
)
def test_label_names(labels, names):
    assert tasks.label_names(labels) == names


@pytest.mark.parametrize("labels", [5, None, {"a": 1}])
def test_label_names_of_the_wrong_kind_name_the_field(labels):
    with pytest.raises(cli.UserError, match=r"config\.data\.labels="):
        tasks.label_names(labels)


@pytest.mark.parametrize("value", [["glue"], 3, None])
def test_format_and_layout_of_the_wrong_kind_name_the_field(value):
    data = ml_collections.ConfigDict({"format": value, "layout": "sst2"})
    with pytest.raises(cli.UserError, match=r"config\.data\.format="):
        tasks.make_task(data)
    with pytest.raises(cli.UserError, match=r"config\.data\.layout"):
        glue.get_layout(value)
