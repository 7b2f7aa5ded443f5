"""Chat templates: render (transformers' semantics) in a sandbox, the choice of a template, thinking forms."""
