"""Ollama's dialect: typed bodies (protocol.py), reply shapes (wire.py), routes (routes.py), the
store's routes (manage.py) and /api/embed (embed.py)."""
