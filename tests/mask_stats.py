"""Statistics of masked-LM batches shared by the pretraining-data tests."""

import numpy as np


def mean_mask_overlap(first_pass, second_pass) -> float:
    """Mean Jaccard overlap, row by row, of the positions two passes over the same records
    selected for prediction (real predictions only: weight > 0). Independent draws of 15% of
    a row overlap by about 0.08; a mask that does not change between passes gives 1."""
    overlaps = []
    for (x1, _, w1), (x2, _, w2) in zip(first_pass, second_pass):
        for row in range(len(x1["mask_positions"])):
            a = set(x1["mask_positions"][row][w1["mlm"][row] > 0].tolist())
            b = set(x2["mask_positions"][row][w2["mlm"][row] > 0].tolist())
            if a or b:
                overlaps.append(len(a & b) / len(a | b))
    return float(np.mean(overlaps))


def two_epochs(file_pattern: str, config: dict):
    """The batches of two consecutive epochs of ONE repeated training iterator (batches of
    one record, unshuffled, so row i of both epochs is the same record), the way `fit`
    reads dynamic-masking data."""
    from lmfactory.components.pretraining_data import features

    read = dict(batch_size=1, shuffle=False)
    records = sum(1 for _ in features.make_dataset(file_pattern, config, repeat=False, **read))
    iterator = features.make_dataset(file_pattern, config, repeat=True, **read).as_numpy_iterator()
    batches = [next(iterator) for _ in range(2 * records)]
    return batches[:records], batches[records:]
