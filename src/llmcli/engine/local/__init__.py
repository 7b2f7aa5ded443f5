"""llama.cpp in this process: runtime, the scheduler of sequences, sampling, grammar, prefix cache, lookup."""
