"""The conformance harness (harness.py) and its tests: every registered architecture, and a
temporary one registered at test time, pass the same checks (docs/ADDING_AN_ARCHITECTURE.md)."""
