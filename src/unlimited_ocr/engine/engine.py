"""The OCR engine: encode pages once, prefill every page of a document in one pass, then R-SWA decode.

    from unlimited_ocr.model.loading import load_model
    from unlimited_ocr.engine import OcrEngine, DecodeOptions
    engine = OcrEngine(load_model("/path/to/checkpoint"))
    [result] = engine.generate([[page1, page2, page3]], DecodeOptions(max_new_tokens=4096))
    print(result.pages)  # one markdown string per page

Data flow (one way): pages -> pixels -> visual features -> prefill (reference written into the static R-SWA cache)
-> decode loop (one token per row per step, ring slots written in place) -> token ids -> text -> pages.

Modes on the same weights:
* ``attention="rswa"`` (default): the cache holds L_m + n entries forever;
* ``attention="full"``: the growing full-attention cache (what DeepSeek-OCR does), for comparison;
* ``mode="per-page"`` in :meth:`OcrEngine.parse`: a separate decode per page (the loop the paper argues against);
* ``reference_pages=K`` in :meth:`OcrEngine.parse`: one pass with only K pages in the reference at a time, sliding
  over the document as the model moves on (engine/sliding.py): the cache is bounded in pages too.

The decode step calls transformers' own modules (embedding, rotary, decoder layers, norm, head) with our cache and
our mask; nothing of the model is re-implemented.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from PIL import Image

from ..model.experts import one_token_kernel
from ..model.int8 import vision_dtype
from ..model.loading import LoadedModel
from ..model.preprocess import PagePixels, preprocess_page
from ..model.prompt import build_input_ids
from ..rswa.cache import RSWACache
from ..rswa.masks import rswa_mask, to_additive
from .norepeat import WindowedNoRepeat
from .pages import split_pages
from .rows import DecodeRow, no_repeat_window
from .sliding import SlidingReference

logger = logging.getLogger(__name__)

# on_token(row, token_id, page_number): called after every decode step for every row still running.
TokenCallback = Callable[[int, int, int], None]


@dataclass
class DecodeOptions:
    """Generation settings (greedy decoding)."""

    max_new_tokens: int = 4096
    no_repeat_ngram_size: int | None = 35  # the paper's loop guard; None disables it
    no_repeat_window: int | None = None  # None: 128 for one page, 1024 for several (the paper's values)
    ignore_eos: bool = False  # benchmarks: always decode max_new_tokens
    record_step_times: bool = False  # benchmarks: keep the clock of every step (a list that grows with the output)
    prompt: str | None = None  # None: "document parsing." for one page, "Multi page parsing." for several
    image_mode: str = "base"  # "base" or "gundam" (gundam only for single pages)
    # A document of N pages cannot have page N+1. Pages begun = "<PAGE>" markers written, + 1 if the output began
    # with text rather than a marker (the official multi-page format writes one before each page; single pages have
    # none). A marker that would begin page N+1 means the model has finished: it ends the row like EOS instead of
    # starting to transcribe a page that does not exist. transformers' generate() has no such rule.
    end_at_extra_page: bool = True
    # The other half of the same fact: a document of N > 1 pages is not finished before page N has begun. An EOS
    # chosen earlier becomes "<PAGE>" (the model moves on to the next page instead of dropping the rest of the
    # document; measured on the bundled model: one 5/10/20-page document in four otherwise ended a page or more early).
    continue_to_last_page: bool = True


@dataclass
class DocumentResult:
    """What one document's decode produced."""

    token_ids: list[int]
    text: str  # decoded, special tokens kept except BOS/EOS/pad (so <PAGE> and <|det|> survive)
    pages: list[str]  # text split on <PAGE>
    num_pages: int
    reference_length: int  # L_m: prompt positions kept in the cache
    stop_reason: str  # "eos" or "length"
    kv_bytes: int  # bytes held by the KV cache at the end of the decode
    kv_entries: int  # key/value entries of this row at the end (L_m + n for R-SWA)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    step_times: list[float] = field(default_factory=list, repr=False)  # wall clock at each decode step

    @property
    def first_step_seconds(self) -> float | None:
        """Latency of the first decode forward (step 0 reuses the prefill logits); includes a torch.compile."""
        return self.step_times[1] - self.step_times[0] if len(self.step_times) > 1 else None


BATCHED_MM_MAX_BYTES = 8 << 20  # per token and layer: above this, gathering the chosen experts' weights costs more


def decode_experts_kernel(config, checkpoint_kernel: str | None) -> str | None:
    """Which MoE kernel a decode step uses. transformers' ``batched_mm`` copies the chosen experts' weights for every
    token (one bmm instead of a Python loop over experts): ~15% faster per step for small experts (the tiny bench
    model: 2 x 3 matrices of 128 x 256, 0.8 MB per token and layer), but at the official shapes (6 experts x 3
    matrices of 896 x 1280, 83 MB per token and layer, ~1 GB per token) the copies made our step 0.36x
    transformers' ``generate()`` (3.6 vs 10.2 tok/s, `bench decode --preset official --device cpu`, 2 threads): there
    the checkpoint's kernel, which reads each expert's weights in place, is kept. int8 experts (model/int8.py) read
    in place already, and so do int4 ones (model/int4.py)."""
    if checkpoint_kernel in ("int8", "int4"):
        return checkpoint_kernel
    top_k = getattr(config, "num_experts_per_tok", 0) or 0
    matrices = 3 * (getattr(config, "moe_intermediate_size", 0) or 0) * config.hidden_size
    gathered = top_k * matrices * 4  # float32 bytes copied per token and layer
    return "batched_mm" if gathered <= BATCHED_MM_MAX_BYTES else checkpoint_kernel


class LazyFeatures:
    """A document's visual features, encoded when first asked for, a chunk of pages at a time, in page order.

    For a sliding reference: pages are asked for in increasing order as they enter the reference, so features of
    pages behind the one asked for are dropped and at most one chunk ahead is kept."""

    def __init__(self, engine: OcrEngine, images: Sequence[Image.Image]):
        self.engine = engine
        self.images = images
        self.encoded: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self.images):
            raise IndexError(index)
        if index not in self.encoded:
            stop = min(index + self.engine.encode_batch, len(self.images))
            chunk = self.engine.encode_images([self.images[i] for i in range(index, stop)])
            self.encoded.update(zip(range(index, stop), chunk))
        for behind in [key for key in self.encoded if key < index]:
            del self.encoded[behind]
        return self.encoded[index]


# compile="auto": a decode that has already produced AUTO_COMPILE_AFTER_STEPS tokens and is expected to run
# AUTO_COMPILE_MIN_REMAINING more (its tokens per page so far, times the pages still to read) switches to the
# compiled R-SWA step. Measured on this project's 2-core CPU (bench decode --pages 10 --tokens 8192, tiny bench
# model, one thread, 2026-12-05, with the one-token experts kernel of model/experts.py): 251-327 tok/s eager,
# 474-484 compiled, a compile of ~12 s cold (2.7 s from inductor's cache), so a compile pays after ~10,000 more
# tokens. Estimated from the output so far, not from the budget: budgets overestimate (2,048 per page by default;
# the bundled model writes ~50 per card), and a short output must never pay a compile.
AUTO_COMPILE_AFTER_STEPS = 4_096
AUTO_COMPILE_MIN_REMAINING = 12_288


def expected_remaining_steps(rows: Sequence[DecodeRow], budget_left: int) -> int:
    """Steps a decode is still likely to run: each running row's tokens per page so far times the pages it has
    not begun (one page: nothing beyond it is expected), at most the budget left."""
    expected = 0
    for row in rows:
        begun = row.pages.begun
        if row.running and begun:
            expected = max(expected, len(row.tokens) * (row.num_pages - begun) // begun)
    return min(expected, budget_left)


def compiler_available() -> bool:
    """torch.compile's CPU backend builds C++ kernels: a C++ compiler must be installed ($CXX, g++, c++, clang++)."""
    return any(shutil.which(name) for name in (os.environ.get("CXX"), "g++", "c++", "clang++") if name)


class OcrEngine:
    """Prefill + static-cache decode over a loaded UnlimitedOcr checkpoint."""

    def __init__(self, loaded: LoadedModel, attention: str | None = None, window: int | None = None,
                 encode_batch: int = 4, compile: bool | str = False, compile_mode: str | None = None):
        if attention not in (None, "rswa", "full"):
            raise ValueError(f"attention must be 'rswa' or 'full', not {attention!r}")
        self.loaded = loaded
        self.model = loaded.model
        self.language_model = loaded.model.model.language_model
        self.attention = attention or loaded.trained_attention
        self.window = window or loaded.window
        self.encode_batch = encode_batch  # pages per vision-tower call (bounds activation memory)
        self.additive_masks = self.model.config._attn_implementation == "eager"
        self.prefill_experts = getattr(self.language_model.config, "_experts_implementation", None)
        self.decode_experts = decode_experts_kernel(self.language_model.config, self.prefill_experts)
        # The eager step on a CPU: k matrix-vector products per MoE layer when the batch is one row, the kernel above
        # for more (model/experts.py; 4.5x faster MoE layers on the tiny model). Not on CUDA (reading the router's
        # choice back would sync every layer), not for int8/int4 (their kernels have their own one-token path), and
        # not in a compiled step (its .tolist() breaks the graph: the compiled step keeps decode_experts).
        self.eager_decode_experts = self.decode_experts
        if loaded.device.type == "cpu" and self.decode_experts not in ("int8", "int4"):
            self.eager_decode_experts = one_token_kernel(self.decode_experts)
        if compile not in (False, True, "auto"):
            raise ValueError(f"compile must be True, False or 'auto', not {compile!r}")
        # "auto": the compiled step once a decode proves long enough to repay the compile (AUTO_COMPILE_AFTER_STEPS),
        # where it was measured to pay (_auto_compile_pays); a compile that fails falls back to the eager step.
        self.compile = compile if self.attention == "rswa" else False
        self.compile_mode = compile_mode
        self._compiled_forward = None
        self._compile_failed = False
        self._step_forward = self._compiled() if self.compile is True else self._forward_one

    def _compiled(self):
        """The compiled step, built once. Static shapes: the ring keeps the buffer size fixed, so one graph serves
        every step. compile_mode "reduce-overhead" adds CUDA graphs on a GPU (one replay per step instead of
        hundreds of kernel launches); the cache's buffers keep their addresses, so one graph stays valid."""
        if self._compiled_forward is None:
            self._compiled_forward = torch.compile(self._forward_one, dynamic=False, mode=self.compile_mode)
        return self._compiled_forward

    def _auto_compile_pays(self) -> bool:
        """Where the compiled step was measured to pay: on a GPU (CUDA graphs, 6.3x at the official shapes), and on
        a CPU with the graph-friendly batched_mm experts kernel (1.6x the eager step on the tiny model; the in-place
        kernel of the official shapes loops over experts in Python, so its compiled step is unmeasured: eager)."""
        if self.compile != "auto" or self._compile_failed or not compiler_available():
            return False
        return self.loaded.device.type == "cuda" or self.decode_experts == "batched_mm"

    def _step_experts(self) -> str | None:
        """The MoE kernel of the step function in use (see eager_decode_experts)."""
        return self.eager_decode_experts if self._step_forward == self._forward_one else self.decode_experts

    def _use_step_experts(self) -> None:
        self.language_model.config._experts_implementation = self._step_experts()

    def _switch_to_compiled(self) -> None:
        logger.warning("note: a long decode: compiling the decode step (one-off, about 10-50 s on a CPU, then ~1.6x "
                       "faster; --no-compile skips it)")
        self._step_forward = self._compiled()
        self._use_step_experts()

    # -- pages -> visual features ------------------------------------------------------------------------------
    def preprocess(self, image: Image.Image, mode: str = "base") -> PagePixels:
        loaded = self.loaded
        if mode == "gundam" and not loaded.queries_per_tile_side:
            raise ValueError("this checkpoint has no gundam tiles (its image size is not the official 1024)")
        return preprocess_page(image, image_size=loaded.image_size, queries_global=loaded.queries_per_side,
                               mode=mode, tile_size=loaded.tile_size, queries_tile=loaded.queries_per_tile_side)

    @torch.no_grad()
    def encode_images(self, images: Sequence[Image.Image], image_mode: str = "base") -> list[torch.Tensor]:
        """Visual features of page images, a few pages at a time: each chunk's images and pixels are dropped once
        it is encoded, so a document's pages never all live as pixels (``images`` may render pages on demand)."""
        features: list[torch.Tensor] = []
        for start in range(0, len(images), self.encode_batch):
            chunk = [self.preprocess(images[index], image_mode)
                     for index in range(start, min(start + self.encode_batch, len(images)))]
            features.extend(self.encode_pages(chunk))
        return features

    def prepare(self, images: Sequence[Image.Image], options: DecodeOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One document's (input_ids, page features): the one page-preparation path (engine, server, benches).
        Gundam tiles only for a single page (the official multi-page format is base views)."""
        if not len(images):
            raise ValueError("a document needs at least one page")
        features = self.encode_images(images, options.image_mode if len(images) == 1 else "base")
        prompt = options.prompt if options.prompt is not None else self.loaded.default_prompt(len(features))
        ids = build_input_ids(self.loaded.tokenizer, [f.shape[0] for f in features], prompt)
        return ids, features

    @torch.no_grad()
    def encode_pages(self, pixels: Sequence[PagePixels]) -> list[torch.Tensor]:
        """Visual features per page, ``(positions, hidden)`` each, in page order."""
        features: list[torch.Tensor] = []
        device, dtype = self.loaded.device, vision_dtype(self.model)  # bfloat16 in an int8 model (model/int8.py)
        for start in range(0, len(pixels), self.encode_batch):
            chunk = pixels[start : start + self.encode_batch]
            global_views = torch.stack([page.global_view for page in chunk]).to(device, dtype)  # (P, 3, S, S)
            local = [page.tiles for page in chunk if page.tiles is not None]
            kwargs = {}
            if local:
                kwargs = dict(
                    pixel_values_local=torch.cat(local).to(device, dtype),
                    num_local_patches=[0 if page.tiles is None else page.tiles.shape[0] for page in chunk],
                    patches_grid=[list(page.grid) for page in chunk],
                )
            output = self.model.model.get_image_features(global_views, return_dict=True, **kwargs)
            features.extend(output.pooler_output)  # list of (positions, hidden)
        return features

    # -- prefill ---------------------------------------------------------------------------------------------
    def _embed_prompt(self, input_ids: torch.Tensor, page_features: list[torch.Tensor]) -> torch.Tensor:
        embeds = self.language_model.embed_tokens(input_ids.to(self.loaded.device))  # (T, D)
        image_slots = input_ids.to(embeds.device) == self.loaded.image_token_id
        visual = torch.cat(page_features).to(embeds.dtype)
        if int(image_slots.sum()) != visual.shape[0]:
            raise ValueError(f"{int(image_slots.sum())} image slots for {visual.shape[0]} visual features")
        embeds[image_slots] = visual
        return embeds

    def _masks(self, mask: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
        if self.additive_masks and mask is not None:
            mask = to_additive(mask, self.loaded.dtype)
        return {"reference_sliding_attention": mask, "full_attention": mask}

    @torch.no_grad()
    def prefill(self, documents: Sequence[tuple[torch.Tensor, list[torch.Tensor]]]) -> tuple[RSWACache, torch.Tensor]:
        """Write every document's reference into a fresh cache; return it and the ``(B, V)`` next-token logits.

        ``documents`` = [(input_ids (T_b,), page features), ...]; rows are right-padded to the longest.
        """
        device = self.loaded.device
        lengths = [int(ids.shape[0]) for ids, _ in documents]
        longest = max(lengths)
        rows = []
        for ids, features in documents:
            embeds = self._embed_prompt(ids, features)  # (T_b, D)
            pad = embeds.new_zeros((longest - embeds.shape[0], embeds.shape[1]))
            rows.append(torch.cat([embeds, pad]))
        inputs_embeds = torch.stack(rows)  # (B, L_max, D)
        window = self.window if self.attention == "rswa" else None
        cache = RSWACache(len(self.language_model.layers), window=window)
        cache.start(lengths, device=device)
        # The reference is plain causal attention and rows are right-padded, so a valid query never sees padding:
        # SDPA's causal kernel needs no mask, and memory stays linear in L. Only eager attention (tests) is given
        # the dense (B, 1, L, L) mask, which costs L^2 per row (~2.2 GB at 20 pages of 2,353 positions).
        mask = None
        if self.additive_masks:
            mask = rswa_mask(lengths, longest, window=None, valid_lengths=lengths, device=device)  # (B, 1, L, L)
        scheme = self.loaded.positions
        positions = torch.zeros((len(lengths), longest), dtype=torch.long)  # (B, L_max); padding: masked anyway
        for row, (ids, features) in enumerate(documents):
            positions[row, : lengths[row]] = scheme.reference(ids, [f.shape[0] for f in features])
        positions = positions.to(device)
        output = self.language_model(
            inputs_embeds=inputs_embeds, attention_mask=self._masks(mask), position_ids=positions,
            past_key_values=cache, use_cache=True,
        )
        last = torch.tensor(lengths, device=device) - 1
        hidden = output.last_hidden_state[torch.arange(len(lengths), device=device), last]  # (B, D)
        cache.finish_prefill()
        return cache, self.model.lm_head(hidden).float()  # (B, V)

    # -- decode ----------------------------------------------------------------------------------------------
    @contextmanager
    def decode_kernels(self):
        """The MoE kernel of single-token steps (:func:`decode_experts_kernel`); the prefill keeps the checkpoint's
        kernel: gathering weights for thousands of prompt tokens would cost gigabytes."""
        config = self.language_model.config
        previous = getattr(config, "_experts_implementation", None)
        config._experts_implementation = self._step_experts()
        try:
            yield
        finally:
            config._experts_implementation = previous

    @contextmanager
    def prefill_kernels(self):
        """The checkpoint's own MoE kernel again, inside the decode loop, for a forward over many tokens (a page
        written into a sliding reference): see :meth:`decode_kernels`."""
        config = self.language_model.config
        previous = getattr(config, "_experts_implementation", None)
        config._experts_implementation = self.prefill_experts
        try:
            yield
        finally:
            config._experts_implementation = previous

    @torch.no_grad()
    def decode_step(self, cache: RSWACache, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per row: ``tokens``/``positions`` ``(B, 1)`` -> next-token logits ``(B, V)``."""
        cache.advance()
        mask = self._masks(cache.step_mask())
        if self._step_forward == self._forward_one or self.compile is True:
            return self._step_forward(cache, tokens, positions, mask)
        try:
            return self._step_forward(cache, tokens, positions, mask)
        except Exception as error:  # noqa: BLE001 - any compile failure: an unsupported op, a broken toolchain
            # compile="auto" must never cost a document: warn once and decode eagerly from here on. Re-running this
            # step is safe: it writes the same keys and values into the same cache slot.
            logger.warning("note: the compiled decode step failed (%s: %s); decoding without it",
                           type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "")
            self._compile_failed = True
            self._step_forward = self._forward_one
            self._use_step_experts()
            return self._forward_one(cache, tokens, positions, mask)

    def _forward_one(self, cache: RSWACache, tokens: torch.Tensor, positions: torch.Tensor,
                     mask: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.language_model.embed_tokens(tokens)  # (B, 1, D)
        rotary = self.language_model.rotary_emb(hidden, position_ids=positions)
        for layer_index, layer in enumerate(self.language_model.layers):
            hidden = layer(
                hidden, attention_mask=mask[self.language_model.config.layer_types[layer_index]],
                position_embeddings=rotary, position_ids=positions, past_key_values=cache, use_cache=True,
            )
        hidden = self.language_model.norm(hidden)
        return self.model.lm_head(hidden[:, -1]).float()  # (B, V)

    @torch.no_grad()
    def generate(
        self,
        documents: Sequence[Sequence[Image.Image]],
        options: DecodeOptions | None = None,
        on_token: TokenCallback | None = None,
        reference_pages: int | None = None,
    ) -> list[DocumentResult]:
        """One decode pass per batch of documents (each a list of page images).

        ``reference_pages=K``: a document of more than K pages is read in one pass with only K pages in the
        reference at a time (engine/sliding.py); documents are then decoded one after another."""
        options = options or DecodeOptions()
        if reference_pages is not None and any(len(pages) > reference_pages for pages in documents):
            return [self._generate_sliding(pages, options, on_token, reference_pages) for pages in documents]
        return self.generate_prepared([self.prepare(pages, options) for pages in documents], options, on_token)

    @torch.no_grad()
    def generate_prepared(
        self,
        prepared: Sequence[tuple[torch.Tensor, list[torch.Tensor]]],
        options: DecodeOptions,
        on_token: TokenCallback | None = None,
        slider: SlidingReference | None = None,
    ) -> list[DocumentResult]:
        """Decode from (input_ids, page features) pairs; the benchmark calls this to time the decode alone.

        With ``slider`` (one document, engine/sliding.py) ``prepared`` holds the prompt of its first K pages and the
        reference slides over the rest of the book as the model opens pages."""
        loaded = self.loaded
        device = loaded.device
        batch = len(prepared)
        if slider is not None and batch != 1:
            raise ValueError("a sliding reference decodes one document at a time")
        page_counts = [slider.total_pages if slider is not None else len(features) for _, features in prepared]
        start = time.perf_counter()
        cache, logits = self.prefill(prepared)
        prefill_seconds = time.perf_counter() - start
        rows = [self._row(ids, features, pages, options) for (ids, features), pages in zip(prepared, page_counts)]
        if self.compile == "auto":
            self._step_forward = self._forward_one  # until the output proves long (see AUTO_COMPILE_AFTER_STEPS)
        step_times: list[float] = []
        chosen: list[int] = []  # this step's token per row, fed back at the next step
        fed = None
        decode_start = time.perf_counter()
        with self.decode_kernels():
            for step in range(options.max_new_tokens):
                if (step == AUTO_COMPILE_AFTER_STEPS and self._auto_compile_pays()
                        and expected_remaining_steps(rows, options.max_new_tokens - step) >= AUTO_COMPILE_MIN_REMAINING):
                    self._switch_to_compiled()
                if step:  # step 0 reads the prefill's logits
                    for row, token in zip(rows, chosen):
                        row.feed(token)
                    if slider is not None and rows[0].pages.begun:
                        slider.page_opened(self, cache, rows[0].pages.begun - 1)  # before the forward reads on
                    positions = torch.tensor([row.position for row in rows], device=device).view(batch, 1)  # (B, 1)
                    logits = self.decode_step(cache, fed, positions)  # (B, V)
                for index, row in enumerate(rows):
                    row.ban(logits[index])
                if options.ignore_eos:
                    logits[:, loaded.eos_token_id] = float("-inf")
                chosen = logits.argmax(dim=-1).tolist()  # (B,)
                for index, row in enumerate(rows):
                    if row.running:
                        chosen[index] = row.take(chosen[index])  # the page rules may change it, or end the row
                        if row.running and on_token is not None:
                            on_token(index, chosen[index], row.page_being_read)
                if options.record_step_times:
                    step_times.append(time.perf_counter())
                if not any(row.running for row in rows):
                    break
                fed = torch.tensor(chosen, device=device).view(batch, 1)  # (B, 1)
        decode_seconds = time.perf_counter() - decode_start
        kv_bytes, entries = cache.nbytes(), cache.entries().tolist()
        results = []
        for row, (ids, _), entry in zip(rows, prepared, entries):
            text = self.decode_text(row.tokens)
            results.append(DocumentResult(
                token_ids=row.tokens, text=text, pages=split_pages(text, row.num_pages), num_pages=row.num_pages,
                reference_length=int(ids.shape[0]), stop_reason=row.stop_reason, kv_bytes=kv_bytes,
                kv_entries=int(entry), prefill_seconds=prefill_seconds, decode_seconds=decode_seconds,
                step_times=step_times,
            ))
        return results

    def _row(self, ids: torch.Tensor, features: list[torch.Tensor], num_pages: int,
             options: DecodeOptions) -> DecodeRow:
        """A document's decode state: rotary ids continue from its prompt's (model/positions.py)."""
        loaded = self.loaded
        scheme = loaded.positions
        anchor = int(scheme.reference(ids, [f.shape[0] for f in features])[-1])
        guard = None
        if options.no_repeat_ngram_size:
            window = no_repeat_window(len(features), options.no_repeat_window)
            guard = WindowedNoRepeat(options.no_repeat_ngram_size, window, ids.tolist())
        return DecodeRow(num_pages=num_pages, position=anchor, anchor=anchor, scheme=scheme,
                         eos_id=loaded.eos_token_id, page_id=loaded.page_token_id, guard=guard,
                         continue_to_last_page=options.continue_to_last_page,
                         end_at_extra_page=options.end_at_extra_page)

    def _generate_sliding(self, pages: Sequence[Image.Image], options: DecodeOptions,
                          on_token: TokenCallback | None, reference_pages: int) -> DocumentResult:
        if len(pages) <= reference_pages:
            return self.generate([pages], options, on_token)[0]
        # Pages are encoded as they enter the reference (a chunk ahead at most), so a book never lives as pixels
        # or features all at once: memory stays flat in pages.
        features = LazyFeatures(self, pages)
        held = [features[index] for index in range(reference_pages)]
        prompt = options.prompt if options.prompt is not None else self.loaded.default_prompt(len(pages))
        ids = build_input_ids(self.loaded.tokenizer, [f.shape[0] for f in held], prompt)
        slider = SlidingReference(ids, features, reference_pages, self.loaded.positions)
        return self.generate_prepared([(ids, held)], options, on_token, slider=slider)[0]

    def decode_text(self, token_ids: Sequence[int]) -> str:
        tokenizer = self.loaded.tokenizer
        drop = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
        return tokenizer.decode([t for t in token_ids if t not in drop], skip_special_tokens=False)

    # -- documents -------------------------------------------------------------------------------------------
    def parse(self, pages: Sequence[Image.Image], options: DecodeOptions | None = None, mode: str = "one-pass",
              on_token: TokenCallback | None = None, reference_pages: int | None = None) -> DocumentResult:
        """Transcribe one document: all pages in one pass, or (``mode="per-page"``) one decode per page.
        ``reference_pages=K`` (one pass): hold only K pages in the reference at a time (engine/sliding.py).
        A checkpoint with ``reflow_tile`` reads each page as tiles of whole lines, a page's tiles as one batch
        (reflowed.py)."""
        options = options or DecodeOptions()
        if self.loaded.reflow_tile:  # a crop-trained checkpoint: each page read as tiles of whole lines
            from .reflowed import parse_reflowed

            return parse_reflowed(self, pages, options, on_token)
        if mode == "one-pass":
            return self.generate([pages], options, on_token, reference_pages=reference_pages)[0]  # pages: any sequence, read lazily
        if mode != "per-page":
            raise ValueError(f"mode must be 'one-pass' or 'per-page', not {mode!r}")
        parts = []
        for index, page in enumerate(pages):
            def forward(row, token, page_number, index=index):
                if on_token is not None:
                    on_token(0, token, index + 1)
            parts.append(self.generate([[page]], options, forward)[0])
        page_token = "<PAGE>" if len(pages) > 1 else ""
        text = "".join(page_token + part.text for part in parts)
        return DocumentResult(
            token_ids=[t for part in parts for t in part.token_ids], text=text,
            pages=[part.text for part in parts], num_pages=len(pages),
            reference_length=max(part.reference_length for part in parts),
            stop_reason="eos" if all(part.stop_reason == "eos" for part in parts) else "length",
            kv_bytes=max(part.kv_bytes for part in parts), kv_entries=max(part.kv_entries for part in parts),
            prefill_seconds=sum(part.prefill_seconds for part in parts),
            decode_seconds=sum(part.decode_seconds for part in parts),
        )
