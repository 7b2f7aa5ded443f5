"""llmcli: run open LLMs locally and see where the time of each request goes."""

__version__ = "0.1.0"
