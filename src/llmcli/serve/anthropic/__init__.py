"""Anthropic's Messages dialect: typed bodies (protocol.py), replies and events (wire.py), routes."""
