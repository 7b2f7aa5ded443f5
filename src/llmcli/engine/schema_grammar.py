"""JSON Schema to GBNF: llama-cpp-python's SchemaConverter, plus exact numeric bounds.

The converter (0.3.x) turns `{"type": "integer", "minimum": 1}` into a plain integer rule and drops
the bound. Here a bounded integer or number gets a grammar that produces exactly the decimal
strings inside the bounds, so a sampled reply never breaks a bound:

- integer: canonical decimals (no leading zero, no exponent) in [min, max], split by digit count
  (the idea of llama.cpp's `_generate_min_max_int`). An open side stops at 16 digits, as the
  converter's own integer rule does.
- number: an integer part and an optional fraction, no exponent, at most 15 significant digits
  in all. Over 15 digits a decimal and its nearest double stay apart, so a bound written with at
  most 15 significant digits holds for the parsed double too (exclusive bounds included).

Every string the grammar allows is inside the bounds; some valid spellings (1e3, 0.50000…) are
not generated. jsonschema checks the parsed reply after generation in any case.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal

BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
INT_DIGITS = 16  # the converter's integral-part: [0-9] | [1-9] [0-9]{0,15}
NUMBER_DIGITS = 15  # significant digits a double keeps apart (DBL_DIG)


# A character inside a JSON string, as llama.cpp's newer converter writes it: no raw control
# characters (U+0000..U+001F, and DEL as llama.cpp excludes it too), escapes as JSON has them.
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'


class EmptyRange(ValueError):
    """No value satisfies the bounds."""


# -- literals -------------------------------------------------------------------------------------
# llama.cpp's GBNF literal escapes (parse_char): the converter's own escaping leaves `\` alone, so a
# value with a backslash became a different JSON escape, and one with `"` a grammar that cannot parse.
_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """A GBNF string literal that matches exactly `text` (UTF-8 as llama.cpp reads it)."""
    out = []
    for ch in text:
        if ch in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def json_text(value) -> str:
    """The JSON text a reply writes for a const, an enum value or a property name: characters as
    they are, except what JSON must escape; a lone surrogate (valid in a JSON escape, not in UTF-8)
    stays an escape."""
    text = json.dumps(value, ensure_ascii=False)
    return re.sub("[\\ud800-\\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


# -- integers -------------------------------------------------------------------------------------
def _same_length(lo: str, hi: str) -> str:
    """Digit strings of one length, lo <= s <= hi (lexical order is numeric order at equal length)."""
    if lo == hi:
        return f'"{lo}"'
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_same_length(lo[1:], hi[1:])})'
    zeros, nines = "0" * rest, "9" * rest
    first, last = int(lo[0]), int(hi[0])
    alts = []
    if lo[1:] != zeros:
        alts.append(f'"{lo[0]}" ({_same_length(lo[1:], nines)})')
        first += 1
    tail = None
    if hi[1:] != nines:
        tail = f'"{hi[0]}" ({_same_length(zeros, hi[1:])})'
        last -= 1
    if first <= last:
        alts.append(f"[{first}-{last}] [0-9]{{{rest}}}" if first < last else f'"{first}" [0-9]{{{rest}}}')
    if tail:
        alts.append(tail)
    return " | ".join(alts)


def natural_range(lo: int, hi: int) -> str:
    """GBNF for the canonical decimal spellings of the integers lo..hi (0 <= lo <= hi)."""
    alts = []
    for n in range(len(str(lo)), len(str(hi)) + 1):
        a = lo if n == len(str(lo)) else 10 ** (n - 1)
        b = hi if n == len(str(hi)) else 10**n - 1
        alts.append(f"({_same_length(str(a), str(b))})")
    return " | ".join(alts)


def integer_range(lo: int | None, hi: int | None) -> str:
    """GBNF for the integers in [lo, hi]; None is an open side (up to INT_DIGITS digits)."""
    top = 10**INT_DIGITS - 1
    lo = -top if lo is None else lo
    hi = top if hi is None else hi
    if lo > hi:
        raise EmptyRange(f"no integer is between {lo} and {hi}")
    alts = []
    if lo < 0:  # "-" and a magnitude; -0 only spells 0, so start the magnitudes at 1
        alts.append(f'"-" ({natural_range(max(-hi, 1), -lo)})')
    if hi >= 0:
        alts.append(natural_range(max(lo, 0), hi))
    return " | ".join(f"({a})" for a in alts)


# -- numbers --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Edge:
    """A bound on a fraction 0.f: the bound's own fraction digits (no trailing zeros), strict or not."""

    digits: str
    strict: bool


def _fraction(lower: _Edge | None, upper: _Edge | None, room: int) -> tuple[str | None, bool]:
    """Digit strings f of length <= room with lower <= 0.f <= upper (None: no bound on that side).
    Returns (GBNF for the non-empty ones, or None if there are none; whether the empty f is in)."""
    if lower is not None and lower.digits == "" and not lower.strict:
        lower = None  # f >= 0 holds for every f
    empty_ok = (lower is None or (lower.digits == "" and not lower.strict)) and (
        upper is None or upper.digits != "" or not upper.strict
    )
    if room == 0:
        return None, empty_ok
    if lower is None and upper is None:
        return f"[0-9]{{1,{room}}}", empty_ok
    if lower is None and upper == _Edge("", False):  # f <= 0: zeros only
        return f'"0"{{1,{room}}}', empty_ok
    groups: list[tuple[int, int, tuple]] = []  # runs of first digits that lead to the same state
    for c in range(10):
        state = (_step_lower(lower, c), _step_upper(upper, c))
        if "no" in state:
            continue
        if groups and groups[-1][2] == state and groups[-1][1] == c - 1:
            groups[-1] = (groups[-1][0], c, state)
        else:
            groups.append((c, c, state))
    alts = []
    for first, last, (low, up) in groups:
        rest, rest_empty = _fraction(low, up, room - 1)
        head = f'"{first}"' if first == last else f"[{first}-{last}]"
        if rest is None:
            if rest_empty:
                alts.append(head)
        else:
            alts.append(f"{head} ({rest})" + ("?" if rest_empty else ""))
    return (" | ".join(alts) if alts else None), empty_ok


def _step_lower(edge: _Edge | None, c: int):
    """The bound on the rest of f once its first digit is c (or "no": f is below the bound)."""
    if edge is None:
        return None
    if edge.digits == "":  # f >= 0 (always) or f > 0 (some later digit is non-zero)
        return None if (not edge.strict or c > 0) else edge
    d = int(edge.digits[0])
    return None if c > d else (_Edge(edge.digits[1:], edge.strict) if c == d else "no")


def _step_upper(edge: _Edge | None, c: int):
    if edge is None:
        return None
    if edge.digits == "":  # f <= 0 or f < 0: only zeros, and not even those when strict
        return edge if c == 0 else "no"
    d = int(edge.digits[0])
    return None if c < d else (_Edge(edge.digits[1:], edge.strict) if c == d else "no")


def _split(value: Decimal) -> tuple[int, str]:
    """A non-negative decimal as its integer part and its fraction digits without trailing zeros."""
    whole = int(value)
    text = format(value - whole, "f")
    return whole, (text.split(".", 1)[1].rstrip("0") if "." in text else "")


def _with_fraction(integer: str, digits: int, lower: _Edge | None, upper: _Edge | None) -> str | None:
    """An integer part (GBNF, `digits` long) and the fractions allowed after it."""
    body, empty_ok = _fraction(lower, upper, max(NUMBER_DIGITS - digits, 0))
    if body is None:
        return integer if empty_ok else None
    return f'{integer} "." ({body})' if not empty_ok else f'{integer} ("." ({body}))?'


def _magnitudes(lo: Decimal, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> list[str]:
    """Decimal spellings (no sign, no exponent) of x with lo <(=) x <(=) hi, 0 <= lo; hi None: open."""
    lo_int, lo_frac = _split(lo)
    low = _Edge(lo_frac, lo_strict)
    if hi is None:
        hi_int, up = 10**NUMBER_DIGITS - 1, None
    else:
        hi_int, hi_frac = _split(hi)
        up = _Edge(hi_frac, hi_strict)
    if lo_int == hi_int:
        alt = _with_fraction(f'"{lo_int}"', len(str(lo_int)), low, up)
        return [alt] if alt else []
    alts = [_with_fraction(f'"{lo_int}"', len(str(lo_int)), low, None)]
    if lo_int + 1 <= hi_int - (0 if up is None else 1):
        last = hi_int - (0 if up is None else 1)
        for n in range(len(str(lo_int + 1)), len(str(last)) + 1):  # one fraction room per length
            a, b = max(lo_int + 1, 10 ** (n - 1) if n > 1 else 0), min(last, 10**n - 1)
            if a <= b:
                alts.append(_with_fraction(f"({_same_length(str(a), str(b))})", n, None, None))
    if up is not None:
        alts.append(_with_fraction(f'"{hi_int}"', len(str(hi_int)), None, up))
    return [a for a in alts if a]


def number_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> str:
    """GBNF for the decimals x with lo <(=) x <(=) hi; None is an open side."""
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        raise EmptyRange(f"no number is between {lo} and {hi}")
    alts = []
    if lo is None or lo < 0:  # negatives: "-" then a magnitude m with -hi >(=) m >(=) -lo
        m_lo, m_lo_strict = (Decimal(0), False) if hi is None or hi > 0 else (-hi, hi_strict)
        alts += [f'"-" {a}' for a in _magnitudes(m_lo, m_lo_strict, None if lo is None else -lo, lo_strict)]
    if hi is None or hi >= 0 and not (hi == 0 and hi_strict):
        if lo is None or lo < 0:
            start, strict = Decimal(0), False
        else:
            start, strict = lo, lo_strict
        alts += _magnitudes(start, strict, hi, hi_strict)
    if not alts:
        raise EmptyRange(f"no number with at most {NUMBER_DIGITS} digits is between {lo} and {hi}")
    return " | ".join(f"({a})" for a in alts)


# -- the bounds of one subschema ------------------------------------------------------------------
def _decimal(value) -> Decimal:
    # repr: the shortest spelling of the double the schema's number became (0.1, not 0.1000…0555)
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def bounded_rule(schema: dict) -> str:
    """The GBNF body (before `space`) for a bounded {"type": "integer"|"number", ...}."""
    lower = [
        (_decimal(schema[k]), k.startswith("exclusive"))
        for k in ("minimum", "exclusiveMinimum")
        if k in schema
    ]
    upper = [
        (_decimal(schema[k]), k.startswith("exclusive"))
        for k in ("maximum", "exclusiveMaximum")
        if k in schema
    ]
    # The tighter bound of each side: the larger minimum (exclusive wins a tie), the smaller maximum.
    lo = max(lower, key=lambda b: (b[0], b[1])) if lower else None
    hi = min(upper, key=lambda b: (b[0], not b[1])) if upper else None
    if schema.get("type") == "integer":
        lo_int = None if lo is None else (math.floor(lo[0]) + 1 if lo[1] else math.ceil(lo[0]))
        hi_int = None if hi is None else (math.ceil(hi[0]) - 1 if hi[1] else math.floor(hi[0]))
        return integer_range(lo_int, hi_int)
    return number_range(lo and lo[0], bool(lo and lo[1]), hi and hi[0], bool(hi and hi[1]))


def schema_to_gbnf(schema: dict) -> str:
    """The converter's grammar, with bounded integers and numbers as above. Raises what the
    converter raises (AssertionError and friends) and EmptyRange."""
    from llmcli import llama_lib

    grammar = llama_lib.load("llama_grammar")

    # mypy cannot follow a module loaded by name; the base is llama_cpp.llama_grammar.SchemaConverter.
    class Converter(grammar.SchemaConverter):  # type: ignore[name-defined]
        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            self._ref_rules: dict[str, str] = {}  # a $ref -> its rule's name, set before it is visited

        def resolve_refs(self, schema, url):
            """Every local $ref anywhere in the schema, by JSON Pointer (the converter's own pass
            skips the rest of a node that has a $ref, so a $ref inside $defs went unresolved)."""
            from urllib.parse import unquote

            todo = [schema]
            while todo:
                node = todo.pop()
                if isinstance(node, list):
                    todo.extend(node)
                elif isinstance(node, dict):
                    ref = node.get("$ref")
                    if isinstance(ref, str) and ref.startswith("#") and ref not in self._refs:
                        target = schema
                        for raw in ref[2:].split("/") if ref not in ("#", "#/") else []:
                            part = unquote(raw).replace("~1", "/").replace("~0", "~")
                            target = target[int(part)] if isinstance(target, list) else target[part]
                        self._refs[ref] = target
                    todo.extend(node.values())
            return schema

        def _format_literal(self, literal):
            return gbnf_literal(literal)

        def _generate_constant_rule(self, value):
            return gbnf_literal(json_text(value))

        def _resolve_ref(self, ref):
            """One rule per definition, named before its body is visited, so a recursive $ref
            refers to it by that name (the converter's own name could be renamed on the way)."""
            if ref in self._ref_rules:
                return self._ref_rules[ref]
            base = "ref-" + (re.sub(r"[^a-zA-Z0-9-]+", "-", ref.split("/")[-1]) or "root")
            name, i = base, 0
            while name in self._rules:
                i += 1
                name = f"{base}{i}"
            self._ref_rules[ref] = name
            self._rules[name] = ""  # reserved until the body is known
            self._rules[name] = self.visit(self._refs[ref], f"{name}-def")
            return name

        def _add_primitive(self, name, rule):
            if name == "char":  # the converter lets raw control characters into strings; JSON does not
                rule = grammar.BuiltinRule(JSON_CHAR, [])
            return super()._add_primitive(name, rule)

        def visit(self, node, name):
            if (
                isinstance(node, dict)
                and node.get("type") in ("integer", "number")
                and any(k in node for k in BOUND_KEYWORDS)
            ):
                rule_name = name + "-" if name in grammar.RESERVED_NAMES else name or "root"
                return self._add_rule(rule_name, f"({bounded_rule(node)}) space")
            return super().visit(node, name)

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    # Named "json", not the converter's "": a property named "" would otherwise name its rule root.
    top = converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "stdin"), "json")
    converter._rules["root"] = top
    return converter.format_grammar()
