"""The character-level deep Transformer LM (Al-Rfou et al. 2018) through the pipeline: the
"byte" vocabulary (256 UTF-8 byte values + <|endoftext|>), causal-LM pretraining with the
intermediate losses scheduled over the trainer's steps, fine-tuning, evaluation in
perplexity and bits per character, and a pushed SavedModel that continues prompts.
Also unit tests of the byte tokenizer and of how run_fn passes `total_steps`."""

import json
import math
from pathlib import Path

import keras
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING
from lmfactory.components.tasks import language_model
from lmfactory.models.charlm import CharTransformerLM
from lmfactory.models.gpt2 import GPT2CausalLM
from lmfactory.models.tokenizers import Utf8ByteTokenizer

SPECIALS = {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}
NON_ASCII = ["caf\u00e9 \u2014 na\u00efve", "\u6771\u4eac \ud55c\uad6d\uc5b4",
             "emoji \U0001f600\U0001f44d\U0001f3fd", "\u039f\u0394\u039f\u03a3 \u00df", ""]


def _texts(values):
    """keras-hub gives Python values eagerly and tensors in graphs."""
    values = values.numpy().tolist() if hasattr(values, "numpy") else values
    return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]


def _ids(values):
    values = values.to_list() if hasattr(values, "to_list") else values
    return [list(row) for row in values]


# --- The byte tokenizer ------------------------------------------------------------------
def test_byte_tokenizer_round_trips_non_ascii_text():
    tokenizer = Utf8ByteTokenizer(special_tokens=SPECIALS)
    ids = _ids(tokenizer.tokenize(NON_ASCII))
    assert ids == [list(text.encode("utf-8")) for text in NON_ASCII]
    assert max(max(row) for row in ids if row) > 127  # multi-byte characters
    assert _texts(tokenizer.detokenize(tf.ragged.constant(ids, dtype=tf.int32))) == NON_ASCII
    assert _ids(tokenizer.tokenize([""])) == [[]]  # a batch of empty texts
    assert tokenizer.tokenize("").shape == (0,)
    # No lowercasing or Unicode normalisation: the text is modelled as written.
    assert _ids(tokenizer.tokenize(["A\u0301", "\u00c1"])) == [[65, 204, 129], [195, 129]]


def test_byte_tokenizer_special_tokens_take_the_ids_after_the_bytes():
    tokenizer = Utf8ByteTokenizer(special_tokens={"end_of_text": "<eot>", "pad": "<pad>",
                                                  "sep": "<eot>"})
    assert tokenizer.vocabulary_size() == 258
    assert (tokenizer.token_to_id("<eot>"), tokenizer.token_to_id("<pad>")) == (256, 257)
    assert (tokenizer.end_of_text_token_id, tokenizer.pad_token_id) == (256, 257)
    assert tokenizer.token_to_id("a") == 97 and tokenizer.token_to_id("\u00ff") == 255
    assert tokenizer.id_to_token(256) == "<eot>" and tokenizer.id_to_token(97) == "a"
    vocabulary = tokenizer.get_vocabulary()
    assert len(vocabulary) == 258 and vocabulary[255] == "\u00ff" and vocabulary[257] == "<pad>"
    # Specials never come out of text: a literal "<eot>" is five bytes.
    assert _ids(tokenizer.tokenize(["<eot>"])) == [list(b"<eot>")]
    # Detokenizing renders them (as keras-nlp's other tokenizers do).
    assert _texts(tokenizer.detokenize(tf.constant([[104, 105, 256, 33]]))) == ["hi<eot>!"]
    # Dense output is padded with the pad id, not with byte 0.
    dense = Utf8ByteTokenizer(special_tokens=SPECIALS, sequence_length=4)
    assert dense(["ab", "abcdef"]).numpy().tolist() == [[97, 98, 256, 256], [97, 98, 99, 100]]
    with pytest.raises(ValueError, match="neither a byte"):
        tokenizer.token_to_id("\u0100")
    with pytest.raises(ValueError, match="must lie in"):
        tokenizer.id_to_token(258)
    with pytest.raises(ValueError, match="spelling of byte 0"):
        Utf8ByteTokenizer(special_tokens={"pad": "\x00"})
    with pytest.raises(ValueError, match="as written"):
        Utf8ByteTokenizer(special_tokens=SPECIALS, lowercase=True)


def test_byte_tokenizer_detokenizes_invalid_utf8_without_failing():
    """Sampling byte by byte can produce any byte sequence: a cut multi-byte character,
    a lone continuation byte, an over-long form; each bad sequence becomes U+FFFD."""
    tokenizer = Utf8ByteTokenizer(special_tokens=SPECIALS)
    ids = tf.ragged.constant([[104, 0xC3], [0xA9, 105], [0xE2, 0x82, 33],
                              [0xC0, 0xAF], [0xFF, 0xFE, 97], [0xC3, 0xA9]], dtype=tf.int32)
    texts = _texts(tokenizer.detokenize(ids))
    assert texts[0] == "h\ufffd" and texts[1] == "\ufffdi" and texts[5] == "\u00e9"
    assert texts[2].endswith("!") and "\ufffd" in texts[2]
    assert set(texts[3]) == {"\ufffd"} and texts[4].endswith("a")
    assert all(isinstance(text, str) for text in texts)


def test_byte_tokenizer_in_a_saved_model_and_its_config(tmp_path):
    tokenizer = Utf8ByteTokenizer(special_tokens=SPECIALS)
    restored = Utf8ByteTokenizer.from_config(tokenizer.get_config())
    assert restored.get_config() == tokenizer.get_config()
    assert keras.saving.get_registered_object("lmfactory>Utf8ByteTokenizer") is \
        Utf8ByteTokenizer
    module = tf.Module()
    module.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(text):
        ids = module.tokenizer(text)
        return {"length": ids.row_lengths(), "text": module.tokenizer.detokenize(ids)}

    tf.saved_model.save(module, str(tmp_path / "saved"),
                        signatures={"serving_default": round_trip})
    serve = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    outputs = serve(tf.constant(NON_ASCII))
    assert outputs["length"].numpy().tolist() == [len(t.encode("utf-8")) for t in NON_ASCII]
    assert _texts(outputs["text"]) == NON_ASCII


# --- run_fn passes the trainer's steps as total_steps ------------------------------------
def test_run_fn_passes_the_train_steps_as_total_steps():
    """CharTransformerLM phases its intermediate losses out over `total_steps` (§2.2); the
    trainer gives it its own step count. Task models without the argument get none, and a
    recipe's `task_args` still win."""
    assert language_model._schedule_args(CharTransformerLM, {}, 1200) == {"total_steps": 1200}
    assert language_model._schedule_args(CharTransformerLM, {"multiple_targets": False},
                                         30) == {"total_steps": 30, "multiple_targets": False}
    assert language_model._schedule_args(CharTransformerLM, {"total_steps": 7}, 30) == {
        "total_steps": 7}
    assert language_model._schedule_args(GPT2CausalLM, {}, 30) == {}


def test_bits_per_character_metric():
    from lmfactory.components.evaluator import metrics

    assert metrics.bits_per_character(10 * math.log(2), 10) == pytest.approx(1.0)
    assert metrics.bits_per_character(30.0, 12) == pytest.approx(
        math.log2(metrics.perplexity(30.0, 12)))
    assert metrics.METRICS["bits_per_character"] is False  # lower is better
    assert metrics.passes("bits_per_character", 1.9, 2.0, None)[0]
    with pytest.raises(ValueError, match="zero characters"):
        metrics.bits_per_character(1.0, 0)


# --- The DAG -----------------------------------------------------------------------------
PRETRAINING_STEPS, FINETUNING_STEPS = 12, 6


@pytest.fixture(scope="module")
def charlm_run(tmp_path_factory, shared_data):
    from lmfactory.pipelines import runners
    from lmfactory.recipe import load_recipe

    tmp = tmp_path_factory.mktemp("charlm")
    corpus = tmp / "shakespeare.txt"
    text = (shared_data / "tiny_shakespeare" / "input.txt").read_text(encoding="utf-8")
    # Whole speeches (documents are separated by blank lines), plus one with non-ASCII text.
    corpus.write_text(text[:text.index("\n\n", 12_000)] + "\n\nJULIET:\nCaf\u00e9, \u00e9t\u00e9 "
                      "\u2014 adieu!\n", encoding="utf-8")
    recipe = load_recipe("charlm_tiny_shakespeare", TINY_TRAINING + [
        f"data.corpus.path={corpus}", f"data.target_corpus.path={corpus}",
        f"pretraining.steps={PRETRAINING_STEPS}", f"finetuning.steps={FINETUNING_STEPS}",
        "evaluation.threshold=1000000.0", "evaluation.metric=perplexity", "evaluation.max_batches=4",
        "serving.generation.max_length=40"])
    summary = runners.run_local(recipe, str(tmp / "runs"))
    return recipe, summary


def _artifact(root: Path, component: str, output: str) -> Path:
    folders = sorted((root / component / output).iterdir())
    assert folders, f"{component} wrote no {output}"
    return folders[-1]


def test_recipe_uses_the_byte_vocabulary():
    from lmfactory import models
    from lmfactory.recipe import load_recipe

    recipe = load_recipe("charlm_tiny_shakespeare")
    assert models.get("charlm").tokenizer_kind == "byte"
    assert recipe["tokenizer"] == {**recipe["tokenizer"], "kind": "byte", "vocab_size": 257}
    assert recipe["objective"]["name"] == "causal_lm"
    assert recipe["data"]["corpus"]["path"].endswith("tiny_shakespeare/input.txt")
    assert recipe["data"]["corpus"]["eval_fraction"] > 0


def test_charlm_dag_blesses_and_reports_bits_per_character(charlm_run):
    recipe, summary = charlm_run
    outcome = summary["evaluation"]
    assert outcome["blessed"] is True and outcome["metric"] == "perplexity"
    metrics = outcome["metrics"]
    # Bytes: perplexity per byte below the uniform model's (the vocabulary size, 257), and
    # bpc = log2(perplexity).
    assert metrics["perplexity"] < 257
    assert metrics["bits_per_character"] == pytest.approx(math.log2(metrics["perplexity"]),
                                                          rel=1e-6)
    assert metrics["bits_per_character"] == pytest.approx(metrics["nll"] / math.log(2),
                                                          rel=1e-6)
    root = Path(summary["pipeline_root"])
    vocabulary = _artifact(root, "VocabularyGen", "vocabulary")
    assert json.loads((vocabulary / "tokenizer.json").read_text())["kind"] == "byte"
    statistics = json.loads((vocabulary / "byte_counts.json").read_text())
    assert statistics["non_ascii_bytes"] > 0 and statistics["bytes"] > 10_000
    examples = _artifact(root, "PretrainingExampleGen", "pretraining_examples")
    data_config = json.loads((examples / "pretraining_config.json").read_text())
    assert data_config["tokenizer_kind"] == "byte"
    assert data_config["vocabulary_size"] == 257 and data_config["end_of_text_id"] == 256


def test_trained_models_schedule_their_losses_over_their_own_steps(charlm_run):
    """run_fn gave each CharTransformerLM its trainer's step count as `total_steps`."""
    import lmfactory.models  # noqa: F401  (registers the serialised classes)

    _, summary = charlm_run
    root = Path(summary["pipeline_root"])
    for component, steps in (("Pretrainer", PRETRAINING_STEPS),
                             ("FineTuner", FINETUNING_STEPS)):
        model_dir = _artifact(root, component, "model")
        model = keras.saving.load_model(str(model_dir / "keras" / "model.keras"),
                                        compile=False)
        assert isinstance(model, CharTransformerLM)
        assert model.total_steps == steps
        assert model.backbone.vocabulary_size == 257


def test_pushed_model_continues_prompts_byte_by_byte(charlm_run):
    _, summary = charlm_run
    loaded = tf.saved_model.load(summary["pushed_model"])
    prompts = ["First Citizen:", "JULIET: caf\u00e9", ""]
    generated = _texts(loaded.signatures["generate_default"](
        prompt=tf.constant(prompts))["generated_text"])
    assert len(generated) == 3
    for prompt, text in zip(prompts, generated):
        assert text.startswith(prompt)  # invalid bytes after it become U+FFFD, never a crash
    assert any(len(text) > len(prompt) for prompt, text in zip(prompts, generated))
    outputs = loaded.signatures["serving_default"](
        prompt=tf.constant(prompts), max_length=tf.constant(24),
        sampler=tf.constant("greedy"), temperature=tf.constant(1.0), k=tf.constant(5),
        p=tf.constant(0.9))
    greedy = _texts(outputs["generated_text"])
    for prompt, text in zip(prompts, greedy):
        assert text.startswith(prompt)
    # max_length counts bytes, the start token included.
    counts = outputs["num_generated_tokens"].numpy().tolist()
    assert all(1 <= count <= 24 - 1 - len(prompt.encode("utf-8"))
               for prompt, count in zip(prompts, counts))
    again = _texts(loaded.signatures["serving_default"](
        prompt=tf.constant(prompts), max_length=tf.constant(24),
        sampler=tf.constant("greedy"), temperature=tf.constant(1.0), k=tf.constant(5),
        p=tf.constant(0.9))["generated_text"])
    assert again == greedy  # greedy decoding is deterministic
