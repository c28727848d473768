"""ERNIE sizes as `ErnieBackbone` constructor kwargs.

base: Zhang et al. 2019 §4 ("Parameter Settings"): N = 6 T-Encoder layers, M = 6 K-Encoder
aggregators, token hidden H_w = 768, entity hidden H_e = 100 (the TransE dimension), token
heads A_w = 12, entity heads A_e = 4; 12 layers in all, BERT-base's size, so a BERT-base
checkpoint initialises it (`ernie_converters.from_bert`). The entity table size is the KG's:
FB15k-237 here; the pipeline sets it from the TransE output (`entity_vocabulary_size`).
tiny: BERT-tiny's width (Turc et al. 2019: H = 128, 2 heads) with one T-Encoder layer and
one aggregator, for demos, recipes and tests.
"""


def _ernie(num_layers, num_knowledge_layers, hidden_dim, num_heads, entity_dim,
           entity_num_heads, entity_vocabulary_size=14541):
    return {
        "vocabulary_size": 30522,
        "num_layers": num_layers,
        "num_knowledge_layers": num_knowledge_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "entity_vocabulary_size": entity_vocabulary_size,
        "entity_dim": entity_dim,
        "entity_num_heads": entity_num_heads,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "num_segments": 2,
    }


ERNIE_PRESETS = {
    "tiny": _ernie(1, 1, 128, 2, 100, 4),
    "base": _ernie(6, 6, 768, 12, 100, 4),
}
