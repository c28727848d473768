"""A label budget (``data.task.train_examples``): TextExampleGen keeps a seeded,
class-stratified sample of the train split and its report counts what was kept."""

import collections

import pytest

from lmfactory.components.example_gen import ingest, sampling
from lmfactory.recipe import RecipeError, load_recipe

from test_example_gen import read_examples


def _sst2_like(tmp_path, positives: int, negatives: int, dev: int = 4):
    """A TSV train split with ``positives`` label-1 and ``negatives`` label-0 rows, and a dev
    split."""
    rows = [f"positive review {i}\t1" for i in range(positives)]
    rows += [f"negative review {i}\t0" for i in range(negatives)]
    train, evaluation = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    evaluation.write_text("sentence\tlabel\n" + "\n".join(
        f"dev sentence {i}\t{i % 2}" for i in range(dev)) + "\n", encoding="utf-8")
    return {"format": "tsv", "label_column": "label", "num_classes": 2,
            "splits": {"train": str(train), "eval": str(evaluation)}}


def _labels(output_dir, split="train"):
    return collections.Counter(e["label"][0] for e in read_examples(output_dir, split))


def test_quotas_follow_the_class_shares_and_sum_to_the_budget():
    assert sampling.quotas(10, {"0": 30, "1": 70}) == {"0": 3, "1": 7}
    assert sampling.quotas(3, {"a": 1, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}
    # 5 * (1/3) each: one unit of remainder each, the two left go to the smaller names
    assert sampling.quotas(5, {"a": 4, "b": 4, "c": 4}) == {"a": 2, "b": 2, "c": 1}
    shares = sampling.quotas(7, {"x": 1, "y": 2, "z": 97})
    assert sum(shares.values()) == 7 and all(shares[k] <= n for k, n in
                                             {"x": 1, "y": 2, "z": 97}.items())
    with pytest.raises(ValueError, match="more than the 3"):
        sampling.quotas(4, {"a": 1, "b": 2})


def test_strata_are_single_class_labels_only():
    import tensorflow as tf

    def example(**features):
        return tf.train.Example(features=tf.train.Features(feature=features)
                                ).SerializeToString()

    ints = tf.train.Feature(int64_list=tf.train.Int64List(value=[2]))
    words = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"entailment"]))
    score = tf.train.Feature(float_list=tf.train.FloatList(value=[3.5]))
    tags = tf.train.Feature(int64_list=tf.train.Int64List(value=[0, 1, 1]))
    assert sampling.stratum(example(label=ints)) == "2"
    assert sampling.stratum(example(label=words)) == "entailment"
    assert sampling.stratum(example(label=score)) == sampling.ONE_STRATUM
    assert sampling.stratum(example(label=tags)) == sampling.ONE_STRATUM
    assert sampling.stratum(example(tags=tags)) == sampling.ONE_STRATUM


def test_a_budget_keeps_a_seeded_stratified_sample_and_reports_it(tmp_path):
    config = _sst2_like(tmp_path, positives=70, negatives=30)
    report = ingest({**config, "train_examples": 20, "seed": 3}, str(tmp_path / "a"))
    assert _labels(tmp_path / "a") == {1: 14, 0: 6}  # the file's 70/30 shares
    assert _labels(tmp_path / "a", "eval") == {0: 2, 1: 2}  # the eval split is whole
    budget = report["label_budget"]
    assert budget == {"requested": 20, "good": 100, "kept": 20, "left_out": 80,
                      "per_class": {"0": {"good": 30, "kept": 6},
                                    "1": {"good": 70, "kept": 14}}}
    assert report["splits"]["train"]["good"] == 100  # outcome counts: the whole file
    first = sorted(e["sentence"][0] for e in read_examples(tmp_path / "a", "train"))
    ingest({**config, "train_examples": 20, "seed": 3}, str(tmp_path / "b"))
    assert sorted(e["sentence"][0] for e in read_examples(tmp_path / "b", "train")) == first
    ingest({**config, "train_examples": 20, "seed": 4}, str(tmp_path / "c"))
    assert sorted(e["sentence"][0] for e in read_examples(tmp_path / "c", "train")) != first
    smaller = ingest({**config, "train_examples": 10, "seed": 3}, str(tmp_path / "d"))
    assert smaller["label_budget"]["kept"] == 10


@pytest.mark.dag  # Beam's worker processes
def test_worker_processes_draw_the_same_sample(tmp_path):
    """The rank hashes an Example's deterministic serialization: the bytes a parser wrote
    may order the feature map differently in another process."""
    config = {**_sst2_like(tmp_path, positives=70, negatives=30), "train_examples": 20,
              "seed": 3}
    ingest(config, str(tmp_path / "one"))
    ingest(config, str(tmp_path / "workers"),
           beam_pipeline_args=["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    assert sorted(e["sentence"][0] for e in read_examples(tmp_path / "workers", "train")) \
        == sorted(e["sentence"][0] for e in read_examples(tmp_path / "one", "train"))


def test_a_budget_over_the_split_or_of_a_bad_value_is_one_line(tmp_path):
    config = _sst2_like(tmp_path, positives=3, negatives=2)
    with pytest.raises(ValueError, match=r"train_examples: 6 is more than the 5 good "
                                         r"examples of the 'train' split"):
        ingest({**config, "train_examples": 6}, str(tmp_path / "over"))
    assert ingest({**config, "train_examples": 5}, str(tmp_path / "all")
                  )["label_budget"]["left_out"] == 0
    for bad in (0, -3, 2.5, "10", True):
        with pytest.raises(ValueError, match="train_examples must be a positive int"):
            ingest({**config, "train_examples": bad}, str(tmp_path / "bad"))


@pytest.mark.parametrize("value, message", [
    (0, "must be a positive"), (-5, "must be a positive"), (2.5, "must be a positive"),
    ("100", "must be a positive"), (True, "must be a positive")])
def test_recipe_label_budget_errors_name_the_field(value, message):
    with pytest.raises(RecipeError, match=message) as error:
        load_recipe("bert_tiny_sst2", [f"data.task.train_examples={value!r}"
                                       if isinstance(value, str) else
                                       f"data.task.train_examples={value}"])
    assert error.value.field == "data.task.train_examples"
    assert str(error.value).count("\n") == 0


def test_the_recipe_budget_reaches_the_task_ingestion_with_the_run_seed():
    from lmfactory.pipelines.pipeline import task_input_config

    recipe = load_recipe("bert_tiny_sst2", ["data.task.train_examples=1000",
                                            "runtime.seed=7"])
    config = task_input_config(recipe["data"]["task"], 2, recipe["runtime"]["seed"])
    assert config["train_examples"] == 1000 and config["seed"] == 7
