"""The client of remote OpenAI-compatible servers: the session, HTTP, SSE and chunks."""
