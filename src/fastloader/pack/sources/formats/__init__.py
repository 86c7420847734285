"""One module per registered source (pack/sources/registry.py), each a Source subclass."""
