#!/usr/bin/env python3
"""Convert a Hugging Face safetensors checkpoint to GGUF, from a checkout (no install needed).

    python scripts/convert/hf_to_gguf.py SRC [-o OUT.gguf] [--outtype f16] [--dry-run]

The same converter as `llmcli convert`, without registering the result in the store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from llmcli.convert import OUTTYPES, convert_checkpoint, plan_conversion  # noqa: E402
from llmcli.convert.outtypes import CONVERT_DEFAULT  # noqa: E402
from llmcli.errors import LlmcliError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])

    def path(text: str) -> Path:
        return Path(text).expanduser()  # this script's own process: its $HOME is the user's

    parser.add_argument("src", type=path, help="Hugging Face model folder")
    parser.add_argument("-o", "--output", type=path, help="output .gguf (default: SRC/<name>-<outtype>.gguf)")
    parser.add_argument("--outtype", default=CONVERT_DEFAULT, choices=list(OUTTYPES))
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    args = parser.parse_args()
    try:
        if args.dry_run:
            plan = plan_conversion(args.src, args.outtype)
            for t in plan.tensors:
                print(f"{t.name:<32} {t.qtype:<5} {'x'.join(map(str, t.shape)):<16} {t.nbytes:>12}")
            print(f"{plan.hf_arch} -> {plan.arch}, {plan.n_params:,} params, ~{plan.estimated_size:,} bytes")
            return 0
        out = args.output or args.src / f"{args.src.resolve().name}-{args.outtype}.gguf"

        def show(name: str, done: int, total: int) -> None:
            print(f"\r{done / 1e6:8.1f}/{total / 1e6:.1f} MB {name:<40}", end="", file=sys.stderr)

        result = convert_checkpoint(
            args.src, out, args.outtype, progress=show if sys.stderr.isatty() else None
        )
        if sys.stderr.isatty():
            print(file=sys.stderr)
        print(result.path)
        return 0
    except LlmcliError as exc:
        print(f"hf_to_gguf: error: {exc}", file=sys.stderr)
        return int(exc.exit_status)
    except KeyboardInterrupt:
        print("\nhf_to_gguf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
