"""AWD-LSTM sizes as `AwdLstmBackbone` constructor kwargs.

"wikitext2": the paper's WikiText-2 model (Merity et al. 2018 §5): a 3-layer LSTM with
1150 hidden units, embedding size 400 (the last layer's size too, for weight tying);
dropout 0.4 on the output, 0.3 between LSTM layers (dropouth; 0.25 on PTB), 0.65 on the
input embedding (dropouti), 0.1 embedding dropout and 0.5 DropConnect on the recurrent
weights. WikiText-2's vocabulary has 33,278 words. ULMFiT (Howard & Ruder 2018 §4) uses
the same network with embedding 400, 3 layers and 1150 hidden units.

"small": the same structure scaled down (3 layers, 256 units, embedding
128) for runs of minutes on a CPU. "tiny": for tests and smoke runs.
"""


def _awd(vocabulary_size, num_layers=3, embedding_dim=400, lstm_units=1150,
         dropout=0.4, dropout_hidden=0.3, dropout_input=0.65, dropout_embedding=0.1,
         dropout_weight=0.5, max_sequence_length=512):
    return {
        "vocabulary_size": vocabulary_size,
        "num_layers": num_layers,
        "embedding_dim": embedding_dim,
        "lstm_units": lstm_units,
        "dropout": dropout,
        "dropout_hidden": dropout_hidden,
        "dropout_input": dropout_input,
        "dropout_embedding": dropout_embedding,
        "dropout_weight": dropout_weight,
        "max_sequence_length": max_sequence_length,
    }


AWD_LSTM_PRESETS = {
    "tiny": _awd(1000, num_layers=2, embedding_dim=32, lstm_units=64,
                 max_sequence_length=128),
    "small": _awd(10000, embedding_dim=128, lstm_units=256),
    "wikitext2": _awd(33278),
}
