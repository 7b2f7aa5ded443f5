"""The fixed text a tokenizer is checked on: llama.cpp must give the same ids as Hugging Face on all of it.

Sources:
- LLAMA_CPP_TESTS: the inputs of llama.cpp's tokenizer tests (models/ggml-vocab-*.gguf.inp, written by
  convert_hf_to_gguf_update.py; MIT), the strings upstream found pre-tokenizers to disagree on.
- SEEDS: short texts written for llmcli, grouped by what they exercise: many scripts, code, numbers,
  whitespace runs, emoji, contractions, mixed case.

The corpus is those strings plus variants made by fixed rules (a leading space, a trailing newline,
upper case, and pairs of seeds joined by a whitespace separator), so it is the same on every run
and every machine. Every string is in Unicode NFC: Qwen's tokenizer normalizes to NFC and llama.cpp
does not, a known and accepted difference (see pretokenizers.HARMLESS_NORMALIZERS) that only shows on
text not already in NFC.
"""

from __future__ import annotations

import hashlib
import unicodedata
from functools import cache

LLAMA_CPP_TESTS: tuple[str, ...] = (
    "ied 4 ½ months",
    "Äpfel",
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\t\n",
    "Hello world",
    " Hello world",
    "Hello World",
    " Hello World",
    " Hello World!",
    "Hello, world!",
    " Hello, world!",
    " this is 🦙.cpp",
    "w048 7tuijk dsdfhu",
    "нещо на Български",
    "កាន់តែពិសេសអាចខលចេញ",
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "Hello",
    " Hello",
    "  Hello",
    "   Hello",
    "    Hello",
    "    Hello\n    Hello",
    " (",
    "\n =",
    "' era",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "!!!!!!",
    "3",
    "33",
    "333",
    "3333",
    "33333",
    "333333",
    "3333333",
    "33333333",
    "333333333",
    "Cửa Việt",
    " discards",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n"
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 "
    "3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
    "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "é",
    "résumé",
    "à" * 200,
    "Vieết Nam",
)

# category -> texts. Written to cover what splitting rules differ on, not to be translations of each other.
SEEDS: dict[str, tuple[str, ...]] = {
    "scripts": (
        "The quick brown fox jumps over the lazy dog.",
        "Größere Äpfel schmecken süßer, sagt Jürgen.",
        "L'élève préférait les crêpes à la crème brûlée.",
        "¿Dónde está la biblioteca? ¡Allí, señor!",
        "A ação não é fácil, mas é possível.",
        "Tiếng Việt có nhiều dấu thanh điệu.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Гей, у лузі червона калина похилилася.",
        "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
        "مرحبا بالعالم، كيف حالك اليوم؟",
        "שלום עולם, מה שלומך היום?",
        "سلام دنیا، امروز هوا خوب است.",
        "नमस्ते दुनिया, आज मौसम अच्छा है।",
        "আমি বাংলায় গান গাই।",
        "வணக்கம் உலகம், இன்று நல்ல நாள்.",
        "สวัสดีชาวโลก วันนี้อากาศดีมาก",
        "ជំរាបសួរពិភពលោក",
        "中文分词测试：今天天气很好，我们去公园散步吧。",
        "繁體中文與簡體中文並存於世。",
        "日本語のテキストです。カタカナとひらがな、漢字も混ざります。",
        "안녕하세요 세계, 오늘 날씨가 좋네요.",
        "გამარჯობა მსოფლიო",
        "Բարեւ աշխարհ",
        "ሰላም ለዓለም",
        "Zażółć gęślą jaźń.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Pijamalı hasta yağız şoföre çabucak güvendi.",
        "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and ﬁ ligatures ① ② ③",
    ),
    "code": (
        "def main(x):\n\tif x > 0:\n\t\treturn x + 1  # tab\n    return -x\n",
        "class Foo:\n    def __init__(self, value):\n        self.value = value\n",
        "for (let i = 0; i < arr.length; i++) { console.log(`${i}: ${arr[i]}`); }",
        '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); return 0; }',
        "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![1, 2]; Ok(()) }",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
        '<div class="card"><a href="https://example.com/?q=1&x=2">link</a></div>',
        '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
        "$ grep -rn 'TODO' src/ | wc -l && echo \"done\" > /tmp/out.txt 2>&1",
        "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\\w+\\.com$",
        "## Heading\n\n- item **bold** and _italic_\n- `code` [link](http://x.y)\n",
        "\\frac{a^2 + b^2}{\\sqrt{c}} \\leq \\sum_{i=1}^{n} x_i",
        "x+=1;y-=2;z*=3;w/=4;a**=b;c//=d;e%=f;g<<=1;h>>=2;i&=j;k|=l;m^=n",
        "if (a != b && c == d || !e) { return a->b.c[0]; }",
    ),
    "numbers": (
        "1",
        "12",
        "123",
        "1234",
        "12345",
        "1234567890",
        "3.14159",
        "1,000,000",
        "-42",
        "+7",
        "0x1F3A",
        "1e-9",
        "6.022e23",
        "2024-01-31",
        "23:59:59",
        "+1 (555) 123-4567",
        "$19.99",
        "€5,50",
        "50%",
        "v1.2.3-rc.4",
        "١٢٣٤٥",
        "१२३४५",
        "２０２４年",
        "3/4",
        "10^6",
        "007",
        "1st 2nd 3rd 4th",
    ),
    "whitespace": (
        "a  b   c    d",
        "a\tb\t\tc",
        "line1\nline2\n\nline4",
        "crlf\r\nline\r\n",
        "trailing   ",
        "   leading",
        " \n \n ",
        "\t \t \n",
        "no\u00a0break\u00a0space",
        "ideographic\u3000space",
        "\n\n\n\n\n\n",
        "        eight",
        "end\n",
        "a \n b \n\n c",
    ),
    "emoji": (
        "👍",
        "👍🏽",
        "👨\u200d👩\u200d👧\u200d👦",
        "🇫🇷🇯🇵",
        "1️⃣",
        "❤️",
        "🦙🦙🦙",
        "🙂 smile 🙃",
        "ok👌done",
        "🏳️\u200d🌈",
    ),
    "contractions": (
        "I'm",
        "you're",
        "DON'T",
        "it's",
        "we'll",
        "they'd",
        "I've",
        "'s",
        "'S",
        "We'Ve a'lL",
        "He said 'hello' and 'goodbye'.",
        "It’s a curly apostrophe’s test.",
        "rock 'n' roll",
        "o'clock",
    ),
    "case": (
        "HelloWorld",
        "camelCaseIdentifier",
        "SCREAMING_SNAKE_CASE",
        "iPhone",
        "McDonald's",
        "HTTPServer",
        "XMLHttpRequest",
        "ÉCOLE élève",
        "ΑΒΓ αβγ",
        "ПРИВЕТ привет",
        "mIxEd CaSe TeXt",
    ),
}

# Separators used to join pairs of seeds: where one word's end meets the next word's start.
SEPARATORS = (" ", "\n", "  ", "\t", "", "\n\n", " \n", ", ")


def _variants(seeds: list[str]) -> list[str]:
    out: list[str] = []
    for i, text in enumerate(seeds):
        out += [" " + text, text + "\n", text.upper()]
        partner = seeds[(i * 7 + 3) % len(seeds)]
        out.append(text + SEPARATORS[i % len(SEPARATORS)] + partner)
    return out


@cache
def check_corpus() -> tuple[str, ...]:
    """Every check string, in a fixed order, without duplicates."""
    seeds = [text for group in SEEDS.values() for text in group]
    texts = [*LLAMA_CPP_TESTS, *seeds, *_variants(seeds)]
    unique = dict.fromkeys(unicodedata.normalize("NFC", t) for t in texts)
    return tuple(unique)


def corpus_digest() -> str:
    """A short fingerprint of the corpus, written into the GGUF beside the verdict."""
    digest = hashlib.sha256()
    for text in check_corpus():
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:12]
