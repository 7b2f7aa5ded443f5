"""Where `llmcli serve` listens by default: serve's --host and --port, and the server `llmcli ps` asks
when no --endpoint is given. No imports: `llmcli --help` reads it."""

HOST = "127.0.0.1"  # this machine only: listening beyond it needs a key
PORT = 8080
