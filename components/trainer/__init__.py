"""Trainer run_fn, distribution strategy, optimiser and SavedModel export."""
