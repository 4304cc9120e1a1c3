"""glue_table's --overrides: a field that does not exist is named with the nearest real one."""

import pytest

from bert_jax import cli
from bert_jax.finetune import glue_table

SST2 = glue_table.TASKS["sst2"]


@pytest.mark.parametrize(
    "key, hint",
    [
        ("optm.learning_rate", "no such field; did you mean optim?"),
        ("optim.learnig_rate", "no such field; did you mean optim.learning_rate?"),
        ("Train.batch_size", "no such field; did you mean train?"),
        ("train.batchsize", "no such field; did you mean train.batch_size?"),
        ("optim.learning_rate.x", "optim.learning_rate is a value, not a section"),
        ("zzz", "no such field; the fields of the config are: checkpoint, data, eval,"),
    ],
)
def test_an_override_of_no_field_names_the_nearest_one(tmp_path, key, hint):
    with pytest.raises(cli.UserError) as raised:
        glue_table.task_config(SST2, str(tmp_path), {key: 1})
    assert str(raised.value).startswith(
        f"--overrides: {key}=1 cannot be set on configs/finetune ({hint}"
    ), raised.value


def test_a_value_of_the_wrong_type_is_still_named():
    with pytest.raises(cli.UserError, match=r"optim.learning_rate='abc' cannot be set"):
        glue_table.task_config(SST2, "glue", {"optim.learning_rate": "abc"})


def test_a_field_set_twice_is_refused():
    """The last of two values won, silently (3 epochs run where 0.01 was also asked)."""
    with pytest.raises(cli.UserError, match=r"--overrides sets train\.num_epochs twice"):
        glue_table.parse_overrides(["train.num_epochs=0.01", " train.num_epochs=3"])
    assert glue_table.parse_overrides(["train.num_epochs=3", "train.seed=1"]) == {
        "train.num_epochs": 3,
        "train.seed": 1,
    }
