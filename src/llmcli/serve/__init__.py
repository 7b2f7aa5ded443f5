"""`llmcli serve`: an OpenAI- and Ollama-compatible HTTP server over engine/local's scheduler.

One engine thread owns the llama context and steps the scheduler (engine.py); the asyncio event loop
runs FastAPI under uvicorn (app.py) and hands it requests through a queue. Each request passes the
seven stages: access (access.py, body.py), schedule (the bounded queue, the scheduler's KV
admission), prefill and decode (the scheduler's steps), post-process, return (SSE, NDJSON or JSON)
and release. Library code: no terminal, no printing, no exits, no environment.
"""
