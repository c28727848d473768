"""Evaluation with a blessing gate: task metric on held-out data, blessed above a threshold."""
