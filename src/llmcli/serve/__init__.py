"""`llmcli serve`: an HTTP server over engine/local's scheduler that speaks OpenAI's (Chat
Completions, Responses), Ollama's and Anthropic's dialects, and llama-server's own routes.

One engine thread owns the llama contexts and steps each loaded model's scheduler (engine.py); the
asyncio event loop runs FastAPI under uvicorn (app.py) and hands it calls (call.py) through its
inbox. Each request passes the seven stages: tokenize (the door, access.py; the body, state.py; the
render thread, prompt.py), schedule (the gate, gate.py; the model's lease, pool.py; the scheduler's
KV admission), prefill and decode (the scheduler's steps), post-process (the reply reader), return
(SSE, NDJSON or JSON: each dialect's wire.py) and release. Library code: no terminal, no printing,
no exits, no environment.
"""
