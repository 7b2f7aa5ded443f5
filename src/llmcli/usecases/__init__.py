"""What a command does, without a terminal: values in, values (or LlmcliErrors) out, progress by callback.

  chat      open a chat session: the model (lone-argument rule, default, auto-pull), the prompt, the session
  pull      REPO[:QUANT] -> the HF cache -> (convert) -> the store
  convert   a checkpoint folder (or a cached repo) -> a GGUF -> the store
  record    the one record pull, convert and rm print with --json

Commands parse options into these calls and render what comes back; nothing here prints, exits,
reads the environment or imports rich, typer or prompt_toolkit.
"""
