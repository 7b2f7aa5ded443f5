"""numpy for engine/local, always after llama.cpp: the one place numpy comes in on a path that loads
a model, and it initialises llama.cpp's backends first.

On CUDA a model loaded after `import numpy` crashed llama.cpp's loader (engine/local/backend.py's
init_backends, docs/build.md). Every module here that needs numpy imports it from this module (`from
llmcli.engine.local.arrays import np`), so whichever of them a command reaches first, the order holds;
tests/cli/test_gpu_layers_cli.py pins it for chat, bench, bench --parallel and serve.
"""

from __future__ import annotations

from llmcli.engine.local.backend import init_backends

init_backends()

import numpy as np  # noqa: E402

__all__ = ["np"]
