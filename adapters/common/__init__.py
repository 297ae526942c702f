"""What the in-process backends (local and noop) share: the embedded tiny model's assets, tokenizer
loading, request checks and training-batch building.

Not a backend: adapters import this package, never each other.
"""
