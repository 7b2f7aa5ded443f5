"""`llmcli logs`: the conversation log (every chat exchange), recent, searched, or one conversation."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from llmcli.commands.options import JsonOpt, cid_option, environment, renamed_option

HELP = """Show logged chat exchanges: the latest 3, oldest first
(the newest is at the bottom, as in `llm logs`).

\b
  llmcli logs                  the latest 3 exchanges
  llmcli logs --count 0        all of them
  llmcli logs --query "risk"   the latest 3 whose prompt or reply holds every word (full-text search)
  llmcli logs --cid ID         one whole conversation (continue it with `llmcli chat --cid ID`)
  llmcli logs --json           the same as JSON, one list on stdout
  llmcli logs path             where the log is (a SQLite database)

Chat logs every exchange unless given --no-log or LLMCLI_NO_LOG=1.
"""


def _parse_count(text: str) -> int:
    from llmcli.usecases.conversation import parse_count  # only when --count is given: startup stays light

    return parse_count(text)


# Long only: -n is chat's --max-tokens (tokens), not a number of exchanges. Parsed here, so a bad
# count is refused in the CLI's own words (not the option parser's).
CountOpt = Annotated[
    Optional[int],
    typer.Option(
        "--count",
        metavar="N",
        parser=_parse_count,
        show_default=False,
        help="How many exchanges, 0 for all. \\[3; all with --cid]",
    ),
]


def logs(
    context: typer.Context,
    action: Annotated[
        Optional[str],
        typer.Argument(metavar="ACTION", show_default=False, help="`path`: print where the log is."),
    ] = None,
    count: CountOpt = None,
    query: Annotated[
        Optional[str],
        typer.Option(  # long only: -q is --outtype (pull, convert)
            "--query",
            metavar="TEXT",
            show_default=False,
            help="Only exchanges whose prompt or reply holds every word.",
        ),
    ] = None,
    cid: Annotated[Optional[str], cid_option("Only this conversation.")] = None,
    json_out: JsonOpt = False,
    old_n: Annotated[Optional[str], renamed_option("-n", now="--count")] = None,
    old_q: Annotated[Optional[str], renamed_option("-q", now="--query")] = None,
) -> None:
    from llmcli.errors import UsageError
    from llmcli.ui.logs import show_exchanges
    from llmcli.ui.output import Output
    from llmcli.usecases.conversation import find_exchanges, log_path

    out = Output(environment(context))
    if action is not None:
        if action != "path":
            raise UsageError(f"unknown logs action '{action}'; the only one is `llmcli logs path`")
        if count is not None or query is not None or cid is not None or json_out:
            raise UsageError("`llmcli logs path` takes no options")
        out.write(f"{log_path(out.env.store_root)}\n")
        return
    found = find_exchanges(out.env.store_root, count=count, query=query, cid=cid)
    if found.like_search:
        out.warn(f"{found.like_search}: searched with LIKE, which is slower")
    if found.skipped:
        out.warn(found.skipped)
    show_exchanges(out, found, json_out)


logs.__doc__ = HELP
