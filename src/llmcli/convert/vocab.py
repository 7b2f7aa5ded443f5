"""The tokenizer of a Hugging Face checkpoint, as GGUF metadata.

Two kinds: byte-level BPE from tokenizer.json (Llama 3, Qwen, SmolLM, GPT-2 style) and
SentencePiece from tokenizer.model (Llama 2, Mistral v0.1, Phi-3 style) or, when transformers 5
saved it without one, from its tokenizer.json (Gemma; see spm_json.py). Either way the token list
has exactly as many entries as the embedding has rows: Qwen pads its embedding past the tokenizer,
and those rows become unused padding tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmcli.convert import files, pretokenizers, spm_json, wordpiece
from llmcli.convert.errors import BadCheckpoint, NotACheckpoint, UnsupportedTokenizer, shown
from llmcli.convert.spm_model import read_sentencepiece_model
from llmcli.convert.vocab_checks import checked_added, checked_tokens, checked_vocab
from llmcli.convert.vocab_record import (
    CONTROL,
    NORMAL,
    UNUSED,
    USER_DEFINED,
    PreCheck,
    Vocab,
    sentencepiece,
)

# Added tokens that end a chat turn. llama.cpp stops on its end-of-generation set; naming the
# turn terminator as `eot` makes that explicit when it differs from eos.
END_OF_TURN_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endofturn|>")

SPECIAL_KINDS = ("bos", "eos", "unk", "pad")


def _read_json(path: Path, root: Path) -> dict:
    """A JSON object file of the checkpoint, {} when absent (every tokenizer file is optional alone)."""
    return files.read_json(path, root, dict) or {}


def load_vocab(src: Path, n_rows: int, root: Path | None = None) -> Vocab:
    """Read the tokenizer files of `src` into a Vocab with `n_rows` tokens (the embedding's rows)."""
    root = root or files.checkpoint_root(src)
    tokenizer_json = files.read_json(src / "tokenizer.json", root, dict)
    model = (tokenizer_json or {}).get("model") or {}
    if not isinstance(model, dict):
        raise BadCheckpoint(f"{src.name}/tokenizer.json: model is not an object; download it again")
    if model.get("type") == "BPE" and _is_byte_level(tokenizer_json):
        vocab = _bpe_vocab(src, tokenizer_json, n_rows)
    elif tokenizer_json is not None and wordpiece.is_wordpiece(tokenizer_json):
        vocab = wordpiece.wordpiece_vocab(src, tokenizer_json, n_rows)
    elif files.is_present(src / "tokenizer.model"):
        vocab = _spm_vocab(src, root, tokenizer_json, n_rows)
    elif tokenizer_json is not None and (form := spm_json.recognise(tokenizer_json)) is not None:
        # transformers 5's save_pretrained writes only tokenizer.json for SentencePiece tokenizers (Gemma).
        vocab = spm_json.spm_vocab_from_json(src, tokenizer_json, form, n_rows)
    elif tokenizer_json is not None and model.get("type") == "BPE" and model.get("byte_fallback"):
        # Other SentencePiece-style forms (Llama 2's Metaspace) are not known to split as llama.cpp does.
        raise UnsupportedTokenizer(
            f"{src.name}/tokenizer.json is a SentencePiece-style tokenizer (byte fallback) without its "
            "tokenizer.model; copy tokenizer.model from the original "
            "model into the folder (transformers 5 does not save it)"
        )
    elif tokenizer_json is not None:
        raise UnsupportedTokenizer(
            f"{src.name}/tokenizer.json holds a tokenizer of type {shown(model.get('type', 'unknown'))}, not "
            "byte-level BPE, and there is no tokenizer.model; llmcli "
            "converts byte-level BPE, SentencePiece and WordPiece tokenizers"
        )
    else:
        raise NotACheckpoint(
            f"no tokenizer in {src} (need tokenizer.json or "
            "tokenizer.model); download the tokenizer files too"
        )
    _special_tokens(src, root, vocab, tokenizer_json)
    if vocab.model == "bert":
        wordpiece.special_tokens(vocab, _read_json(src / "tokenizer_config.json", root), tokenizer_json or {})
    vocab.chat_template = chat_template(src, root)
    return vocab


def _is_byte_level(tokenizer_json: dict) -> bool:
    """Whether a ByteLevel step is anywhere in the pre-tokenizer or decoder (walked without recursion)."""
    stack: list[Any] = [tokenizer_json.get("pre_tokenizer"), tokenizer_json.get("decoder")]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "ByteLevel":
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _bpe_vocab(src: Path, tj: dict, n_rows: int) -> Vocab:
    model = tj["model"]
    where = f"{src.name}/tokenizer.json"
    args = (tj.get("pre_tokenizer"), tj.get("normalizer"), model.get("ignore_merges", False))
    pre = pretokenizers.recognise(*args)
    # No exact match: the nearest rows are verified by behaviour once the architecture is known (plan.py).
    candidates = () if pre is not None else tuple(row.name for row in pretokenizers.candidates(*args))
    if pre is None and not candidates:
        raise UnsupportedTokenizer(
            f"the pre-tokenizer in {src.name}/tokenizer.json is not one llama.cpp reproduces exactly "
            f"(known: {pretokenizers.supported()}); refusing to "
            "guess, as a wrong one silently changes the tokens"
        )
    vocab_map, added = checked_tokens(tj, n_rows, where)
    tokens: list[str | None] = [None] * n_rows
    types: list[int] = [UNUSED] * n_rows
    for text, tid in vocab_map.items():
        tokens[tid], types[tid] = text, NORMAL
    for t in added:
        tid, text = t["id"], t["content"]
        tokens[tid] = text
        types[tid] = CONTROL if t.get("special") or _looks_special(text) else USER_DEFINED
    n_padding = tokens.count(None)
    return Vocab(
        model="gpt2",
        pre=pre.name if pre else None,
        tokens=[f"[PAD{i}]" if tok is None else tok for i, tok in enumerate(tokens)],
        types=types,
        merges=_merges(model.get("merges"), where),
        n_padding=n_padding,
        pre_candidates=candidates,
        hf_json=tj if candidates else None,
        pre_check=_by_definition(pre.name) if pre else None,
    )


def _by_definition(name: str) -> PreCheck:
    return PreCheck(pre=name, verified_by="definition")


def _looks_special(text: str) -> bool:
    # Some checkpoints mark control tokens such as <|im_start|> as not special; llama.cpp must still
    # treat them as control tokens, or it renders them as text.
    return (text.startswith("<|") and text.endswith("|>")) or (
        text.startswith("<｜") and text.endswith("｜>")
    )


SPACE_IN_MERGE = chr(ord(" ") + 256)  # "Ġ"


def _merges(raw: Any, where: str) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, list) and all(isinstance(m, str) and " " in m[1:] for m in raw):
        return list(raw)
    # transformers >= 4.45 writes pairs, whose parts may hold a space; llama.cpp reads the space as
    # "Ġ" (its byte + 256), as GPT-2's byte-level alphabet writes it. One pass checks and joins
    # (a vocabulary has hundreds of thousands of merges).
    merges: list[str] = []
    for pair in raw if isinstance(raw, list) else [None]:
        a, b = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        if not (isinstance(a, str) and isinstance(b, str) and a and b):
            raise BadCheckpoint(
                f'{where}: model.merges must be a list of "a b" strings or of [a, b] pairs; '
                "download the tokenizer again"
            )
        merges.append(f"{a.replace(' ', SPACE_IN_MERGE)} {b.replace(' ', SPACE_IN_MERGE)}")
    return merges


# -- SentencePiece -------------------------------------------------------------------------------


def _spm_vocab(src: Path, root: Path, tj: dict | None, n_rows: int) -> Vocab:
    pieces, add_dummy_prefix = read_sentencepiece_model(src / "tokenizer.model", root)
    if len(pieces) > n_rows:
        raise BadCheckpoint(
            f"tokenizer.model has {len(pieces)} pieces but the "
            f"embedding only {n_rows} rows; they do not match"
        )
    tokens = [f"[PAD{i}]" for i in range(n_rows)]
    scores = [-10000.0] * n_rows
    types = [UNUSED] * n_rows
    for i, (piece, score, kind) in enumerate(pieces):
        tokens[i], scores[i], types[i] = piece, score, kind
    # Tokens added on top of the SentencePiece model (chat markers), as the HF tokenizer lists them.
    added = checked_added((tj or {}).get("added_tokens"), n_rows, f"{src.name}/tokenizer.json")
    added_file = checked_vocab(
        _read_json(src / "added_tokens.json", root), n_rows, f"{src.name}/added_tokens.json"
    )
    added += [{"id": tid, "content": text, "special": False} for text, tid in added_file.items()]
    return sentencepiece(tokens, types, scores, added, add_dummy_prefix)


# -- special tokens and the chat template -------------------------------------------------------


def _content(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def _special_tokens(src: Path, root: Path, vocab: Vocab, tj: dict | None) -> None:
    config = _read_json(src / "tokenizer_config.json", root)
    gen = _read_json(src / "generation_config.json", root)
    model_config = _read_json(src / "config.json", root)
    ids = {text: i for i, text in enumerate(vocab.tokens) if vocab.types[i] != UNUSED}

    for kind in SPECIAL_KINDS:
        tid = None
        if (text := _content(config.get(f"{kind}_token"))) is not None:
            tid = ids.get(text)
        # generation_config says what generation stops on; config.json is the oldest place for ids.
        for source in (gen, model_config):
            if tid is None and (value := source.get(f"{kind}_token_id")) is not None:
                tid = value[0] if isinstance(value, list) and value else value
        if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < len(vocab.tokens):
            vocab.special[kind] = tid

    eot = next((ids[t] for t in END_OF_TURN_TEXTS if t in ids), None)
    if eot is not None and eot != vocab.special.get("eos"):
        vocab.special["eot"] = eot

    add_bos, add_eos = _post_processor_adds(tj, vocab)
    for key, found in (("add_bos_token", add_bos), ("add_eos_token", add_eos)):
        value = config.get(key)
        if isinstance(value, bool):
            found = value
        setattr(vocab, key.removesuffix("_token"), found)


def _post_processor_adds(tj: dict | None, vocab: Vocab) -> tuple[bool, bool]:
    """Whether the HF tokenizer's post-processor puts bos first / eos last on a single sequence."""
    if vocab.model == "llama":
        # SentencePiece Llama tokenizers add bos unless told otherwise.
        default = (True, False)
    else:
        default = (False, False)
    post = (tj or {}).get("post_processor")
    if not isinstance(post, dict):
        return default
    procs = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for proc in procs if isinstance(procs, list) else []:
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing":
            single = given if isinstance(given := proc.get("single"), list) else []
            first = _special_id(single[0]) if single else None
            last = _special_id(single[-1]) if len(single) > 1 else None
            bos = vocab.tokens[vocab.special["bos"]] if "bos" in vocab.special else None
            eos = vocab.tokens[vocab.special["eos"]] if "eos" in vocab.special else None
            return (first is not None and first == bos, last is not None and last == eos)
    return default


def _special_id(step: Any) -> Any:
    special = step.get("SpecialToken") if isinstance(step, dict) else None
    return special.get("id") if isinstance(special, dict) else None


def chat_template(src: Path, root: Path | None = None) -> str | None:
    """The chat template: tokenizer_config.json, else chat_template.jinja (transformers 5), else .json."""
    root = root or files.checkpoint_root(src)
    config = _read_json(src / "tokenizer_config.json", root)
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: llama.cpp takes the default one
        template = next(
            (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
        )
    if isinstance(template, str):
        return template
    if template is not None:
        raise BadCheckpoint(
            f"{src.name}/tokenizer_config.json: chat_template is {shown(repr(template))}; it must be "
            "the template's text or a list of {name, template} (fix the file or download it again)"
        )
    jinja = src / "chat_template.jinja"
    if files.is_present(jinja):
        return files.read_text(jinja, root)
    template = _read_json(src / "chat_template.json", root).get("chat_template")
    return template if isinstance(template, str) else None
