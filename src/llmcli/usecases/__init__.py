"""What a command does, without a terminal: values in, values (or LlmcliErrors) out, progress by callback.

  chat          open a chat session: the model (lone-argument rule, default, auto-pull), the prompt
  answer        one answer to one prompt: ask, release, check the output constraint, log the exchange
  conversation  the chat log: -c/--cid, recording exchanges, `logs`
  endpoint      which server (--endpoint), and the refusal of options only the local engine has
  models        list, show, rm and tokenize over the store's models
  render        the prompt chat would feed the model
  cache         the disk prefix cache's entries, and clearing it
  bench         the plan, the targets and the measurements (local or a server)
  pull          REPO[:QUANT] -> the HF cache -> (convert) -> the store
  convert       a checkpoint folder (or a cached repo) -> a GGUF -> the store
  record        the one record pull, convert and rm print with --json

Commands parse options into these calls and render what comes back; nothing here prints, exits,
reads the environment or imports rich, typer or prompt_toolkit.
"""
