"""KagNet's knowledge stages (Lin et al. 2019 §3.1): concept recognition, path finding,
path pruning and schema graphs for multiple-choice questions (`ConceptPaths`, Beam)."""
