"""The Transformer (Vaswani et al. 2017): what the paper specifies and the conformance
harness does not check (post-LN vs pre-LN placement, sqrt(d_model) scaling and the
sinusoids, one shared embedding / output matrix, label smoothing, the learning-rate
schedule, the parameter counts of the base and big models), the joint subword vocabulary's
round trip through the translation preprocessor, and the tiny DAG run to a pushed
translator."""

import gzip
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

from dag_helpers import TINY_TRAINING
from lmfactory import models
from lmfactory.components.example_gen import parallel
from lmfactory.components.tasks import translation
from lmfactory.components.trainer.optimization import InverseSqrtDecay, make_optimizer
from lmfactory.components.vocabulary import executor as vocabulary_executor
from lmfactory.models.transformer import TransformerBackbone, TransformerSeq2SeqLM
from lmfactory.models.transformer.transformer_presets import PAPER_VOCABULARY_SIZE
from lmfactory.models.transformer.transformer_seq2seq_lm import label_smoothed_nll
from lmfactory.pipelines import runners
from lmfactory.recipe import load_recipe

TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=16)


def _inputs(batch=2, source=5, target=4, vocabulary=50, seed=0):
    rng = np.random.default_rng(seed)
    return {"encoder_token_ids": rng.integers(1, vocabulary, (batch, source)).astype("int32"),
            "encoder_padding_mask": np.ones((batch, source), "int32"),
            "decoder_token_ids": rng.integers(1, vocabulary, (batch, target)).astype("int32"),
            "decoder_padding_mask": np.ones((batch, target), "int32")}


def _is_normalized(x, atol=1e-3):
    """Every position of ``x`` [..., d] has mean 0 and variance 1 over d (a fresh LayerNorm:
    gamma 1, beta 0)."""
    x = np.asarray(x)
    return np.allclose(x.mean(-1), 0.0, atol=atol) and np.allclose(x.var(-1), 1.0, atol=1e-2)


def test_post_ln_is_the_default_and_pre_ln_is_switchable():
    keras.utils.set_random_seed(0)
    post = TransformerBackbone(**TINY)
    pre = TransformerBackbone(**TINY, normalize_first=True)
    x = tf.random.normal((2, 5, 8), stddev=3.0) + 2.0
    # §3.1 post-LN: LayerNorm(x + Sublayer(x)), so every block's output is normalised.
    assert all(not block.normalize_first for block in post.encoder_layers + post.decoder_layers)
    assert post.encoder_final_layer_norm is None and post.decoder_final_layer_norm is None
    assert _is_normalized(post.encoder_layers[0](x, training=False))
    assert _is_normalized(post.decoder_layers[0](x, x, training=False))
    # Pre-LN: x + Sublayer(LayerNorm(x)) leaves the residual stream un-normalised, and a
    # final LayerNorm closes each stack.
    assert all(block.normalize_first for block in pre.encoder_layers + pre.decoder_layers)
    assert not _is_normalized(pre.encoder_layers[0](x, training=False))
    outputs = pre(_inputs(), training=False)
    assert _is_normalized(outputs["encoder_sequence_output"])
    assert _is_normalized(outputs["decoder_sequence_output"])
    assert pre.count_params() == post.count_params() + 2 * 2 * 8


def test_embeddings_are_scaled_by_sqrt_d_and_get_the_sinusoids():
    keras.utils.set_random_seed(0)
    backbone = TransformerBackbone(**TINY)
    ids = np.array([[3, 7, 11]], "int32")
    matrix = backbone.token_embedding.embeddings.numpy()
    d = 8
    position = np.arange(3)[:, None]
    i = np.arange(d // 2)[None, :]
    angles = position / 10000 ** (2 * i / d)
    sinusoids = np.zeros((3, d))
    sinusoids[:, 0::2], sinusoids[:, 1::2] = np.sin(angles), np.cos(angles)  # §3.5
    expected = matrix[ids[0]] * math.sqrt(d) + sinusoids  # §3.4
    np.testing.assert_allclose(backbone.embed(ids).numpy()[0], expected, atol=1e-5)
    # Positions continue from start_index in cached decoding.
    np.testing.assert_allclose(backbone.embed(ids[:, 2:], start_index=2).numpy()[0, 0],
                               expected[2], atol=1e-5)
    # Initialised so that the scaled embeddings have about unit variance.
    assert abs(np.std(matrix) * math.sqrt(d) - 1.0) < 0.2


def test_source_target_and_output_share_one_matrix():
    keras.utils.set_random_seed(0)
    backbone = TransformerBackbone(**TINY)
    model = TransformerSeq2SeqLM(backbone)
    vocabulary_shaped = [w for w in model.weights if 50 in tuple(w.shape)]
    assert len(vocabulary_shaped) == 1 and tuple(vocabulary_shaped[0].shape) == (50, 8)
    inputs = _inputs()
    hidden = backbone(inputs, training=False)["decoder_sequence_output"].numpy()
    logits = model(inputs, training=False).numpy()
    np.testing.assert_allclose(logits, hidden @ vocabulary_shaped[0].numpy().T, atol=1e-5)
    # The encoder reads the same matrix: changing one row changes the source side too.
    before = backbone(inputs, training=False)["encoder_sequence_output"].numpy()
    matrix = backbone.token_embedding.embeddings
    row = np.arange(50) == inputs["encoder_token_ids"][0, 0]
    matrix.assign(matrix.numpy() + row[:, None].astype("float32"))
    after = backbone(inputs, training=False)["encoder_sequence_output"].numpy()
    assert not np.allclose(before[0], after[0])


def test_label_smoothing_on_a_hand_example():
    # p = softmax([0, ln 2, 0]) = (1/4, 1/2, 1/4); the reference is token 1.
    logits = np.log(np.array([[[1.0, 2.0, 1.0]]], "float32"))
    labels = np.array([[1]], "int32")
    nll_expected = math.log(2.0)
    uniform = (math.log(4.0) + math.log(2.0) + math.log(4.0)) / 3  # -mean_k log p_k
    smoothed, nll = label_smoothed_nll(labels, logits, 0.1)
    assert float(nll[0, 0]) == pytest.approx(nll_expected, abs=1e-6)
    assert float(smoothed[0, 0]) == pytest.approx(0.9 * nll_expected + 0.1 * uniform,
                                                  abs=1e-6)  # = 0.73936
    assert float(smoothed[0, 0]) == pytest.approx(0.739356, abs=1e-5)
    # The head's loss is smoothed (0.1 by default); its nll metric stays the plain NLL.
    keras.utils.set_random_seed(0)
    model = TransformerSeq2SeqLM(TransformerBackbone(**dict(TINY, vocabulary_size=3)))
    assert model.label_smoothing == 0.1
    loss = model.compute_loss(y=np.array([[1, 1]], "int32"),
                              y_pred=np.concatenate([logits, logits], axis=1),
                              sample_weight=np.array([[1.0, 0.0]], "float32"))
    assert float(loss) == pytest.approx(0.739356, abs=1e-5)
    assert float(model.nll_tracker.result()) == pytest.approx(nll_expected, abs=1e-6)
    with pytest.raises(ValueError, match="label_smoothing"):
        TransformerSeq2SeqLM(model.backbone, label_smoothing=1.0)


def test_the_papers_learning_rate_schedule():
    schedule = InverseSqrtDecay.from_model_dim(512, 4000)
    # §5.3 at step 4000 (= warmup): 512^-0.5 * 4000^-0.5.
    assert float(schedule(4000)) == pytest.approx(6.9877e-4, rel=1e-4)
    assert float(schedule(1000)) == pytest.approx(512 ** -0.5 * 1000 * 4000 ** -1.5, rel=1e-5)
    assert float(schedule(16000)) == pytest.approx(512 ** -0.5 * 16000 ** -0.5, rel=1e-5)
    assert float(schedule(0)) == pytest.approx(float(schedule(1)))  # steps count from 1
    clone = InverseSqrtDecay.from_config(schedule.get_config())
    assert float(clone(2500)) == pytest.approx(float(schedule(2500)))
    # The trainer's "inverse_sqrt" decay: the recipe's learning rate is the peak, after
    # warmup_fraction of the steps; Adam's beta2 / eps as the recipe says.
    optimizer = make_optimizer(1e-3, 1000, warmup_fraction=0.1, weight_decay=0.0,
                               clip_norm=0.0, beta_2=0.98, epsilon=1e-9,
                               decay="inverse_sqrt")
    rate = optimizer._learning_rate
    assert isinstance(rate, InverseSqrtDecay) and rate.warmup_steps == 100
    assert float(rate(100)) == pytest.approx(1e-3, rel=1e-5)
    assert float(rate(400)) == pytest.approx(0.5e-3, rel=1e-5)
    assert optimizer.beta_2 == 0.98 and optimizer.epsilon == 1e-9
    with pytest.raises(ValueError, match="warmup_steps"):
        InverseSqrtDecay(1.0, 0)
    recipe = load_recipe("transformer_multi30k")["finetuning"]
    assert recipe["learning_rate_decay"] == "inverse_sqrt" and recipe["adam_beta_2"] == 0.98


def _count(preset, **overrides):
    config = dict(models.get("transformer").presets[preset], **overrides)
    return TransformerBackbone(**config).count_params()


@pytest.mark.parametrize("preset,paper", [("base", 65e6), ("big", 213e6)])
def test_parameter_counts_of_the_papers_models(preset, paper):
    """Table 3: base 65M, big 213M, with the shared ~37k-token vocabulary (§5.1). The count
    is affine in the vocabulary size and in N, so it is measured on 1- and 2-layer
    backbones with a small vocabulary and extrapolated."""
    config = models.get("transformer").presets[preset]
    assert config["vocabulary_size"] == PAPER_VOCABULARY_SIZE == 37000
    assert config["num_layers"] == 6
    one, two = _count(preset, num_layers=1, vocabulary_size=8), \
        _count(preset, num_layers=2, vocabulary_size=8)
    d, ff = config["hidden_dim"], config["intermediate_dim"]
    total = one + 5 * (two - one) + (PAPER_VOCABULARY_SIZE - 8) * d
    attention, norm = 4 * d * d + 4 * d, 2 * d
    feedforward = 2 * d * ff + ff + d
    assert two - one == (attention + feedforward + 2 * norm) \
        + (2 * attention + feedforward + 3 * norm)  # one encoder + one decoder layer
    assert total == {"base": 63_082_496, "big": 214_245_376}[preset]
    assert abs(total - paper) / paper < 0.035


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="divisible"):
        TransformerBackbone(**dict(TINY, num_heads=3))
    with pytest.raises(ValueError, match="normalize_first"):
        TransformerBackbone(**TINY, normalize_first="yes")
    with pytest.raises(ValueError, match="num_layers"):
        TransformerBackbone(**dict(TINY, num_layers=0))
    with pytest.raises(ValueError, match="source sentence"):
        TransformerBackbone(**TINY).initial_state(1, 4)


def test_beam_search_with_the_length_penalty():
    keras.utils.set_random_seed(0)
    model = TransformerSeq2SeqLM(TransformerBackbone(**TINY))
    inputs = _inputs()
    greedy = model.translate_ids(inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                                 1, 2, max_length=6)["token_ids"].numpy()
    beam = model.translate_ids(inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                               1, 2, max_length=6, num_beams=4, alpha=0.6)["token_ids"].numpy()
    assert greedy.shape == beam.shape == (2, 6) and (beam[:, 0] == 1).all()
    assert model._beam_sampler(4, 0.6).alpha == 0.6


def test_joint_subword_vocabulary_round_trips_german(tmp_path):
    """VocabularyGen's sentencepiece learner on both languages; the translation
    preprocessor encodes German targets and detokenises them back to the raw text."""
    english = ["A man rides a bike.", "Two dogs play outside.", "A girl is reading a book."]
    german = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen draußen.",
              "Ein Mädchen liest ein Buch (über Bäume)."]
    config = vocabulary_executor.VocabularyConfig(
        kind="sentencepiece", vocab_size=50, min_frequency=1, lowercase=False,
        strip_accents=False, special_tokens=models.get("transformer").special_tokens)
    lines = [parallel.split_punctuation(s) for s in english + german] * 5
    counts = vocabulary_executor.count_words(lines, config)
    vocabulary_executor.learn_and_write(counts, str(tmp_path), config, "test")
    preprocessor = translation.preprocessor_for(str(tmp_path), sequence_length=40)
    split = [parallel.split_punctuation(s) for s in german]
    _, targets, weights = preprocessor.training_inputs(tf.constant(split), tf.constant(split))
    ids = np.concatenate([np.full((3, 1), preprocessor.start_token_id), targets.numpy()], 1)
    text = [t.decode("utf-8") for t in preprocessor.detokenize(tf.constant(ids)).numpy()]
    assert text == german
    assert all(len(split[i].split()) < weights.numpy()[i].sum() for i in range(3))  # subwords


def _write_gz(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def _multi30k_slice(shared_data, tmp_path, split, rows, name):
    paths = {}
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"{split}.{language}.gz", "rt",
                       encoding="utf-8") as f:
            lines = [next(f).rstrip("\n") for _ in range(rows)]
        paths[language] = _write_gz(tmp_path / f"{name}.{language}.gz", lines)
    return paths["en"]


def test_transformer_trains_from_scratch_and_pushes_a_translator(tmp_path, shared_data):
    train = _multi30k_slice(shared_data, tmp_path, "train", 300, "train")
    test = _multi30k_slice(shared_data, tmp_path, "test_2016_flickr", 20, "test")
    overrides = [
        f"data.corpus.path={train}", f"data.task.splits.train={train}",
        f"data.task.splits.eval={test}", "tokenizer.vocab_size=300",
        "finetuning.sequence_length=12", "finetuning.task_args={num_beams: 2, alpha: 0.6}",
        "overrides={num_layers: 1, num_heads: 2, hidden_dim: 16, intermediate_dim: 32, "
        "max_sequence_length: 16}",
        *[t for t in TINY_TRAINING if t.startswith(("finetuning.", "runtime."))]]
    recipe = load_recipe("transformer_multi30k", overrides)
    summary = runners.run_local(recipe, str(tmp_path / "runs"))
    metrics = summary["evaluation"]["metrics"]
    assert metrics["sentences"] == 20 and 0.0 <= metrics["bleu"] <= 100.0
    serve = tf.saved_model.load(summary["pushed_model"]).signatures["serving_default"]
    english = ["A man rides a bike.", "Two dogs play (outside)!", "",
               " ".join(["a big dog"] * 40)]
    translations = serve(text=tf.constant(english))["translation"].numpy()
    assert translations.shape == (4,) and all(isinstance(t, bytes) for t in translations)
    for text in translations:
        text.decode("utf-8")  # whole characters: pieces joined back into words
        assert "\u2581" not in text.decode("utf-8") and b"</s>" not in text


def test_pre_ln_cached_decoding_equals_rerunning_the_prefix():
    """The conformance harness checks the paper's post-LN model; the pre-LN variant's
    final LayerNorm must also be applied on the cached path."""
    keras.utils.set_random_seed(1)
    model = TransformerSeq2SeqLM(TransformerBackbone(**TINY, normalize_first=True))
    source = _inputs(seed=3)
    context = {key: source[key] for key in ("encoder_token_ids", "encoder_padding_mask")}
    cached = model.generate_ids(np.array([[1], [1]], "int32"), max_length=6,
                                state_context=context)["token_ids"].numpy()
    ids = np.array([[1], [1]], "int32")
    while ids.shape[1] < 6:
        logits = model(dict(context, decoder_token_ids=ids,
                            decoder_padding_mask=np.ones_like(ids)), training=False)
        ids = np.concatenate([ids, logits.numpy()[:, -1].argmax(-1)[:, None]], 1)
    np.testing.assert_array_equal(cached, ids.astype("int32"))
