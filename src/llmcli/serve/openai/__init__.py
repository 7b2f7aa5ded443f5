"""OpenAI's dialect: typed bodies (protocol.py), reply shapes (wire.py), routes (routes.py) and
/v1/embeddings (embeddings.py)."""
