"""`llmcli bench`: llama-bench-grade throughput, chat latency, and the transformers baseline.

records.py  the plan and the row (llama-bench's JSON field names)
llama.py    pp<N>/tg<N> on llama.cpp, as llama-bench measures them
hf.py       the same tests through transformers' AutoModelForCausalLM + generate()
chat.py     a scripted multi-turn conversation through the chat engine: TTFT cold vs reused
runner.py   validates options into a plan, resolves models, runs backends, pairs speedups
report.py   md / json / jsonl / csv and the bar chart, as strings (the command prints them)

No terminal code here, and no heavy import at module level.
"""
