"""The local engine's scheduler: many sequences over one llama.cpp context."""
