"""Few-shot evaluation (Brown et al. 2020 §2, §2.4) and GPT-2 zero-shot prompting
(Radford et al. 2019 §3): readers, prompts, scoring arithmetic, accuracy vs k, the CLI."""

import collections
import json
import os
import shutil

import keras
import numpy as np
import pytest
from keras import ops

from lmfactory import cli, models
from lmfactory.components.evaluator import few_shot as fs
from lmfactory.components.trainer.export import write_model_artifact
from lmfactory.components.vocabulary import bpe
from lmfactory.models.charlm import CharTransformerLM
from lmfactory.models.charlm.charlm_vocabulary import byte_tokenizer
from lmfactory.models.gpt2 import GPT2CausalLM
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config

SST2_HEADER = "sentence\tlabel\n"


def _csqa_line(stem, texts, answer="A", **extra):
    record = {"id": stem[:8], "question": {"stem": stem, "choices": [
        {"label": "ABCDE"[i], "text": t} for i, t in enumerate(texts)]}, **extra}
    if answer is not None:
        record["answerKey"] = answer
    return json.dumps(record) + "\n"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory, shared_data):
    """A small byte-level BPE vocabulary learned on SST-2 sentences, in which the label words
    " positive" / " negative" are single tokens."""
    path = tmp_path_factory.mktemp("vocab")
    with open(shared_data / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as f:
        lines = [line.split("\t")[0] for _, line in zip(range(1500), f)][1:]
    counts = collections.Counter(bpe.pretokenize_lines(
        lines + ["Review: Sentiment: positive negative Question: Answer:"] * 300))
    tokens, merges = bpe.learn_merges(counts.items(), 450)
    bpe.write_files(str(path), tokens, merges)
    write_tokenizer_config(str(path), bpe.tokenizer_config())
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
    return load_tokenizer(vocab_dir)


@pytest.fixture(scope="module")
def gpt2(tokenizer):
    keras.utils.set_random_seed(3)
    backbone = models.build("gpt2", "tiny", vocabulary_size=tokenizer.vocabulary_size(),
                            num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64,
                            max_sequence_length=96)
    return GPT2CausalLM(backbone)


@pytest.fixture(scope="module")
def end_id(tokenizer):
    return int(tokenizer.token_to_id(bpe.END_OF_TEXT))


@pytest.fixture(scope="module")
def small_sst2(tmp_path_factory):
    """A small SST-2 train file and two dev files (all positive; mixed)."""
    root = tmp_path_factory.mktemp("sst2")
    train = [("a gorgeous , witty film", 1), ("dull and lifeless", 0),
             ("a triumph of acting", 1), ("an utter mess", 0), ("warm and funny", 1),
             ("painfully slow", 0), ("smart and moving", 1), ("a tedious bore", 0)]
    (root / "train.tsv").write_text(SST2_HEADER + "".join(f"{s}\t{y}\n" for s, y in train))
    (root / "positive.tsv").write_text(
        SST2_HEADER + "".join(f"great movie number {i}\t1\n" for i in range(6)))
    (root / "mixed.tsv").write_text(
        SST2_HEADER + "".join(f"movie number {i}\t{int(i < 3)}\n" for i in range(8)))
    return root


# --------------------------------------------------------------------------- readers


def test_sst2_reader_makes_label_word_examples(small_sst2):
    split = fs.read_sst2(str(small_sst2 / "train.tsv"))
    assert len(split) == 8 and split.skipped == []
    first = split[0]
    assert first == fs.Example("Review: a gorgeous , witty film\nSentiment:",
                               (" negative", " positive"), 1)
    assert [e.gold for e in split] == [1, 0, 1, 0, 1, 0, 1, 0]


def test_sst2_reader_names_file_and_line_of_malformed_lines(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text(SST2_HEADER + "fine film\t1\n\nno label here\nodd label\t7\n\t0\nok\t0\n")
    with pytest.raises(fs.FewShotError, match=rf"{path}:4: expected 2 tab-separated"):
        fs.read_sst2(str(path))
    split = fs.read_sst2(str(path), skip_malformed=True)
    assert [e.context for e in split] == ["Review: fine film\nSentiment:",
                                          "Review: ok\nSentiment:"]
    assert len(split.skipped) == 3
    assert split.skipped[1].endswith(":5: label must be 0 or 1, got '7'")
    assert split.skipped[2].endswith(":6: empty sentence")
    (tmp_path / "header.tsv").write_text("text\tlabel\nx\t1\n")
    with pytest.raises(fs.FewShotError, match="header must name the columns"):
        fs.read_sst2(str(tmp_path / "header.tsv"))


def test_commonsenseqa_reader_and_its_errors(tmp_path):
    good = _csqa_line("Where do you keep milk?", ["fridge", "oven", "roof"], "A")
    path = tmp_path / "qa.jsonl"
    path.write_text(good + _csqa_line("What flies?", ["rock", "bird"], "B"))
    split = fs.read_commonsenseqa(str(path))
    assert split[0] == fs.Example("Question: Where do you keep milk?\nAnswer:",
                                  (" fridge", " oven", " roof"), 0)
    assert split[1].gold == 1

    broken = tmp_path / "broken.jsonl"
    broken.write_text(good + '{"question": {"stem": "cut off\n'
                      + _csqa_line("Which?", ["a", "b"], answer=None)
                      + _csqa_line("Which one?", ["a", "b"], answer="E") + good)
    with pytest.raises(fs.FewShotError, match=rf"{broken}:2: invalid JSON"):
        fs.read_commonsenseqa(str(broken))
    split = fs.read_commonsenseqa(str(broken), skip_malformed=True)
    assert len(split) == 2
    assert [s.split(":", 2)[1:] for s in split.skipped] == [
        ["2", split.skipped[0].split(":", 2)[2]], ["3", " missing 'answerKey'"],
        ["4", " unknown answer label: answerKey 'E' is not one of the choice labels ['A', 'B']"]]
    assert "invalid JSON" in split.skipped[0]
    missing = tmp_path / "missing.jsonl"
    missing.write_text(_csqa_line("Which?", ["a", "b"], answer=None))
    with pytest.raises(fs.FewShotError, match=rf"{missing} has no answers"):
        fs.read_commonsenseqa(str(missing))


def test_readers_on_the_real_dev_files(shared_data):
    sst2 = fs.read_sst2(str(shared_data / "glue" / "SST-2" / "dev.tsv"))
    assert len(sst2) == 872 and sst2.skipped == []
    assert collections.Counter(e.gold for e in sst2) == {1: 444, 0: 428}
    qa = fs.read_commonsenseqa(str(shared_data / "commonsenseqa" / "dev_rand_split.jsonl"))
    assert len(qa) == 1221 and qa.skipped == []
    assert all(len(e.completions) == 5 for e in qa)
    assert qa[0].completions[qa[0].gold] == " bank"
    # The test split has no answers: the reader refuses the whole file.
    with pytest.raises(fs.FewShotError, match=r"test_rand_split_no_answers.jsonl has no answers"):
        fs.read_commonsenseqa(str(shared_data / "commonsenseqa"
                                  / "test_rand_split_no_answers.jsonl"))


# --------------------------------------------------------------------------- prompts


def test_demonstrations_are_seeded_and_never_the_query(small_sst2):
    train = fs.read_sst2(str(small_sst2 / "train.tsv")).examples
    query = train[2]
    for seed in range(20):
        demos = fs.sample_demonstrations(train, query, 7, np.random.default_rng(seed))
        assert len(demos) == 7 and len(set(demos)) == 7 and query not in demos
    draw = lambda seed: fs.sample_demonstrations(  # noqa: E731
        train, query, 3, np.random.default_rng(seed))
    # One seed gives one sequence of draws: k=3 is the start of k=7 (the rows for every k
    # share a draw), which also makes a draw reproducible.
    assert draw(5) == fs.sample_demonstrations(train, query, 7, np.random.default_rng(5))[:3]
    assert any(draw(5) != draw(seed) for seed in range(6, 12))
    with pytest.raises(fs.FewShotError, match="fewer than k=8"):
        fs.sample_demonstrations(train, query, 8, np.random.default_rng(0))

    task = fs.TASKS["sst2"]
    prompt = fs.build_prompt(task, query, train[:2])
    assert prompt == (task.description + "\n\n"
                      "Review: a gorgeous , witty film\nSentiment: positive\n\n"
                      "Review: dull and lifeless\nSentiment: negative\n\n"
                      "Review: a triumph of acting\nSentiment:")
    assert fs.build_prompt(task, query, []) == (task.description
                                                + "\n\nReview: a triumph of acting\nSentiment:")


def test_prompts_lose_their_earliest_demonstrations_to_fit(small_sst2, tokenizer):
    task = fs.TASKS["sst2"]
    train = fs.read_sst2(str(small_sst2 / "train.tsv")).examples
    query, demos = train[0], train[1:6]
    length = lambda d: len(fs.tokenize_texts(  # noqa: E731
        tokenizer, [fs.build_prompt(task, query, d)])[0])
    full, without_two = length(demos), length(demos[2:])
    context = 1 + without_two + 2  # start token + prompt + a 2-token completion
    fitted, = fs.fit_prompts(task, [query], [demos], tokenizer, context, [2], [7])
    assert (fitted.demonstrations, fitted.dropped, fitted.cut_tokens) == (3, 2, 0)
    assert fitted.truncated and len(fitted.token_ids) == 1 + without_two <= context - 2
    assert fitted.token_ids[0] == 7
    roomy, = fs.fit_prompts(task, [query], [demos], tokenizer, full + 3, [2], [7])
    assert (roomy.demonstrations, roomy.truncated, len(roomy.token_ids)) == (5, False, full + 1)
    # Not even the bare query fits: its first tokens go.
    bare = length([])
    tight, = fs.fit_prompts(task, [query], [demos], tokenizer, bare, [2], [])
    assert (tight.demonstrations, tight.dropped, tight.cut_tokens) == (0, 5, 2)
    assert tight.token_ids == fs.tokenize_texts(
        tokenizer, [fs.build_prompt(task, query, [])])[0][2:]
    with pytest.raises(fs.FewShotError, match="leaves no room"):
        fs.fit_prompts(task, [query], [demos], tokenizer, 3, [3], [])


# --------------------------------------------------------------------------- scoring


def _brute_force_logprob(task_model, context, completion):
    """sum_i log p(completion_i | prefix), one unpadded forward pass per token, float64."""
    total, prefix = 0.0, list(context)
    for token in completion:
        ids = np.array([prefix], dtype=np.int32)
        logits = np.asarray(task_model({"token_ids": ids, "padding_mask": np.ones_like(ids)},
                                       training=False))[0, -1].astype(np.float64)
        total += logits[token] - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
        prefix.append(token)
    return total


def test_scores_match_a_brute_force_per_token_computation(gpt2, tokenizer, end_id):
    contexts = ["Review: a charming film\nSentiment:", "Question: Where is the cat?\nAnswer:"]
    candidates = [[" positive", " negative", " so-so"], [" under it", " moon", " in a house"]]
    ids = lambda text: fs.tokenize_texts(tokenizer, [text])[0]  # noqa: E731
    brute = [[_brute_force_logprob(gpt2, [end_id] + ids(c), ids(x)) for x in options]
             for c, options in zip(contexts, candidates)]
    answer = [[_brute_force_logprob(gpt2, [end_id] + ids("Answer:"), ids(x)) for x in options]
              for options in candidates]
    counts = [[len(ids(x)) for x in options] for options in candidates]
    assert counts[0][:2] == [1, 1] and counts[0][2] > 2  # padding differs inside a batch
    # batch_size 2: several padded batches of different lengths.
    scorer = fs.CompletionScorer(gpt2, batch_size=2)
    for mode, expected in (("sum", brute),
                           ("mean", np.array(brute) / np.array(counts)),
                           ("unconditional", np.array(brute) - np.array(answer))):
        got = fs.score_candidates(gpt2, tokenizer, contexts, candidates, scoring=mode,
                                  start_token_id=end_id, scorer=scorer)
        np.testing.assert_allclose(np.array(got), expected, atol=2e-5, rtol=0)
    with pytest.raises(fs.FewShotError, match="scoring must be one of"):
        fs.candidate_scores([0.0], [1], "max")
    with pytest.raises(fs.FewShotError, match="give --data-dir"):  # no default data location
        fs.evaluate_few_shot(gpt2, tokenizer, "sst2", ks=(0,))


def test_scoring_works_for_the_character_lm():
    """CharTransformerLM (its own call, byte ids) scores like the GPT-2 task model."""
    keras.utils.set_random_seed(0)
    backbone = models.build("charlm", "tiny", num_layers=2, hidden_dim=32, num_heads=2,
                            intermediate_dim=64, max_sequence_length=48)
    lm = CharTransformerLM(backbone, intermediate_losses=False, multiple_targets=False)
    tokenizer = byte_tokenizer()
    requests = [(list(b"Sentiment:"), list(b" good")), (list(b"Q: 2+2?\nA:"), list(b" 4"))]
    got = fs.completion_logprobs(lm, requests, batch_size=2)
    expected = [_brute_force_logprob(lm, c, x) for c, x in requests]
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=0)
    assert fs.tokenize_texts(tokenizer, ["hé"]) == [[104, 195, 169]]
    with pytest.raises(fs.FewShotError, match="outside the model's vocabulary of 256"):
        fs.completion_logprobs(lm, [([300], [1])])


class FavouringLM(keras.Model):
    """Logits that put ``margin`` on one token id at every position, whatever the input."""

    def __init__(self, vocabulary_size, favoured, margin=30.0, **kwargs):
        super().__init__(**kwargs)
        self.bias = np.zeros(vocabulary_size, dtype="float32")
        self.bias[favoured] = margin

    def call(self, inputs, training=False):
        shape = ops.shape(inputs["token_ids"])
        return ops.broadcast_to(ops.convert_to_tensor(self.bias), (shape[0], shape[1],
                                                                     self.bias.shape[0]))


@pytest.mark.parametrize("scoring", ["mean", "unconditional"])
def test_a_model_favouring_a_label_word_scores_by_that_label(small_sst2, tokenizer, end_id,
                                                             scoring):
    positive, negative = (fs.tokenize_texts(tokenizer, [w])[0] for w in (" positive",
                                                                         " negative"))
    assert len(positive) == len(negative) == 1
    read = lambda name: fs.read_sst2(str(small_sst2 / name)).examples  # noqa: E731
    size = tokenizer.vocabulary_size()
    accuracy = {}
    for word, ids in (("positive", positive), ("negative", negative)):
        for dev in ("positive.tsv", "mixed.tsv"):
            result = fs.evaluate_few_shot(
                FavouringLM(size, ids[0]), tokenizer, "sst2", ks=(0, 2), scoring=scoring,
                train_examples=read("train.tsv"), eval_examples=read(dev),
                context_length=200, start_token_id=end_id, seed=1)
            assert [row.k for row in result.rows] == [0, 2]
            assert [row.mean_demonstrations for row in result.rows] == [0, 2]
            accuracy[word, dev] = {row.accuracy for row in result.rows}
    if scoring == "unconditional":
        # The context does not matter to this model: every candidate's ratio is 1 (ties go
        # to the first candidate, " negative").
        assert accuracy["positive", "positive.tsv"] == {0.0}
        assert accuracy["negative", "mixed.tsv"] == {5 / 8}
        return
    assert accuracy["positive", "positive.tsv"] == {1.0}
    assert accuracy["negative", "positive.tsv"] == {0.0}
    assert accuracy["positive", "mixed.tsv"] == {3 / 8}
    assert accuracy["negative", "mixed.tsv"] == {5 / 8}
    assert result.rows[0].predicted == [8, 0]  # the last run: " negative" favoured, mixed


def test_evaluate_reports_counts_chance_truncation_and_markdown(gpt2, tokenizer, end_id,
                                                                small_sst2):
    read = lambda name: fs.read_sst2(str(small_sst2 / name)).examples  # noqa: E731
    result = fs.evaluate_few_shot(gpt2, tokenizer, "sst2", ks=(0, 2, 6), max_examples=5,
                                  train_examples=read("train.tsv"),
                                  eval_examples=read("mixed.tsv"), start_token_id=end_id,
                                  context_length=60, seed=4)
    assert result.examples == 5 and result.chance == 0.5
    first, _, last = result.rows
    assert (first.truncated, first.mean_demonstrations) == (0, 0.0)
    assert last.truncated == 5 and last.mean_demonstrations < 6  # 60 tokens hold fewer
    assert all(row.correct == round(row.accuracy * 5) for row in result.rows)
    again = fs.evaluate_few_shot(gpt2, tokenizer, "sst2", ks=(0, 2, 6), max_examples=5,
                                 train_examples=read("train.tsv"),
                                 eval_examples=read("mixed.tsv"), start_token_id=end_id,
                                 context_length=60, seed=4)
    assert again.rows == result.rows
    table = fs.format_markdown(result)
    assert "| k | accuracy | correct | examples | truncated prompts |" in table
    assert f"| 6 | {last.accuracy:.4f} | {last.correct} | 5 | 5 |" in table
    assert all(sum(row.predicted) == 5 and len(row.predicted) == 2 for row in result.rows)
    assert "chance 0.5000" in table


# --------------------------------------------------------------------------- generation


def test_zero_shot_generation_samples_from_the_top_two(gpt2, tokenizer, end_id):
    assert fs.tldr_prompt("A long article.\n") == "A long article.\nTL;DR:"
    assert fs.translation_prompt([("a cat", "un chat")], "a dog") == "a cat = un chat\na dog ="
    assert fs.first_sentences("One. Two! Three? Four.") == "One. Two! Three?"
    prompts = [fs.tldr_prompt("the film is good ."), "Sentiment:"]

    def next_logits(ids):
        x = np.array([ids], dtype=np.int32)
        return np.asarray(gpt2({"token_ids": x, "padding_mask": np.ones_like(x)}))[0, -1]

    sampled = fs.zero_shot_generate(gpt2, tokenizer, prompts, max_new_tokens=4, seed=7,
                                    start_token_id=end_id, return_ids=True)
    assert [len(ids) for ids in sampled] == [4, 4]  # no end token given: never stops early
    for prompt, new in zip(prompts, sampled):
        ids = [end_id] + fs.tokenize_texts(tokenizer, [prompt])[0]
        for step, token in enumerate(new):  # top-k, k = 2 (GPT-2 §3.6)
            assert token in np.argsort(next_logits(ids + new[:step]))[-2:]
    # Greedy decoding equals the argmax continuation computed by hand, token by token.
    greedy = fs.zero_shot_generate(gpt2, tokenizer, prompts, max_new_tokens=3,
                                   sampler="greedy", start_token_id=end_id)
    for prompt, text in zip(prompts, greedy):
        ids = [end_id] + fs.tokenize_texts(tokenizer, [prompt])[0]
        new = []
        for _ in range(3):
            new.append(int(next_logits(ids + new).argmax()))
        assert text == fs.detokenize(tokenizer, new)
    with pytest.raises(TypeError, match="has no generate_ids"):
        fs.zero_shot_generate(FavouringLM(10, 1), tokenizer, ["x"])


# --------------------------------------------------------------------------- the CLI


def _placeholder_export(task_model, vocab_dir, model_config, export_dir, preprocessor=None):
    """Stands in for the SavedModel export (not under test here, and slow): a
    ``saved_model.pb`` whose bytes identify the export."""
    os.makedirs(export_dir, exist_ok=True)
    with open(os.path.join(export_dir, "saved_model.pb"), "w") as f:
        f.write(f"exported from {export_dir}")


def test_cli_few_shot_on_a_model_artifact(tmp_path, gpt2, vocab_dir, small_sst2, capsys,
                                          monkeypatch):
    from lmfactory.components.trainer import export

    monkeypatch.setattr(export, "export_serving_model", _placeholder_export)
    run = tmp_path / "runs" / "tiny"
    artifact = run / "pipeline" / "Pretrainer" / "model" / "7"
    write_model_artifact(str(artifact / "Format-Serving"), gpt2, gpt2.backbone, vocab_dir,
                         {"task": {"kind": "language_model", "objective": "causal_lm",
                                   "sequence_length": 64},
                          "generation": {"max_length": 16}})
    # An older artifact of another trainer, exported differently: not the pushed one.
    other = run / "pipeline" / "Distiller" / "model" / "9"
    write_model_artifact(str(other / "Format-Serving"), gpt2, gpt2.backbone, vocab_dir,
                         {"task": {"kind": "language_model", "objective": "causal_lm"}})
    pushed = run / "serving" / "tiny" / "1700000000"
    shutil.copytree(artifact / "Format-Serving", pushed)
    for path in (artifact, artifact / "Format-Serving", run, run / "pipeline", pushed):
        assert fs.resolve_model_artifact(str(path)) == str(artifact)
    data = tmp_path / "data" / "glue" / "SST-2"
    data.mkdir(parents=True)
    shutil.copy(small_sst2 / "train.tsv", data / "train.tsv")
    shutil.copy(small_sst2 / "mixed.tsv", data / "dev.tsv")
    markdown = tmp_path / "table.md"
    code = cli.main(["few-shot", "--model", str(pushed), "--task", "sst2", "--k", "0,1,2",
                     "--max-examples", "6", "--data-dir", str(tmp_path / "data"),
                     "--markdown", str(markdown), "--json", str(tmp_path / "r.json")])
    assert code == 0
    out = capsys.readouterr().out
    assert "context 64 tokens" in out and "6 examples" in out
    table = markdown.read_text()
    assert table in out
    result = json.loads((tmp_path / "r.json").read_text())
    assert [row["k"] for row in result["rows"]] == [0, 1, 2]
    assert result["model"] == str(artifact) and result["context_length"] == 64

    (tmp_path / "data" / "glue" / "SST-2" / "dev.tsv").write_text(SST2_HEADER + "x\t9\n")
    assert cli.main(["few-shot", "--model", str(artifact), "--task", "sst2", "--k", "0",
                     "--data-dir", str(tmp_path / "data")]) == 2
    assert "dev.tsv:2: label must be 0 or 1" in capsys.readouterr().err
    assert cli.main(["few-shot", "--model", str(tmp_path), "--task", "sst2"]) == 2
    assert "No causal-LM Model artifact" in capsys.readouterr().err
