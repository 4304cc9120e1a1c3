"""Checks of the plain-Python oracle of google-research/bert's FullTokenizer (tests/support/
tokenizer_oracle.py) against the original's own unit tests."""

from support.tokenizer_oracle import (
    FullTokenizerOracle,
    basic_tokenize,
    is_control,
    is_punctuation,
    is_whitespace,
    wordpiece_tokenize,
)


def test_oracle_on_the_originals_unit_tests():
    assert basic_tokenize(" \tHeLLo!how  \n Are yoU?  ", True) == [
        "hello",
        "!",
        "how",
        "are",
        "you",
        "?",
    ]
    assert basic_tokenize("H\u00e9llo", True) == ["hello"]
    assert basic_tokenize(" \tHeLLo!how  \n Are yoU?  ", False) == [
        "HeLLo",
        "!",
        "how",
        "Are",
        "yoU",
        "?",
    ]
    assert basic_tokenize("ah\u535a\u63a8zz", True) == ["ah", "\u535a", "\u63a8", "zz"]
    vocab = {
        t: i
        for i, t in enumerate(
            ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing"]
        )
    }
    assert FullTokenizerOracle(vocab).tokenize("") == []
    oracle = FullTokenizerOracle({**vocab, ",": 10})
    assert oracle.tokenize("UNwant\u00e9d,running") == [
        "un",
        "##want",
        "##ed",
        ",",
        "runn",
        "##ing",
    ]
    assert oracle.encode("UNwant\u00e9d,running") == [7, 4, 5, 10, 8, 9]
    assert wordpiece_tokenize("unwanted running", vocab) == [
        "un",
        "##want",
        "##ed",
        "runn",
        "##ing",
    ]
    assert wordpiece_tokenize("unwantedX running", vocab) == ["[UNK]", "runn", "##ing"]
    assert [is_whitespace(c) for c in " \t\r\n\u00a0A-"] == [True] * 5 + [False] * 2
    assert [is_control(c) for c in "\u0005A \t\r\U0001f4a9"] == [True] + [False] * 5
    assert [is_punctuation(c) for c in "-$`.A "] == [True] * 4 + [False] * 2


def test_oracle_keeps_private_use_and_unassigned_characters():
    """The case of issue 13: Co and Cn are not "control" to the original, so they stay in words."""
    assert basic_tokenize("a\uf8ffb \U000f0000 \u0378", True) == [
        "a\uf8ffb",
        "\U000f0000",
        "\u0378",
    ]
    assert basic_tokenize("a\u200bb\x0bc\x00d\ufffde", True) == ["abcde"]  # Cf, Cc, NUL, U+FFFD
