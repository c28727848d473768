"""The Pusher's executor: TFX's, with an atomic, de-duplicated filesystem push."""
