"""What is special to ERNIE (Zhang et al. 2019) beyond the conformance harness: the
registry record and the paper's sizes, the aggregator's fusion only at tokens aligned to an
entity (§3.3 Eq. 4 / 5), BERT initialisation (§4), the frozen TransE table (§3.1), the dEA
loss over the batch's entities and the §3.4 corruption rates measured on generated records,
and the entity alignment (first token of a mention) in Beam and in the serving graph."""

import random

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import ernie_dea, features, linked_documents
from lmfactory.components.pretraining_data.masking import BertVocabulary
from lmfactory.models.bert import BertBackbone
from lmfactory.models.ernie import ErnieAggregator, ErnieBackbone, ErniePretrainer, from_bert
from lmfactory.models.ernie.ernie_converters import knowledge_init
from lmfactory.models.ernie.ernie_preprocessor import ErniePreprocessor, align_entities
from lmfactory.models.ernie.ernie_pretrainer import dea_loss
from lmfactory.models.knowledge import EntityLinkingLayer
from lmfactory.models.tokenizers.wordpiece import BertWordPieceTokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "film", "was", "shot", "in", "new", "york", "and", "paris", ",", ".", "a",
         "city", "of", "france", "##s", "lobster", "europe", "is", "big"]
VOCAB = SPECIALS + WORDS
TINY = dict(vocabulary_size=len(VOCAB), num_heads=2, hidden_dim=16, intermediate_dim=32,
            entity_vocabulary_size=10, entity_dim=8, entity_num_heads=2,
            max_sequence_length=32)


def test_registry_record_and_paper_sizes():
    arch = models.get("ernie")
    assert arch.family == "encoder" and arch.objectives == ("ernie_dea",)
    assert arch.links_entities and arch.knowledge_init is knowledge_init
    base = arch.presets["base"]  # §4 Parameter Settings
    assert (base["num_layers"], base["num_knowledge_layers"], base["hidden_dim"],
            base["num_heads"], base["entity_dim"], base["entity_num_heads"]) == \
        (6, 6, 768, 12, 100, 4)


def test_kinds_without_linked_entities_are_refused_at_the_recipe():
    """ERNIE's inputs carry the entities linked in its examples (§3.3): the default packing
    of tagging, span QA and multiple choice gives none, so those kinds are refused when the
    recipe loads, in one line naming the field, not by a missing input deep in a stage."""
    from lmfactory.recipe import RecipeError, load_recipe

    arch = models.get("ernie")
    assert arch.has_head("classification")  # also relation classification's and typing's
    for kind in ("tagging", "span_qa", "multiple_choice"):
        assert not arch.has_head(kind)
        with pytest.raises(ValueError, match="linked knowledge-graph entities"):
            arch.head(kind)
    with pytest.raises(RecipeError, match="packs no linked entities") as error:
        load_recipe("ernie_fb15k237_sst2", ["finetuning.task=tagging",
                                            "data.task.format=conll"])
    assert error.value.field == "finetuning.task"


def _inputs(batch=2, seq=9, seed=0):
    rng = np.random.default_rng(seed)
    return {"token_ids": rng.integers(5, len(VOCAB), (batch, seq)).astype("int32"),
            "padding_mask": np.ones((batch, seq), "int32"),
            "segment_ids": np.zeros((batch, seq), "int32"),
            "entity_ids": rng.integers(0, 10, (batch, seq)).astype("int32"),
            "entity_mask": (np.arange(seq)[None] % 3 == 1).repeat(batch, 0).astype("int32")}


def test_fusion_only_where_an_entity_is_aligned():
    """Eq. 4 vs Eq. 5: an entity vector at a token without alignment changes nothing; at an
    aligned token it changes that token's fused output."""
    keras.utils.set_random_seed(0)
    layer = ErnieAggregator(intermediate_dim=32, num_heads=2, entity_num_heads=2,
                            dropout=0.0, layer_norm_epsilon=1e-12)
    rng = np.random.default_rng(1)
    tokens = rng.normal(size=(1, 6, 16)).astype("float32")
    entities = rng.normal(size=(1, 6, 8)).astype("float32")
    mask = np.array([[0, 1, 0, 0, 1, 0]], "int32")
    base_tokens, base_entities = (np.asarray(v) for v in layer(tokens, entities, mask))
    unaligned = entities.copy()
    unaligned[0, 3] += 5.0
    t, e = (np.asarray(v) for v in layer(tokens, unaligned, mask))
    np.testing.assert_allclose(t, base_tokens, atol=1e-6)
    np.testing.assert_allclose(e, base_entities, atol=1e-6)
    assert np.all(base_entities[0, mask[0] == 0] == 0)  # no entity output without one
    aligned = entities.copy()
    aligned[0, 4] += 5.0
    t, _ = (np.asarray(v) for v in layer(tokens, aligned, mask))
    changed = np.abs(t - base_tokens).max(axis=-1)[0]
    # The aligned tokens change (entity 1 attends to entity 4 in the entity MH-ATT); the
    # tokens without an entity do not (their fusion is Eq. 5, after the token attention).
    assert changed[4] > 1e-3 and changed[1] > 1e-3
    assert np.all(changed[[0, 2, 3, 5]] < 1e-6)


def test_from_bert_copies_bert_and_equals_it_without_entities():
    """§4: ERNIE starts from BERT. With no entity aligned and the released code's linear
    aggregator outputs, ERNIE initialised from a 4-block BERT is that BERT."""
    keras.utils.set_random_seed(1)
    bert = BertBackbone(vocabulary_size=len(VOCAB), num_layers=4, num_heads=2, hidden_dim=16,
                        intermediate_dim=32, dropout=0.0, max_sequence_length=32)
    ernie = from_bert(bert, num_layers=2, entity_vocabulary_size=10, entity_dim=8,
                      entity_num_heads=2, knowledge_output_activation=None, dropout=0.0)
    assert len(ernie.transformer_layers) == 2 and len(ernie.knowledge_layers) == 2
    x = _inputs()
    expected = bert({k: x[k] for k in ("token_ids", "padding_mask", "segment_ids")})
    got = ernie(dict(x, entity_mask=np.zeros_like(x["entity_mask"])))
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(got[key], expected[key], atol=2e-5)
    with_entities = ernie(x)["sequence_output"]
    assert np.abs(np.asarray(with_entities) - np.asarray(expected["sequence_output"])).max() \
        > 1e-3
    with pytest.raises(ValueError, match="at least 5 blocks"):
        from_bert(bert, num_layers=2, num_knowledge_layers=3)


def test_entity_table_is_frozen_transe():
    keras.utils.set_random_seed(2)
    backbone = ErnieBackbone(num_layers=1, num_knowledge_layers=1, **TINY)
    table = np.random.default_rng(0).normal(size=(10, 8)).astype("float32")
    pretrainer = ErniePretrainer(backbone)
    knowledge_init(pretrainer, table, np.zeros((3, 8), "float32"))
    np.testing.assert_array_equal(backbone.entity_table.numpy(), table)
    assert not any(w is backbone.entity_table for w in pretrainer.trainable_weights)
    with pytest.raises(ValueError, match=r"entity table is \(10, 8\).*\(11, 8\)"):
        knowledge_init(backbone, np.zeros((11, 8)))
    x = _inputs()
    x["mask_positions"] = np.array([[1, 2], [3, 4]], "int32")
    y = {"mlm": np.array([[5, 6], [7, 8]], "int32"), "nsp": np.array([0, 1], "int32"),
         "dea": x["entity_ids"]}
    weights = {"mlm": np.ones((2, 2), "float32"), "dea": x["entity_mask"].astype("float32")}
    before = backbone.knowledge_layers[0]._entity_fusion_dense.kernel.numpy().copy()
    pretrainer.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    pretrainer.fit(tf.data.Dataset.from_tensors((x, y, weights)).repeat(2), verbose=0)
    np.testing.assert_array_equal(backbone.entity_table.numpy(), table)
    assert np.abs(backbone.knowledge_layers[0]._entity_fusion_dense.kernel.numpy()
                  - before).max() > 0


def test_dea_loss_over_the_batch_entities():
    """Eq. 7: softmax over the distinct entities aligned in the batch, numpy reference."""
    rng = np.random.default_rng(3)
    table = rng.normal(size=(12, 4)).astype("float32")
    projected = rng.normal(size=(2, 5, 4)).astype("float32")
    labels = np.array([[3, 0, 7, 3, 0], [9, 0, 0, 7, 0]], "int32")
    weights = np.array([[1, 0, 1, 1, 0], [1, 0, 0, 1, 0]], "float32")
    nll, count, _ = dea_loss(projected, table, labels, weights)
    candidates = [3, 7, 9]
    expected = []
    for b, t in zip(*np.nonzero(weights)):
        logits = table[candidates] @ projected[b, t]
        logits -= logits.max()
        expected.append(-(logits[candidates.index(labels[b, t])]
                          - np.log(np.exp(logits).sum())))
    assert float(count) == 5
    assert float(nll) == pytest.approx(float(np.sum(expected)), rel=1e-5)
    # A batch without any aligned entity contributes nothing (and does not fail).
    nll, count, correct = dea_loss(projected, table, labels, np.zeros_like(weights))
    assert (float(nll), float(count), float(correct)) == (0.0, 0.0, 0.0)


def _vocabulary():
    return BertVocabulary.from_tokens(VOCAB, dict(zip(("pad", "unk", "cls", "sep", "mask"),
                                                      SPECIALS)), objective="ernie_dea")


def test_dea_corruption_rates_on_generated_records(tmp_path):
    """§3.4: of the aligned token-entity pairs 5% replaced by another entity, 15% masked
    (entity removed from the input), the rest kept; every pair stays a target."""
    rng = random.Random(0)
    documents = []
    for _ in range(60):
        sentences = []
        for _ in range(6):
            tokens = [rng.randrange(5, len(VOCAB)) for _ in range(12)]
            tags = [rng.randrange(1, 40) if rng.random() < 0.5 else 0 for _ in range(12)]
            sentences.append((tokens, tags))
        documents.append(sentences)
    config = features.resolve_config({"objective": "ernie_dea", "max_seq_length": 32,
                                      "max_predictions_per_seq": 5, "dupe_factor": 2})
    records, stats = ernie_dea.shard_examples(documents, _vocabulary(), config, (7, "train", 0))
    spec = ernie_dea.feature_spec(config)
    parsed = tf.io.parse_example(tf.constant(records), spec)
    ids, mask = parsed["entity_ids"].numpy(), parsed["entity_mask"].numpy()
    labels, weights = parsed["entity_labels"].numpy(), parsed["entity_label_weights"].numpy()
    aligned = weights > 0
    total = aligned.sum()
    replaced = (aligned & (mask == 1) & (ids != labels)).sum() / total
    masked = (aligned & (mask == 0)).sum() / total
    assert total == stats["aligned_entities"] > 3000
    sigma = lambda p: 4 * np.sqrt(p * (1 - p) / total)  # noqa: E731
    assert abs(replaced - 0.05) < sigma(0.05), replaced
    assert abs(masked - 0.15) < sigma(0.15), masked
    assert not np.any(mask[~aligned])  # no entity input without an alignment
    # The entity stays on its token: a kept alignment's label is its token's entity, which
    # was a tag of the input documents.
    assert set(labels[aligned].tolist()) <= set(range(39))
    # The converter hands them to the pretrainer.
    x, y, sample_weight = ernie_dea.converter(config)(parsed)
    np.testing.assert_array_equal(y["dea"], labels)
    np.testing.assert_array_equal(sample_weight["dea"], weights)
    np.testing.assert_array_equal(x["entity_mask"], mask)


def test_alignment_to_first_wordpiece_in_beam_and_serving():
    """The Beam builder (linked_documents) and the serving graph (align_entities) put each
    entity on the first WordPiece of its mention, and agree."""
    tokenizer = BertWordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    labels = [["New York"], ["Paris"], ["lobsters"]]
    text = "The film was shot in New York and Paris.\nA lobsters city ,   Paris"
    linker = EntityLinkingLayer(labels, max_ngram=2, lowercase=True)
    starts, ends, ids = (v[0].numpy().tolist() for v in linker(tf.constant([text])))
    mentions = list(zip(starts, ends, ids))
    sentences, counts = linked_documents.sentence_pieces(text.encode(), mentions)
    pieces = [p for ps, _ in sentences for p in ps]
    flat = [list(tokenizer(tf.constant([p]))[0]) for p in pieces]
    beam, _ = linked_documents.assemble(sentences, flat)
    assert sum(counts.values()) == 0
    served = []
    byte_linker = EntityLinkingLayer(labels, max_ngram=2, lowercase=True, offset_unit="BYTE")
    for line in text.split("\n"):
        tokens, tags = align_entities(tokenizer, tf.constant([line.strip()]),
                                      *byte_linker(tf.constant([line.strip()])))
        served.append((tokens[0].numpy().tolist(), tags[0].numpy().tolist()))
    beam = [([int(t) for t in tokens], [int(g) for g in tags]) for tokens, tags in beam]
    assert beam == served
    first_tokens, first_tags = served[0]
    assert [VOCAB[t] for t, g in zip(first_tokens, first_tags) if g] == ["new", "paris"]
    assert [g - 1 for g in first_tags if g] == [0, 1]
    # "lobsters" -> lobster ##s: the entity on "lobster", the first piece.
    assert [VOCAB[t] for t, g in zip(*served[1]) if g] == ["lobster", "paris"]
    # A mention across a line break is counted, not aligned.
    _, counts = linked_documents.sentence_pieces(b"new\nyork", [(0, 8, 0)])
    assert counts["mentions_across_lines"] == 1


def test_preprocessor_keeps_entities_on_their_tokens_after_truncation():
    tokenizer = BertWordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    linker = EntityLinkingLayer([["paris"], ["france"]], offset_unit="BYTE")
    pre = ErniePreprocessor(tokenizer, linker, sequence_length=11)
    packed = pre((tf.constant(["paris is big", "the city"]),
                  tf.constant(["a city of france and paris", "paris"])))
    tokens = packed["token_ids"].numpy()
    mask, ids = packed["entity_mask"].numpy(), packed["entity_ids"].numpy()
    for row in range(2):
        for position in np.nonzero(mask[row])[0]:
            assert VOCAB[tokens[row, position]] == ["paris", "france"][ids[row, position]]
    # Row 0 keeps 3 + 5 tokens (round robin): "paris" of A and "france" of B; B's "paris"
    # is truncated away with its entity.
    assert [VOCAB[t] for t in tokens[0][mask[0] == 1]] == ["paris", "france"]
    assert mask[1].sum() == 1
