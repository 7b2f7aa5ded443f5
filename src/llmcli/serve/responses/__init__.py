"""OpenAI's Responses dialect, stateless: typed bodies (protocol.py), replies and events (wire.py), routes."""
