"""llama-server's own routes beside the dialects: /tokenize, /detokenize, /apply-template."""
