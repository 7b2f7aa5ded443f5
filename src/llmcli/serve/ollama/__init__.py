"""Ollama's dialect: typed bodies (protocol.py) and routes (routes.py)."""
