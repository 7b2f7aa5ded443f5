"""llama.cpp in this process: runtime, the scheduler of sequences, sampling, grammar, prefix cache, lookup.

Importing this package loads llama.cpp and initialises its backends, before any module of it imports
numpy (the sampler does): on CUDA, a model loaded after `import numpy` crashed llama.cpp's loader.
Every command that loads a model imports this package first (tests/engine/test_import_order.py).
"""

from llmcli.engine.local.backend import init_backends

init_backends()
