"""The Jinja environment chat templates run in: transformers' environment, sandboxed and bounded.

What a template sees matches transformers' `chat_template_utils` (trim_blocks, lstrip_blocks,
loopcontrols, the `{% generation %}` block, `tojson` with its keyword arguments, `raise_exception`,
`strftime_now`, its `dict` and `namespace`), so the same template renders the same text.

A template is untrusted code from a model file. Jinja's ImmutableSandboxedEnvironment stops it
reaching Python internals (CVE-2024-34359); on top of that every render runs under a `Budget`
(budget.py):

- time: a CPU-time deadline, checked on every loop step (each `{% for %}` iterable is wrapped at
  parse time), every call (filters, methods, macros) and every chunk of output;
- size: string and list repetition, `+`, `~`, `%`, `join` and width-like arguments are checked
  before they allocate, and the output is counted as it streams.

So `{{ 'a' * 10**8 }}` is refused before it allocates and two nested 100,000-step loops stop at
the deadline; either way the caller gets a `TemplateError` (one line, exit 2).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import wraps

from llmcli.engine.templates.budget import Budget, TemplateLimit, bounded, current_budget
from llmcli.errors import TemplateError

# A width of ten million or more inside a %-format or str.format spec would allocate that much.
_HUGE_WIDTH = re.compile(r"\d{7,}")
# The widths in a %-format (`%-30s`, `%*d` takes its width from the arguments) or a str.format
# spec (`{:>30}`, `{0:^{1}}`).
_FORMAT_WIDTHS = re.compile(r"%[-+ #0]*(\d+)|\{[^{}]*:[^{}\d]*(\d+)[^{}]*\}")
# Calls whose int argument is a width, and what the result grows by: once, or once a line / a tab.
_WIDTH_CALLS = {"indent": "\n", "center": "", "ljust": "", "rjust": "", "zfill": "", "expandtabs": "\t"}


# Every failure message above and below names the model's template and a fix about the model. For a
# template the user gave with --chat-template, the same failure is told of that file instead.
_SUBJECTS = ("the model's chat template", "the chat template")
_MODEL_FIXES = (
    "use a model with a valid template",
    "use a model with a sane template",
    "use a model with a working chat template",
    "do not trust this model file",
)


def told_of_file(message: str, path: str) -> str:
    """A template failure's message about the chat template in `path`, with `fix path` as its fix."""
    subject = next((s for s in _SUBJECTS if message.startswith(s)), None)
    if subject is not None:
        message = f"the chat template in {path}" + message[len(subject) :]
    for fix in _MODEL_FIXES:
        message = message.replace(fix, f"fix {path}")
    return message


def _weight(value) -> int:
    """What repeating or joining a value costs: its length for text, one per item otherwise."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(len(v) if isinstance(v, str) else 1 for v in value) or 1
    return len(value) if isinstance(value, range) else 1


def _check_binop(op: str, left, right) -> None:
    budget = current_budget()
    budget.tick()
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                budget.size(_weight(seq) * max(n, 0), "a repeated string or list")
    elif op == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        budget.size(_weight(left) + _weight(right), "a concatenation")
    elif op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
        if abs(left).bit_length() * right > 100_000:
            raise TemplateLimit(
                "the chat template computed a number too large to hold and was stopped; "
                "use a model with a sane template"
            )
    elif op == "%" and isinstance(left, str) and _HUGE_WIDTH.search(left):
        budget.size(10**7, "a %-formatted string")
    elif op == "%" and isinstance(left, str):
        _check_width("format", left, right if isinstance(right, tuple) else (right,), {})


def _check_width(name: str, subject, args, kwargs) -> None:
    """A width past llmcli.limits' template_width, or a result it would make past the budget, is
    refused before the call: `indent(100000)` on a long text allocated gigabytes."""
    from llmcli.limits import limit

    budget = current_budget()
    if isinstance(subject, str) and name in ("format", "format_map"):
        widths = [int(a or b) for a, b in _FORMAT_WIDTHS.findall(subject)]
        if "%*" in subject or "%-*" in subject:
            widths += [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    elif name in _WIDTH_CALLS:
        widths = [a for a in (*args, *kwargs.values()) if isinstance(a, int) and not isinstance(a, bool)]
    else:
        return
    width, cap = max(widths, default=0), limit("template_width")
    if width > cap:
        raise TemplateLimit(
            f"the chat template asked for a width of {width:,} in `{name}` (limit {cap:,}) and was "
            "stopped; use a model with a sane template"
        )
    if isinstance(subject, str) and name in _WIDTH_CALLS:
        sep = _WIDTH_CALLS[name]
        times = subject.count(sep) + 1 if sep else 1
        budget.size(len(subject) + width * times, f"a `{name}` result")


# -- transformers' template helpers ---------------------------------------------------------------
def raise_exception(message) -> None:
    raise TemplateError(f"the model's chat template refused the conversation: {message}")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # transformers' own filter: Jinja's would HTML-escape, and templates pass these keywords.
    hook = current_budget().json_text  # over defused text: a stand-in is written as its original would be
    text = json.dumps(
        x, ensure_ascii=ensure_ascii and not hook, indent=indent, separators=separators, sort_keys=sort_keys
    )
    return hook(text, ensure_ascii) if hook else text


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class TemplateDict:
    """transformers' `dict` global: dict() and dict.fromkeys(), nothing else reachable."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _guarded_filter(name: str, func):
    """A filter that charges the budget, refuses huge width/count arguments and oversized results."""

    @wraps(func)
    def guarded(*args, **kwargs):
        budget = current_budget()
        budget.tick()
        if args:
            _check_width(name, args[0], args[1:], kwargs)
        for arg in (*args[1:], *kwargs.values()):
            if isinstance(arg, int) and not isinstance(arg, bool) and arg > budget.max_chars:
                budget.size(arg, f"a `{name}` result")
        if name == "join" and len(args) > 1 and hasattr(args[1], "__len__"):
            sep = args[2] if len(args) > 2 else kwargs.get("d", "")
            budget.size(_weight(args[1]) + len(str(sep)) * len(args[1]), "a joined string")
        result = func(*args, **kwargs)
        if isinstance(result, (str, list, tuple)):
            budget.size(_weight(result), f"a `{name}` result")
        return result

    return guarded


def _make_environment():
    """Build the environment once per template (Jinja is imported only when a chat needs it)."""
    from jinja2 import nodes, pass_eval_context
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace
    from jinja2.visitor import NodeTransformer

    class GenerationBlock(Extension):
        """transformers' `{% generation %}…{% endgeneration %}`: marks the assistant's part, renders it."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

        @pass_eval_context
        def _render_body(self, _eval_ctx, caller):
            return caller()

    class TemplateNamespace(Namespace):
        """transformers' namespace: no underscore attributes (no route to CPython internals)."""

        def __init__(*args, **kwargs):  # noqa: N805 - Jinja's signature trick, so namespace(self=...) works
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            from jinja2.exceptions import SecurityError

            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"a namespace attribute may not start with an underscore ({name!r})")

    class Guard(NodeTransformer):
        """Route every loop's iterable and every `~` through the environment's budget checks."""

        def visit_For(self, node):
            self.generic_visit(node)
            node.iter = nodes.Call(nodes.EnvironmentAttribute("llmcli_loop"), [node.iter], [], None, None)
            return node

        def visit_Concat(self, node):
            self.generic_visit(node)
            return nodes.Call(
                nodes.EnvironmentAttribute("llmcli_concat"), [nodes.Tuple(node.nodes, "load")], [], None, None
            )

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        # Intercepted operators are also never folded at compile time, so `'a'*10**8` is not built there.
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def _parse(self, source, name, filename):
            return Guard().visit(super()._parse(source, name, filename))

        def call_binop(self, context, operator, left, right):
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
            budget = current_budget()
            budget.tick()
            target = getattr(__obj, "__wrapped__", __obj)
            owner = getattr(target, "__self__", None)
            if isinstance(owner, str):
                _check_width(getattr(target, "__name__", ""), owner, args, kwargs)
                if getattr(target, "__name__", "") in ("format", "format_map") and _HUGE_WIDTH.search(owner):
                    budget.size(10**7, "a formatted string")
                for arg in (*args, *kwargs.values()):
                    if isinstance(arg, int) and not isinstance(arg, bool) and arg > budget.max_chars:
                        budget.size(arg, "a padded string")
                if getattr(target, "__name__", "") == "join" and args and isinstance(args[0], (list, tuple)):
                    budget.size(_weight(args[0]) + len(owner) * len(args[0]), "a joined string")
            result = super().call(__context, __obj, *args, **kwargs)
            if isinstance(result, (str, list, tuple)):
                budget.size(_weight(result))
            return result

        @staticmethod
        def llmcli_loop(iterable):
            budget = current_budget()
            for item in iterable:
                budget.tick()
                yield item

        @staticmethod
        def llmcli_concat(parts) -> str:
            budget = current_budget()
            budget.tick()
            pieces = [str(p) for p in parts]
            budget.size(sum(map(len, pieces)), "a concatenation")
            return "".join(pieces)

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols])
    for name, func in list(env.filters.items()):
        env.filters[name] = _guarded_filter(name, func)
    env.filters["tojson"] = _guarded_filter("tojson", tojson)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


def compile_template(source: str):
    """Parse a template in the bounded environment; a syntax error is a one-line TemplateError."""
    from jinja2.exceptions import TemplateSyntaxError

    env = _make_environment()
    try:
        with bounded(Budget()):  # constant folding at compile time runs template code too
            return env.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(
            f"the model's chat template does not parse (line {exc.lineno}: {exc.message}); "
            "use a model with a valid template"
        ) from None
    except RecursionError:
        raise TemplateError(
            "the model's chat template is nested too deeply to parse; use a model with a valid template"
        ) from None


def render(template, budget: Budget, **variables) -> str:
    """Render under the budget; every way a template can fail becomes one TemplateError line."""
    from jinja2.exceptions import SecurityError
    from jinja2.exceptions import TemplateError as JinjaError

    chunks: list[str] = []
    total = 0
    try:
        with bounded(budget):
            for chunk in template.generate(**variables):
                total += len(chunk)
                budget.size(total, "a prompt")
                budget.tick()
                chunks.append(chunk)
    except TemplateError:
        raise
    except SecurityError as exc:
        raise TemplateError(
            f"the model's chat template tried something unsafe and was stopped ({exc}); "
            "do not trust this model file"
        ) from None
    except (RecursionError, MemoryError, OverflowError) as exc:
        raise TemplateLimit(
            f"the model's chat template ran out of room ({type(exc).__name__}) and was stopped; "
            "use a model with a sane template"
        ) from None
    except (
        JinjaError,
        TypeError,
        ValueError,
        KeyError,
        AttributeError,
        IndexError,
        ZeroDivisionError,
    ) as exc:
        detail = str(exc).replace("\n", " ")[:200]
        raise TemplateError(
            f"the model's chat template failed to render ({type(exc).__name__}: {detail}); "
            "use a model with a valid template"
        ) from None
    return "".join(chunks)
