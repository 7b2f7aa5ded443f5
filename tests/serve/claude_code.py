"""What a Claude Code turn carries that the prefix cache must hold across turns: the billing line
of its first system block, whose `cch=` nonce changes every request, and tools. Shared by
tests/serve/test_claude_code_prefix.py and benchmarks/claude_code_turns.py."""

BILLING = "x-anthropic-billing-header: cc_version=2.1.3.abc; cc_entrypoint=cli; cch={nonce};"
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command and return its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string", "maxLength": 40}},
            "required": ["command"],
        },
    },
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string", "maxLength": 60}},
            "required": ["file_path"],
        },
    },
]
