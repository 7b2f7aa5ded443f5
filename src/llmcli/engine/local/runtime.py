"""One GGUF loaded into llama.cpp, driven through its own C API (llama-cpp-python's ctypes layer).

Why not `llama_cpp.Llama`: its generate loop copies the whole logits row into numpy for every
token, which costs about a quarter of decode speed on small models. Here the hot loop is
`llama_decode` + the native sampler chain, one ctypes call each, so decode runs at native speed.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.engine.local.backend import LOG_LINES, PLACEMENT_LOG, devices, extra_bufts_allowed
from llmcli.engine.local.backend import llama as _llama
from llmcli.engine.local.batch import free_context
from llmcli.engine.local.placement import Placement
from llmcli.engine.local.threads import Threads, read_sample, usable_cpus
from llmcli.errors import BadModelFile, RuntimeFailure
from llmcli.limits import check_context, check_threads
from llmcli.offload import EVERY_LAYER, GpuLayers


@dataclass
class RuntimeConfig:
    n_ctx: int | None = None  # None: min(trained context, DEFAULT_CTX)
    n_threads: int | None = None  # None: the usable cores other processes leave free (threads.py)
    n_batch: int = 512
    flash_attn: bool = True  # "auto" in llama.cpp terms: on where the backend supports it
    n_seq_max: int = 1  # sequences the context serves at once (engine.local.scheduler)
    kv_unified: bool | None = None  # one KV pool for all sequences; None: llama.cpp's default
    gpu_layers: GpuLayers = EVERY_LAYER  # --gpu-layers: llama.cpp's n_gpu_layers (default: all)
    offload_kqv: bool = True  # each layer's KV cache on its layer's device (llama.cpp's default)


DEFAULT_CTX = 4096


def _kv_bytes_per_token(header) -> int | None:
    """n_layer x (n_embd_k_gqa + n_embd_v_gqa) x 2 bytes (an f16 cache), from the GGUF's metadata;
    None where the metadata does not say, or says nonsense (llama.cpp then refuses the file itself)."""
    from llmcli.errors import BadModelFile
    from llmcli.gguf_check import facts_from_header

    try:
        value = facts_from_header(header).kv_bytes_per_token()
    except (BadModelFile, TypeError, ValueError, ArithmeticError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class Runtime:
    """A model + a context with one sequence; knows which tokens its KV cache holds."""

    def __init__(self, path: str | Path, config: RuntimeConfig | None = None) -> None:
        self.path = str(path)
        self.config = config or RuntimeConfig()
        check_threads(self.config.n_threads)  # libgomp aborts (or segfaults) far above the cores
        self.ll = ll = _llama()
        self._model = self._ctx = None
        t0 = time.perf_counter()
        # The load is the first window over which threads.py sees what else keeps the cores busy.
        cpus = usable_cpus()
        start = None if self.config.n_threads else read_sample(cpus)
        self.threads = Threads(self.config.n_threads, cpus, start)
        # llama.cpp trusts the header it reads; a corrupt file must fail here, in Python, instead.
        from llmcli.gguf_check import read_header

        header = read_header(self.path)
        # llama.cpp allocates the whole KV cache with the context: refuse one that cannot fit, first.
        check_context(self.config.n_ctx or DEFAULT_CTX, _kv_bytes_per_token(header), header.file_size)
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = self.config.gpu_layers.n_gpu_layers
        # AMX kernels compiled in, on an AMX CPU, crash at the first matmul: keep the weights out of
        # their buffer type (llama-bench's --repack 0). Only there: elsewhere repacking is a speed-up.
        mparams.use_extra_bufts = bool(mparams.use_extra_bufts) and extra_bufts_allowed()
        self.model_params = mparams  # as handed to llama.cpp (tests read n_gpu_layers back)
        PLACEMENT_LOG.clear()
        self._model = ll.llama_model_load_from_file(self.path.encode(), mparams)
        if not self._model:
            raise BadModelFile(
                f"llama.cpp could not load {self.path} ({self.last_log()}); re-download or re-convert it"
            )
        self.vocab = ll.llama_model_get_vocab(self._model)
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(self._model))
        cparams = ll.llama_context_default_params()
        n_ctx = self.config.n_ctx or min(self.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = self.config.n_batch
        cparams.n_threads = cparams.n_threads_batch = self.threads.n
        cparams.flash_attn_type = (
            ll.LLAMA_FLASH_ATTN_TYPE_AUTO if self.config.flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        cparams.n_seq_max = self.config.n_seq_max
        if self.config.kv_unified is not None:
            cparams.kv_unified = self.config.kv_unified
        cparams.offload_kqv = self.config.offload_kqv
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise RuntimeFailure(
                f"llama.cpp could not create a context of {n_ctx} tokens "
                f"({self.last_log()}); try a smaller --ctx or fewer --gpu-layers"
            )
        # What llama.cpp did with --gpu-layers, from its own log of this load.
        self.placement: Placement = PLACEMENT_LOG.placement(
            self.config.gpu_layers, bool(cparams.offload_kqv), devices()
        )
        self.n_ctx = int(ll.llama_n_ctx(self._ctx))
        self.n_batch = int(ll.llama_n_batch(self._ctx))
        ctx = self._ctx
        self.threads.attach(lambda n: ll.llama_set_n_threads(ctx, n, n))
        self._tick = self.threads.tick  # before each llama_decode: the count follows the load
        # What else shapes the bytes of the KV state (the prefix cache's key).
        self.kv_params = {
            "n_ubatch": int(ll.llama_n_ubatch(self._ctx)),
            "flash_attn": int(cparams.flash_attn_type),
            "type_k": int(cparams.type_k),
            "type_v": int(cparams.type_v),
        }
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        self.bos_id = int(ll.llama_vocab_bos(self.vocab))
        self.eos_id = int(ll.llama_vocab_eos(self.vocab))
        self._memory = ll.llama_get_memory(self._ctx)
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        self._token_buf = (ll.llama_token * self.n_batch)()
        self._one = (ll.llama_token * 1)()
        self._one_batch = ll.llama_batch_get_one(self._one, 1)  # step()'s batch: _one is rewritten in place
        self._batch: Any = None  # llama_batch (a ctypes struct) for decode_all, allocated on first use
        self._batch_cap = 0
        self.kv_tokens: list[int] = []  # exactly what the KV cache holds, position by position
        self.load_ms = (time.perf_counter() - t0) * 1000

    # -- facts -------------------------------------------------------------------------------
    @property
    def n_threads(self) -> int:
        """The CPU threads llama.cpp computes with now (--threads, or chosen from the load)."""
        return self.threads.n

    def last_log(self) -> str:
        lines = [line for line in LOG_LINES if line.strip()]
        return lines[-1].strip() if lines else "no detail from llama.cpp"

    @property
    def chat_template(self) -> str | None:
        ptr = self.ll.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8") if ptr else None

    @property
    def arch(self) -> str | None:
        """general.architecture, as llama.cpp read it."""
        buf = ctypes.create_string_buffer(128)
        n = self.ll.llama_model_meta_val_str(self._model, b"general.architecture", buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def has_token(self, text: str) -> bool:
        """Whether `text` is one token of the vocabulary (as a template's markup would be parsed)."""
        ids = self.tokenize(text, parse_special=True)
        return len(ids) == 1 and self.piece(ids[0], special=True) == text.encode("utf-8")

    @property
    def n_params(self) -> int:
        return int(self.ll.llama_model_n_params(self._model))

    @property
    def model_size(self) -> int:
        return int(self.ll.llama_model_size(self._model))

    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.ll.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    # -- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: str, *, parse_special: bool = False, add_special: bool = False) -> list[int]:
        """Text -> ids. parse_special=False keeps `<|im_end|>` typed by a user as plain text."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (self.ll.llama_token * cap)()
        n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # cannot happen with cap >= bytes + specials, but never trust a size blindly
            cap = -n
            buf = (self.ll.llama_token * cap)()
            n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (may be part of a UTF-8 character); cached, it is on the hot path."""
        if token < 0:  # a missing special token (an encoder has no eos): llama.cpp would abort on it
            return b""
        cached = self._piece_cache.get(token) if not special else None
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        data = buf.raw[:n]
        if not special:
            self._piece_cache[token] = data
        return data

    def is_eog(self, token: int) -> bool:
        hit = self._eog_cache.get(token)
        if hit is None:
            hit = self._eog_cache[token] = bool(self.ll.llama_vocab_is_eog(self.vocab, token))
        return hit

    # -- KV cache ----------------------------------------------------------------------------
    def keep_prefix(self, n_keep: int) -> int:
        """Drop every cached position from n_keep on; return how many positions are kept."""
        n_keep = max(0, min(n_keep, len(self.kv_tokens)))
        if n_keep == len(self.kv_tokens):
            return n_keep
        if not self.ll.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
            # Some memory types (recurrent) cannot cut a sequence; start over.
            self.clear()
            return 0
        del self.kv_tokens[n_keep:]
        return n_keep

    def clear(self) -> None:
        self.ll.llama_memory_clear(self._memory, True)
        self.kv_tokens.clear()

    def state_bytes(self, seq: int = 0) -> bytearray:
        """The KV state of sequence `seq` (for 0, what `kv_tokens` says it holds), as llama.cpp
        serializes it."""
        ll = self.ll
        ll.llama_synchronize(self._ctx)
        size = int(ll.llama_state_seq_get_size(self._ctx, seq))
        data = bytearray(size)
        written = int(
            ll.llama_state_seq_get_data(self._ctx, (ctypes.c_uint8 * size).from_buffer(data), size, seq)
        )
        if written != size:
            raise RuntimeFailure(
                f"llama.cpp wrote {written} of {size} bytes of the KV state ({self.last_log()})"
            )
        return data

    def state_bound(self) -> int:
        """Bytes that no KV state of this context can exceed: n_ctx cells of every layer's K and V at
        4 bytes an element (the widest KV type), as if no head were shared, plus cell metadata; a
        recurrent model's state besides. Generous by design: a prefix-cache entry declaring more is
        not one this context wrote, and is refused before it is read."""
        ll, model = self.ll, self._model
        n_layer, n_embd = int(ll.llama_model_n_layer(model)), int(ll.llama_model_n_embd(model))
        n_head = max(1, int(ll.llama_model_n_head(model)))
        width = max(n_embd, *(self._meta_int(f"attention.{k}_length") * n_head for k in ("key", "value")))
        recurrent = ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model)
        return self.n_ctx * (n_layer * 2 * width * 4 + 64) + recurrent * n_layer * n_embd * 4096 + 2**24

    def _meta_int(self, suffix: str) -> int:
        """`<architecture>.<suffix>` from the GGUF's metadata as an int (0 when absent)."""
        buf = ctypes.create_string_buffer(256)
        if self.ll.llama_model_meta_val_str(self._model, b"general.architecture", buf, len(buf)) < 0:
            return 0
        key = f"{buf.value.decode('utf-8', 'replace')}.{suffix}".encode()
        if self.ll.llama_model_meta_val_str(self._model, key, buf, len(buf)) < 0:
            return 0
        text = buf.value.decode("ascii", "replace")
        return int(text) if text.isdigit() else 0

    def load_state(self, data: bytes | bytearray | memoryview, tokens: list[int]) -> bool:
        """Replace the KV cache with a state from `state_bytes` that holds `tokens`.

        False when llama.cpp refuses it: the runtime is then cleared (empty and usable), so the
        caller prefills as if nothing had been cached.
        """
        self.clear()
        if len(tokens) > self.n_ctx:
            return False
        if not self.set_seq_state(data, 0):
            self.clear()
            return False
        self.kv_tokens[:] = tokens
        return True

    def set_seq_state(self, data: bytes | bytearray | memoryview, seq: int) -> bool:
        """Read a state from `state_bytes` into the empty cells of sequence `seq`; False when llama.cpp
        refuses it (the caller then empties those cells)."""
        view = memoryview(data)
        if not len(view):
            return False
        # Without a copy when the bytes are writable (a bytearray, a view of one), as a loaded entry's are.
        buf = (
            (ctypes.c_uint8 * len(view)).from_buffer(view)
            if not view.readonly
            else (ctypes.c_uint8 * len(view)).from_buffer_copy(view)
        )
        return int(self.ll.llama_state_seq_set_data(self._ctx, buf, len(view), seq)) == len(view)

    # -- compute -----------------------------------------------------------------------------
    def prefill(self, tokens: list[int]) -> None:
        """Feed tokens in n_batch chunks; logits are kept for the last one only."""
        if len(self.kv_tokens) + len(tokens) > self.n_ctx:
            raise RuntimeFailure(
                f"{len(self.kv_tokens) + len(tokens)} tokens do not fit the "
                f"{self.n_ctx}-token context; raise --ctx"
            )
        ll, buf = self.ll, self._token_buf
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            buf[: len(chunk)] = chunk
            self._tick()
            rc = ll.llama_decode(self._ctx, ll.llama_batch_get_one(buf, len(chunk)))
            if rc != 0:
                raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.last_log()})")
            self.kv_tokens.extend(chunk)

    def step(self, token: int) -> None:
        """Decode one token (the decode loop's forward pass)."""
        self._one[0] = token
        self._tick()
        rc = self.ll.llama_decode(self._ctx, self._one_batch)
        if rc != 0:
            raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.last_log()})")
        self.kv_tokens.append(token)

    @property
    def can_trim(self) -> bool:
        """Whether the KV cache can drop its last positions (recurrent state cannot be cut back)."""
        ll = self.ll
        return not (ll.llama_model_is_recurrent(self._model) or ll.llama_model_is_hybrid(self._model))

    def decode_all(self, tokens: list[int]) -> None:
        """Decode tokens in one batch with logits for every position (batch index i = tokens[i]);
        speculative verification reads them with the sampler's `sample(i)`."""
        ll, n = self.ll, len(tokens)
        if n > self.n_batch or len(self.kv_tokens) + n > self.n_ctx:
            raise RuntimeFailure(
                f"a batch of {n} tokens does not fit at position {len(self.kv_tokens)}; "
                "raise --ctx or draft fewer tokens"
            )
        if n > self._batch_cap:
            if self._batch is not None:
                ll.llama_batch_free(self._batch)
            self._batch, self._batch_cap = ll.llama_batch_init(n, 0, 1), n
        batch, start = self._batch, len(self.kv_tokens)
        batch.n_tokens = n
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        self._tick()
        rc = ll.llama_decode(self._ctx, batch)
        if rc != 0:
            raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.last_log()})")
        self.kv_tokens.extend(tokens)

    def synchronize(self) -> None:
        self.ll.llama_synchronize(self._ctx)

    @property
    def ctx_ptr(self):
        return self._ctx

    @property
    def model_ptr(self):
        """The weights, for a second context on them (engine/local/embed.py)."""
        return self._model

    def close(self) -> None:
        """Stage ⑦ when nothing follows: free the context (and its KV cache) and the weights."""
        free_context(self.ll, self._ctx, self._batch)
        self._batch = self._ctx = None
        if self._model:
            self.ll.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
