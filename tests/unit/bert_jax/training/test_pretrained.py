"""training.pretrained.load, the one loader behind embed, export and fine-tuning's --init, on
each kind of directory: a Hugging Face one with vocab.txt, one transformers 5 saved with
tokenizer.json only, and a training workdir (its recorded vocabulary;
tests/unit/bert_jax/test_embed.py and tests/unit/bert_jax/finetune/test_lora.py cover its damaged
steps). Fine-tuning and embed read the same vocabulary and lower-casing from each, which they did
not before the two loaders became one."""

import json
import os
import random
import shutil
import unicodedata

import pytest

from bert_jax import cli, embed
from bert_jax.finetune import runs
from bert_jax.training import pretrained
from support import unicode_sample
from support.finetune_data import VOCAB, make_config, save_tiny_hf, sst2_file

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """{'vocab_txt': our tiny HF export, 'tokenizer_json': the same weights with transformers'
    tokenizer.json (cased) instead of vocab.txt}."""
    root = tmp_path_factory.mktemp("pretrained")
    with_vocab = save_tiny_hf(root)
    only_json = str(root / "tokenizer_json")
    os.makedirs(only_json)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(with_vocab, name), only_json)
    tok = transformers.BertTokenizer(os.path.join(with_vocab, "vocab.txt"), do_lower_case=False)
    tok.save_pretrained(only_json)
    if os.path.exists(os.path.join(only_json, "vocab.txt")):  # transformers 4 wrote one too
        os.remove(os.path.join(only_json, "vocab.txt"))
    assert os.path.isfile(os.path.join(only_json, "tokenizer.json"))
    return {"vocab_txt": with_vocab, "tokenizer_json": only_json}


def test_a_hugging_face_directory_with_vocab_txt(dirs):
    loaded = pretrained.load(dirs["vocab_txt"], overrides={"dtype": "bfloat16"})
    assert loaded.config.dtype == "bfloat16" and loaded.config.hidden_size == 32
    assert loaded.vocab_file == os.path.join(dirs["vocab_txt"], "vocab.txt")
    assert loaded.vocab_to_record == loaded.vocab_file and loaded.do_lower_case is True
    assert loaded.tokenizer.vocab_size == len(VOCAB)
    assert set(loaded.params) == {"bert", "mlm", "nsp"}  # the whole BertForPreTraining


@pytest.mark.parametrize(
    "name, lower",
    [
        ("cased_L-12_H-768_A-12", False),
        ("multi_cased_L-12_H-768_A-12", False),
        ("wwm_cased_L-24_H-1024_A-16", False),
        ("uncased_L-2_H-128_A-2", True),
        ("multilingual_L-12_H-768_A-12", True),
        ("my_model", True),
    ],
)
def test_a_google_release_named_cased_is_not_lower_cased(dirs, tmp_path, name, lower):
    """Google's original cased release (bert_config.json, vocab.txt, bert_model.ckpt: no
    tokenizer_config.json) was lower-cased, as an uncased one: "GOOD" read as "good", other ids
    than the model was trained on; google-research/bert refuses that by the directory's name
    (validate_case_matches_checkpoint). Its name now sets do_lower_case; an explicit one wins."""
    release = tmp_path / name
    release.mkdir()
    shutil.copy(os.path.join(dirs["vocab_txt"], "vocab.txt"), release)
    # Google's weights are a TensorFlow checkpoint; the same weights as safetensors read alike.
    shutil.copy(os.path.join(dirs["vocab_txt"], "model.safetensors"), release)
    with open(os.path.join(dirs["vocab_txt"], "config.json")) as f:
        config = {k: v for k, v in json.load(f).items() if k != "model_type"}
    (release / "bert_config.json").write_text(json.dumps(config))
    loaded = pretrained.load(str(release))
    assert loaded.do_lower_case is lower
    good, unk = VOCAB.index("good"), VOCAB.index("[UNK]")
    assert loaded.tokenizer.encode("GOOD") == [good if lower else unk]
    assert pretrained.load(str(release), do_lower_case=True).tokenizer.encode("GOOD") == [good]


def test_a_tokenizer_json_only_directory_gives_the_same_vocabulary(dirs):
    loaded = pretrained.load(dirs["tokenizer_json"])
    with open(loaded.vocab_file, encoding="utf-8") as f:
        assert f.read().splitlines() == VOCAB  # in id order
    assert loaded.do_lower_case is False  # tokenizer_config.json says so
    assert loaded.vocab_to_record == ""  # a scratch file: a resumed run derives it again
    theirs = transformers.AutoTokenizer.from_pretrained(dirs["tokenizer_json"])
    for text in ("GOOD w1 Alice", "good w1 alice ?"):  # cased: GOOD and Alice are [UNK]
        want = theirs(text, add_special_tokens=False)["input_ids"]
        assert loaded.tokenizer.encode(text) == want, text


@pytest.mark.parametrize(
    "options",
    [
        {"strip_accents": False},
        {"tokenize_chinese_chars": False},
        {"do_lower_case": False, "strip_accents": True},
    ],
)
@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_tokenizer_options_transformers_honours_give_its_ids(dirs, tmp_path, options, kind):
    """tokenizer_config.json's strip_accents and tokenize_chinese_chars (a tokenizer.json's
    normalizer) change transformers' ids; they were ignored (our WordPiece strips accents exactly
    when it lower-cases and always spaces CJK characters): 'café' became 'cafe', '中国' two
    pieces where transformers has one [UNK]. Now the ids are transformers'."""
    model_dir = tmp_path / "model"
    os.makedirs(model_dir)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(dirs["vocab_txt"], name), model_dir)
    (model_dir / "vocab.txt").write_text("\n".join(VOCAB[:-4] + ["café", "naïve", "中", "e"]))
    settings = {"do_lower_case": True, **options}
    if kind == "vocab_txt":
        (model_dir / "tokenizer_config.json").write_text(json.dumps(settings))
    else:
        tok = transformers.BertTokenizer(str(model_dir / "vocab.txt"), **settings)
        tok.save_pretrained(str(model_dir))
        os.remove(model_dir / "vocab.txt")
    loaded = pretrained.load(str(model_dir))
    theirs = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    for text in ("Café NAÏVE 中国 cafe", "café naive e", "中 GOOD"):
        assert loaded.tokenizer.encode(text) == theirs(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json", "bert_config_json"])
def test_a_long_word_is_unk_where_transformers_makes_it_unk(dirs, tmp_path, kind):
    """transformers' BertTokenizer makes a word of over 100 characters [UNK]; our WordPiece
    (Google's FullTokenizer) split words up to 200, so embed and fine-tuning gave other ids
    than transformers for 101-200 characters. Google's own directory (bert_config.json) keeps
    FullTokenizer's 200."""
    model_dir = tmp_path / "model"
    os.makedirs(model_dir)
    shutil.copy(os.path.join(dirs["vocab_txt"], "model.safetensors"), model_dir)
    config = "bert_config.json" if kind == "bert_config_json" else "config.json"
    shutil.copy(os.path.join(dirs["vocab_txt"], "config.json"), model_dir / config)
    (model_dir / "vocab.txt").write_text("\n".join(VOCAB[:-2] + ["a", "##a"]))
    if kind == "tokenizer_json":
        transformers.BertTokenizer(str(model_dir / "vocab.txt")).save_pretrained(str(model_dir))
        os.remove(model_dir / "vocab.txt")
    tok = pretrained.load(str(model_dir)).tokenizer
    texts = [f"{'a' * n} good" for n in (100, 101, 150, 200, 201)]
    got = [tok.encode(text) for text in texts]
    flat, lengths = tok.encode_batch(texts)
    assert flat.tolist() == [i for ids in got for i in ids] and lengths.tolist() == list(
        map(len, got)
    )
    unk = [ids[0] == tok.unk_id for ids in got]
    assert unk == (
        [False, False, False, False, True]
        if config == "bert_config.json"
        else [False, True, True, True, True]
    )
    if config == "config.json":
        theirs = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        assert got == [theirs(text, add_special_tokens=False)["input_ids"] for text in texts]


def tiny_config(vocab_size: int):
    return transformers.BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=16,
    )


def test_a_directory_whose_vocabulary_leaves_table_rows_unused_loads(tmp_path):
    """A model whose word-embedding table has 200 rows more than its own vocab.txt (a table
    sized for a larger vocabulary): transformers embeds with it; it was refused ('has N entries
    but the model N+200 word embeddings: pass the model's own vocab.txt'), though it is."""
    model_dir = str(tmp_path / "model")
    config = tiny_config(len(VOCAB) + 200)
    transformers.BertModel(config).save_pretrained(model_dir)
    with open(os.path.join(model_dir, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    _, tok = embed.load_encoder(model_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert (
        tok.encode("good w1 alice")
        == theirs("good w1 alice", add_special_tokens=False)["input_ids"]
    )
    # Another vocabulary the user names must still look like the table's (the directory's own,
    # named, is read as the directory's: test_a_saved_run_reads_the_directorys_own_vocabulary...).
    named = str(tmp_path / "vocab.txt")
    shutil.copy(os.path.join(model_dir, "vocab.txt"), named)
    with pytest.raises(cli.UserError, match="entries but the model"):
        pretrained.load(model_dir, vocab_file=named)


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_a_special_token_written_in_the_text_is_that_token(dirs, tmp_path, kind):
    """transformers' BertTokenizer reads "[MASK]" (or "[SEP]", ...) in a text as the special
    token; embed and fine-tuning split it into "[", "mask", "]" (FullTokenizer's reading), so
    "paris is the capital of [MASK]." gave other ids than transformers."""
    model_dir = tmp_path / "model"
    shutil.copytree(dirs["vocab_txt"], model_dir)
    if kind == "tokenizer_json":
        tok = transformers.BertTokenizer(str(model_dir / "vocab.txt"))
        tok.save_pretrained(str(model_dir))
        os.remove(model_dir / "vocab.txt")
    theirs = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    _, tok = embed.load_encoder(str(model_dir))
    texts = ["good [MASK] w1", "good[SEP]alice [mask] [UNK][PAD]", "[CLS]", "w1 alice", ""]
    want = [theirs(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [tok.encode(text) for text in texts] == want
    flat, lengths = tok.encode_batch(texts)
    assert flat.tolist() == [i for ids in want for i in ids]
    assert lengths.tolist() == list(map(len, want))
    assert tok.mask_id in want[0]


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_private_use_characters_are_deleted_as_transformers_deletes_them(dirs, kind):
    """transformers' BertNormalizer deletes private-use characters (Co) as controls; embed and
    fine-tuning kept them (FullTokenizer's rule), so "good\ue000w1" was one [UNK] word, not
    "goodw1"'s pieces. Every 61st private-use code point, alone, inside words, beside a special
    token, in random text of the tiny vocabulary's words."""
    theirs = transformers.AutoTokenizer.from_pretrained(dirs[kind])
    _, tok = embed.load_encoder(dirs[kind])
    private = [
        chr(c)
        for lo, hi in ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
        for c in range(lo, hi + 1, 61)
    ] + ["\uf8ff", "\U0010fffd"]
    rng = random.Random(0)
    words = ["good", "w1", "alice", "[MASK]", "paris", "?", " ", "Alice"]
    texts = [f"good{c}w1 {c} al{c}ice{c}[MASK]{c}" for c in private]
    texts += ["".join(rng.choice(words + private[:50]) for _ in range(12)) for _ in range(300)]
    want = [theirs(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [tok.encode(text) for text in texts] == want
    for batch in (texts, [t.replace("[MASK]", "") for t in texts]):  # with and without [MASK]
        flat, lengths = tok.encode_batch(batch)
        ids = [theirs(t, add_special_tokens=False)["input_ids"] for t in batch]
        assert flat.tolist() == [i for row in ids for i in row]
        assert lengths.tolist() == list(map(len, ids))


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_the_cjk_characters_transformers_leaves_unspaced_give_its_ids(dirs, kind):
    """transformers' is_chinese_char starts CJK Extension E's range at 0x2B920, not 0x2B820
    (FullTokenizer's): it does not split U+2B820-U+2B91F off their words, and "good\U0002b820w1"
    was three words here, one there. Every such code point, inside words, beside [MASK], and
    in random texts with neighbouring ideographs and private-use characters."""
    theirs = transformers.AutoTokenizer.from_pretrained(dirs[kind])
    _, tok = embed.load_encoder(dirs[kind])
    odd = [chr(c) for c in range(0x2B820, 0x2B920)]
    texts = [f"good{c}w1 {c} al{c}ice{c}[MASK]" for c in odd]
    rng = random.Random(0)
    words = ["good", "w1", "alice", "[MASK]", " ", "Alice", "\ue000", "\u4e2d", "\U0002b81f"]
    texts += ["".join(rng.choice(words + odd[:20]) for _ in range(10)) for _ in range(200)]
    want = [theirs(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [tok.encode(text) for text in texts] == want
    flat, lengths = tok.encode_batch(texts + ["good w1", "alice"])
    want += [theirs(t, add_special_tokens=False)["input_ids"] for t in ("good w1", "alice")]
    assert flat.tolist() == [i for row in want for i in row]
    assert lengths.tolist() == list(map(len, want))


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_text_of_any_code_point_gives_transformers_ids(dirs, kind):
    """Every kind of code point (unicode_sample: each general category's runs at both ends and
    inside), alone, inside words and beside a special token, lower-cased and cased: the ids of
    transformers' tokenizer of the directory, by encode, encode_batch and tokenize."""
    theirs = transformers.AutoTokenizer.from_pretrained(dirs[kind])
    _, tok = embed.load_encoder(dirs[kind])
    points = unicode_sample.sample(lambda cp: unicodedata.category(chr(cp)))
    texts = [f"good{chr(c)}w1 {chr(c)} Al{chr(c)}ice{chr(c)}[MASK]{chr(c)}" for c in points]
    want = [theirs(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [tok.encode(text) for text in texts] == want
    flat, lengths = tok.encode_batch(texts)
    assert flat.tolist() == [i for row in want for i in row]
    assert lengths.tolist() == list(map(len, want))
    assert [tok.tokenize(t) for t in texts[::50]] == [theirs.tokenize(t) for t in texts[::50]]


@pytest.mark.parametrize("kind", ["vocab_txt", "tokenizer_json"])
def test_a_lone_surrogate_is_deleted_as_transformers_python_tokenizer_deletes_it(dirs, kind):
    """Half a surrogate pair ("\\ud83d", from a JSON escape: a SQuAD file's text) is no UTF-8
    text: the tokenizers library, transformers' BertTokenizer, raises TypeError on it (it did
    here too, a traceback); transformers' Python BertTokenizer deletes it as a control, and so
    does this tokenizer."""
    loaded = pretrained.load(dirs[kind])
    python = transformers.BertTokenizerLegacy(loaded.vocab_file, do_lower_case=loaded.do_lower_case)
    rng = random.Random(0)
    words = ["good", "w1", "Alice", "[MASK]", " ", "\ud800", "\udbff\udfff", "\udc00"]
    texts = ["".join(rng.choice(words) for _ in range(8)) for _ in range(200)]
    want = [python(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert [loaded.tokenizer.encode(text) for text in texts] == want
    flat, lengths = loaded.tokenizer.encode_batch(texts)
    assert flat.tolist() == [i for row in want for i in row]
    assert lengths.tolist() == list(map(len, want))


@pytest.mark.parametrize("keep_vocab_txt", [False, True])
def test_tokens_added_to_the_tokenizer_are_read_whole(dirs, tmp_path, keep_vocab_txt):
    """A fine-tuned model whose tokenizer had tokens added (entity markers, new words:
    tokenizer.add_tokens, its embeddings resized): transformers reads them whole; embed and
    fine-tuning split them into word pieces or [UNK] ('newtok' gave [UNK])."""
    model_dir = str(tmp_path / "model")
    tok = transformers.BertTokenizer(os.path.join(dirs["vocab_txt"], "vocab.txt"))
    tok.add_tokens(["newtok", "<ent>"])
    tok.add_special_tokens({"additional_special_tokens": ["[E1]"]})
    config = tiny_config(len(tok))
    transformers.BertModel(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    if keep_vocab_txt:  # transformers 4 wrote both
        shutil.copy(os.path.join(dirs["vocab_txt"], "vocab.txt"), model_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir)
    _, ours = embed.load_encoder(model_dir)
    for text in ("good newtok w1", "Good <ent> alice [E1] newtoken"):
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize(
    "change",
    [
        {"pre_tokenizer": {"type": "Whitespace"}},
        {"model": {"continuing_subword_prefix": "@@"}},
        {"model": {"unk_token": "[PAD]"}},
    ],
)
def test_a_wordpiece_tokenizer_json_of_other_rules_is_used_as_it_is(dirs, tmp_path, change):
    """A WordPiece tokenizer.json whose pre-tokenizer, continuation prefix or unknown token is
    not BERT's: its vocabulary was read with FullTokenizer's rules ("##", [UNK], punctuation
    split) and gave other ids than the file; now the file tokenizes."""
    import tokenizers

    model_dir = tmp_path / "model"
    shutil.copytree(dirs["tokenizer_json"], model_dir)
    path = model_dir / "tokenizer.json"
    spec = json.loads(path.read_text())
    for key, value in change.items():
        spec[key] = spec[key] | value if key == "model" else value
    if "continuing_subword_prefix" in change.get("model", {}):  # "alice1": alice, @@1
        spec["model"]["vocab"] = {
            k.replace("w39", "@@1"): i for k, i in spec["model"]["vocab"].items()
        }
    path.write_text(json.dumps(spec))
    theirs = tokenizers.Tokenizer.from_file(str(path))
    ours = pretrained.load(str(model_dir)).tokenizer
    for text in ("good w1 alice?.", "alice1 x"):  # BertPreTokenizer splits "?." apart
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False).ids, text


def test_a_japanese_tokenizer_is_refused_by_name(dirs, tmp_path):
    """cl-tohoku's Japanese BERTs: vocab.txt read after MeCab word splitting
    (BertJapaneseTokenizer). BERT's rules gave other ids silently; now one error names the
    class, and an explicit vocabulary is still taken."""
    model_dir = tmp_path / "model"
    shutil.copytree(dirs["vocab_txt"], model_dir)
    (model_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab"})
    )
    with pytest.raises(cli.UserError, match="tokenizer_class 'BertJapaneseTokenizer'"):
        embed.load_encoder(str(model_dir))
    pretrained.load(str(model_dir), vocab_file=str(model_dir / "vocab.txt"))


@pytest.mark.parametrize("name", ["tokenizer_config.json", "tokenizer.json"])
def test_a_damaged_tokenizer_file_is_one_error_naming_it(dirs, tmp_path, name):
    model_dir = tmp_path / "model"
    shutil.copytree(dirs["vocab_txt"], model_dir)
    (model_dir / name).write_text('{"do_lower_case": tr')
    with pytest.raises(cli.UserError, match=f"{model_dir / name} is not valid JSON"):
        pretrained.load(str(model_dir))


def test_a_tokenizer_json_beside_vocab_txt_sets_the_longest_word(dirs, tmp_path):
    """transformers' BertTokenizer reads max_input_chars_per_word from tokenizer.json: a longer
    word is [UNK], as there."""
    model_dir = tmp_path / "model"
    shutil.copytree(dirs["vocab_txt"], model_dir)
    word = next(t for t in VOCAB if t.isalpha() and len(t) > 1)
    (model_dir / "tokenizer.json").write_text(
        json.dumps({"model": {"max_input_chars_per_word": len(word) - 1}})
    )
    loaded = pretrained.load(str(model_dir))
    assert loaded.vocab_file == str(model_dir / "vocab.txt")
    assert loaded.tokenizer.encode(word) == [VOCAB.index("[UNK]")]
    assert pretrained.load(dirs["vocab_txt"]).tokenizer.encode(word) == [VOCAB.index(word)]


def test_fine_tuning_and_embed_read_a_tokenizer_json_directory_alike(dirs, tmp_path):
    config = make_config(
        format="glue", layout="sst2", train_file=sst2_file(tmp_path / "t.tsv", 8, 0)
    )
    run = runs.prepare(config, dirs["tokenizer_json"])
    _, tokenizer = embed.load_encoder(dirs["tokenizer_json"])
    assert run.config.data.vocab_file == "" and run.config.data.do_lower_case is False
    with open(run.vocab_file, encoding="utf-8") as f:
        assert f.read().splitlines() == VOCAB
    for text in ("Good w1 alice", "good w1 alice"):
        assert tokenizer.encode(text) == run.tok.encode(text), text


def test_a_saved_run_reads_the_directorys_own_vocabulary_as_the_run_did(tmp_path):
    """Fine-tuning records --init's own vocab.txt, and its resume and predict pass it back as
    the vocabulary: it was then read as one the user named, by Google's rules ("[MASK]" in the
    text three pieces, not the one the run trained with) and refused where it leaves rows of the
    model's table unused (transformers' tokenizer embeds with it, and the run had)."""
    model_dir = str(tmp_path / "model")
    transformers.BertModel(tiny_config(len(VOCAB) + 200)).save_pretrained(model_dir)
    with open(os.path.join(model_dir, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    config = make_config(
        format="glue", layout="sst2", train_file=sst2_file(tmp_path / "t.tsv", 8, 0)
    )
    config.data.max_seq_length = 16  # tiny_config's positions
    run = runs.prepare(config, model_dir)
    again = runs.prepare(run.config, with_train=False)
    assert again.config.data.vocab_file == run.config.data.vocab_file == run.vocab_file
    for text in ("good [MASK] w1", "alice" * 30, "good\ue000w1"):
        assert again.tok.encode(text) == run.tok.encode(text), text


def test_mistakes_are_one_clear_error(dirs, tmp_path):
    with pytest.raises(cli.UserError, match="is not a directory"):
        pretrained.load(str(tmp_path / "nope"))
    with pytest.raises(cli.UserError, match="has no steps"):
        pretrained.load(dirs["vocab_txt"], step=3)
    with pytest.raises(cli.UserError, match=r"model fields \['hidden_size'\] cannot be changed"):
        pretrained.load(dirs["vocab_txt"], overrides={"hidden_size": 64})
    big = tmp_path / "big_vocab.txt"
    big.write_text("\n".join(VOCAB + [f"x{i}" for i in range(200)]) + "\n")
    with pytest.raises(cli.UserError, match=f"has {len(VOCAB) + 200} entries but the model"):
        pretrained.load(dirs["vocab_txt"], vocab_file=str(big))
