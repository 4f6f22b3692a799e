"""``hf:MODEL_ID_OR_PATH``: a causal LM through transformers, with concurrent requests batched.

Many conversations share one local model. A request joins a queue; the queue is drained after a
short window (``window_s``) or as soon as ``max_batch`` requests wait, and the batch runs as ONE
``generate`` call with left padding on the torch thread, so the event loop keeps accepting requests
while the model works. Requests whose sampling settings differ go in separate generate calls.

Each request gets its own ``max_tokens`` (the batch generates up to the largest, each reply is cut
at its own limit) and its own stop strings. Seeds: a batch is seeded from the seeds of its requests,
so a seeded run is repeatable when the same requests meet in the same batches; a request's sample
still depends on its batch companions. Greedy decoding (temperature 0) does not.

A request with ``json_schema`` skips the queue: it is filled slot by slot by the schema-guided
generator (``providers/guided.py``), on the same thread under the same per-model lock.

Weights are loaded once per (model, gguf file, device) and shared by every provider object.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.gateway.providers.base import ProviderKind

T = TypeVar("T")

_LOADED: dict[tuple[str, str | None, str], LoadedModel] = {}
_LOAD_LOCK = threading.Lock()
# Every torch call of local models runs on this one thread. libgomp gives each OS thread that runs
# parallel work its own pool of OpenMP threads; once the pools together outnumber the cores, its
# workers stop spinning between parallel regions and every small matmul waits for a wake-up. Measured
# on 2 cores: generation from a second thread got 1.4 cores instead of 2.0 (a third less tokens/s).
_TORCH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="branchpoint-torch")


def on_torch_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the torch thread and wait for it (directly when already there)."""
    if threading.current_thread().name.startswith("branchpoint-torch"):
        return fn(*args)
    return _TORCH_THREAD.submit(fn, *args).result()


async def to_torch_thread(fn: Callable[..., T], *args: Any) -> T:
    """Await ``fn(*args)`` run on the torch thread (the event loop stays free meanwhile)."""
    return await asyncio.get_running_loop().run_in_executor(_TORCH_THREAD, fn, *args)


# Extra params passed to generate when given (others are ignored: they mean nothing to transformers).
_GENERATE_EXTRA = (
    "repetition_penalty",
    "no_repeat_ngram_size",
    "top_k",
    "min_p",
    "typical_p",
    "min_new_tokens",
)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    device: str
    max_positions: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # one generate at a time per model


def cpu_threads(cores: int | None = None) -> int:
    """Torch threads for CPU generation: ``BRANCHPOINT_TORCH_THREADS``, else all cores but one
    (max 8; all of them on two cores or fewer).

    Leaving a core free matters on bigger machines: the event loop, the store and other
    conversations run beside generation, and OpenMP threads that spin on a busy core slow small
    matmuls by an order of magnitude. With two cores or fewer, generation is nearly all the work
    (the loop mostly waits on it), so it gets every core. The count does not follow the machine's
    load: a float32 matmul's sums depend on how they are split over threads, so a seeded run must
    get the same split every time. On a busy machine set ``BRANCHPOINT_TORCH_THREADS=1`` (the
    embedded model on 2 cores at load 6 made 0.5-0.8 tokens/s with 2 threads, 2.7-3.8 with one).
    """
    value = os.environ.get("BRANCHPOINT_TORCH_THREADS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise UserError(
                f"BRANCHPOINT_TORCH_THREADS={value!r}: expected a whole number"
            ) from None
    cores = cores or os.cpu_count() or 2
    return cores if cores <= 2 else min(8, cores - 1)


def conversion_cache_dir() -> Path:
    base = os.environ.get("BRANCHPOINT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "branchpoint"
    )
    return Path(base) / "converted"


def _converted_path(source: str, gguf_file: str) -> Path:
    """Where the dequantised copy of a GGUF file lives; keyed by the file's path, size and mtime."""
    gguf = Path(source) / gguf_file
    st = gguf.stat()
    tag = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[
        :16
    ]
    return conversion_cache_dir() / f"{gguf.stem}-{tag}"


def _save_converted(model: Any, tokenizer: Any, target: Path) -> None:
    # Dequantising a GGUF takes tens of seconds; a safetensors copy loads in about one.
    # Written to a temporary directory and renamed, so a killed process leaves no half copy.
    import shutil
    import tempfile

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
        # The weights are plain float32 after loading; the GGUF "quantizer" only blocks saving.
        quantizer = getattr(model, "hf_quantizer", None)
        quant_config = getattr(model.config, "quantization_config", None)
        model.hf_quantizer = None
        if quant_config is not None:
            del model.config.quantization_config
        try:
            model.save_pretrained(tmp)
        finally:
            model.hf_quantizer = quantizer
            if quant_config is not None:
                model.config.quantization_config = quant_config
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError):
        shutil.rmtree(locals().get("tmp", target.parent / ".none"), ignore_errors=True)


def load_model(source: str, gguf_file: str | None = None, device: str | None = None) -> LoadedModel:
    """The model and tokenizer for ``source`` (hub id or local dir), loaded once per process."""
    device = device or default_device()
    key = (source, gguf_file, device)
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # Our own progress bars say what is happening; transformers' would interleave with them.
        hf_logging.disable_progress_bar()
        if device == "cpu":
            torch.set_num_threads(cpu_threads())
        load_from, kw = source, ({"gguf_file": gguf_file} if gguf_file else {})
        converted = (
            _converted_path(source, gguf_file) if gguf_file and Path(source).is_dir() else None
        )
        if converted is not None and (converted / "config.json").is_file():
            load_from, kw = str(converted), {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(load_from, **kw)
            # GGUF weights are dequantised to float32; on a GPU half precision is the norm.
            dtype = torch.float32 if device == "cpu" or gguf_file else "auto"
            model = AutoModelForCausalLM.from_pretrained(load_from, dtype=dtype, **kw)
            if converted is not None and load_from == source:
                _save_converted(model, tokenizer, converted)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(
                f"hf:{source}: cannot load the model offline ({first}); give a local path or "
                f"download it first with `huggingface-cli download {source}`"
            ) from None
        model.to(device)
        model.eval()
        tokenizer.padding_side = (
            "left"  # decoder-only: pad on the left so every row ends at its prompt
        )
        tokenizer.truncation_side = "left"  # over-long transcripts lose their oldest tokens
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        loaded = _LOADED[key] = LoadedModel(model, tokenizer, device, max_positions)
        return loaded


@dataclass(eq=False)  # identity: two identical requests are still two callers
class _Request:
    messages: list[Message]
    params: GenParams
    max_new: int
    settings: tuple[tuple[str, Any], ...]  # the generate kwargs that must agree within a batch
    future: asyncio.Future[Completion]


class HFProvider:
    """Serves one local model; ``complete`` awaits a slot in the next batch."""

    def __init__(
        self,
        source: str,
        *,
        gguf_file: str | None = None,
        device: str | None = None,
        defaults: GenParams | None = None,
        max_batch: int = 8,
        window_s: float = 0.02,
        default_max_new_tokens: int = 256,
        max_new_tokens_cap: int | None = None,
    ) -> None:
        self.source = source
        self.gguf_file = gguf_file
        self.device = device
        self.defaults = defaults or GenParams()
        self.max_batch = max_batch
        self.window_s = window_s
        self.default_max_new_tokens = default_max_new_tokens
        # At most this many new tokens per free-text reply, whatever is asked (schema-guided
        # answers are exempt: a JSON cut short is no answer). None: as asked.
        self.max_new_tokens_cap = max_new_tokens_cap
        self.default_concurrency = max(max_batch, 1)
        self.generate_calls = 0
        self.batch_sizes: list[int] = []
        self.guided_calls = 0  # requests with a json_schema, served by providers/guided.py
        self._loaded: LoadedModel | None = None
        self._pending: list[_Request] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: asyncio.Task[None] | None = None
        self._full: asyncio.Event | None = None
        self._load_lock: asyncio.Lock | None = None

    @classmethod
    def for_model(cls, spec_model: str) -> HFProvider:
        """``hf:`` spec -> provider. A path to a ``.gguf`` file loads that file from its directory."""
        path = Path(spec_model).expanduser()
        if path.suffix == ".gguf":
            if not path.is_file():
                raise UserError(f"hf:{spec_model}: no such GGUF file")
            return cls(str(path.parent), gguf_file=path.name)
        return cls(spec_model)

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> LoadedModel:
        """Load the weights now (blocking); later calls reuse them."""
        if self._loaded is None:
            self._loaded = on_torch_thread(load_model, self.source, self.gguf_file, self.device)
        return self._loaded

    async def _ensure_loaded(self) -> LoadedModel:
        if self._loaded is not None:
            return self._loaded
        assert self._load_lock is not None
        async with self._load_lock:
            if self._loaded is None:
                await to_torch_thread(self.load)
        assert self._loaded is not None
        return self._loaded

    # -- queueing ------------------------------------------------------------------------------

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (each asyncio.run in tests): start a fresh queue bound to it.
            self._loop = loop
            self._pending = []
            self._runner = None
            self._full = asyncio.Event()
            self._load_lock = asyncio.Lock()

    def _resolve(self, params: GenParams) -> tuple[GenParams, int, tuple[tuple[str, Any], ...]]:
        # ``extra`` merges key by key (the caller's win), for batches and schema-guided calls alike.
        extra = {**self.defaults.extra, **params.extra}
        merged = self.defaults.merged(
            {**params.model_dump(exclude_none=True, exclude={"extra"}), "extra": extra}
        )
        max_new = int(merged.max_tokens or self.default_max_new_tokens)
        if self.max_new_tokens_cap is not None and not merged.json_schema:
            max_new = min(max_new, self.max_new_tokens_cap)
            merged = merged.model_copy(update={"max_tokens": max_new})
        temperature = merged.temperature if merged.temperature is not None else 1.0
        settings: dict[str, Any] = {"do_sample": temperature > 0}
        if temperature > 0:
            settings["temperature"] = float(temperature)
            if merged.top_p is not None:
                settings["top_p"] = float(merged.top_p)
        for name in _GENERATE_EXTRA:
            if extra.get(name) is not None:
                settings[name] = extra[name]
        return merged, max_new, tuple(sorted(settings.items()))

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        self._bind_loop()
        await self._ensure_loaded()
        merged, max_new, settings = self._resolve(params)
        if merged.json_schema:
            # Schema-guided: filled slot by slot (see providers/guided.py), outside the batch queue.
            return await to_torch_thread(self._guided, messages, merged)
        assert self._loop is not None and self._full is not None
        future: asyncio.Future[Completion] = self._loop.create_future()
        self._pending.append(_Request(messages, merged, max_new, settings, future))
        if len(self._pending) >= self.max_batch:
            self._full.set()
        if self._runner is None or self._runner.done():
            self._runner = self._loop.create_task(self._run())
        return await future

    async def _run(self) -> None:
        assert self._full is not None
        while self._pending:
            if len(self._pending) < self.max_batch:
                self._full.clear()
                try:
                    await asyncio.wait_for(self._full.wait(), self.window_s)
                except TimeoutError:
                    pass
            pending = [r for r in self._pending if not r.future.done()]  # drop cancelled callers
            first = pending[0].settings if pending else None
            batch = [r for r in pending if r.settings == first][: self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in pending if id(r) not in taken]
            if not batch:
                continue
            try:
                results = await to_torch_thread(self._generate, batch)
            except Exception as exc:
                error = ModelError(f"local generation failed: {type(exc).__name__}: {exc}"[:500])
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(error)
                continue
            for r, completion in zip(batch, results):
                if not r.future.done():
                    r.future.set_result(completion)

    # -- generation (worker thread) ------------------------------------------------------------

    def _generate(self, batch: list[_Request]) -> list[Completion]:
        import torch

        lm = self.load()
        tok = lm.tokenizer
        prompts = [
            tok.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in r.messages],
                tokenize=False,
                add_generation_prompt=True,
            )
            for r in batch
        ]
        max_new = max(r.max_new for r in batch)
        enc = tok(
            prompts,
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
            truncation=True,
            max_length=max(16, lm.max_positions - max_new),
        ).to(lm.device)
        settings = _generate_settings(dict(batch[0].settings))
        seeds = [r.params.seed for r in batch if r.params.seed is not None]
        with lm.lock, torch.inference_mode():
            if seeds:
                digest = hashlib.sha256(repr(seeds).encode()).digest()
                torch.manual_seed(int.from_bytes(digest[:8], "little") & 0x7FFFFFFFFFFFFFFF)
            out = lm.model.generate(
                **enc, max_new_tokens=max_new, pad_token_id=tok.pad_token_id, **settings
            )
            self.generate_calls += 1
            self.batch_sizes.append(len(batch))
        prompt_len = enc["input_ids"].shape[1]
        tokens_in = enc["attention_mask"].sum(dim=1).tolist()
        eos_ids = _eos_ids(lm)
        results = []
        for i, r in enumerate(batch):
            ids = out[i, prompt_len:].tolist()
            cut, finish = len(ids), "length"
            for j, t in enumerate(ids):
                if t in eos_ids:
                    cut, finish = j, "stop"
                    break
            if cut > r.max_new:
                cut, finish = r.max_new, "length"
            text = tok.decode(ids[:cut], skip_special_tokens=True)
            for stop in r.params.stop or []:
                at = text.find(stop)
                if stop and at >= 0:
                    text, finish = text[:at], "stop"
            results.append(
                Completion(
                    text=text.strip(),
                    tokens_in=int(tokens_in[i]),
                    tokens_out=cut,
                    cost=0.0,
                    finish_reason=finish,
                    model=self.source,
                )
            )
        return results

    def _guided(self, messages: list[Message], params: GenParams) -> Completion:
        import torch

        from branchpoint.gateway.providers.guided import guided_complete

        lm = self.load()
        try:
            with lm.lock, torch.inference_mode():  # the batch worker takes the same lock
                completion = guided_complete(
                    lm.model,
                    lm.tokenizer,
                    lm.device,
                    lm.max_positions,
                    messages,
                    params,
                    eos_ids=_eos_ids(lm),
                    model_name=self.source,
                )
                self.guided_calls += 1
        except Exception as exc:  # reported like a failed batch
            raise ModelError(
                f"guided generation failed: {type(exc).__name__}: {exc}"[:500]
            ) from exc
        return completion

    async def aclose(self) -> None:
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
        self._runner = None


def _generate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A batch's sampling settings -> ``generate`` kwargs, with our cheaper processors swapped in.

    Temperature / top-k / top-p sampling runs as ``NucleusSampler`` on top of greedy decoding (same
    distribution, a fraction of the cost at batch 8; see providers/sampling.py). Other samplers
    (min_p, typical_p) stay with transformers.
    """
    from transformers import LogitsProcessorList

    from branchpoint.gateway.providers.sampling import NoRepeatNGram, NucleusSampler

    processors: list[Any] = []
    ngram = settings.pop("no_repeat_ngram_size", None)
    if ngram:
        processors.append(NoRepeatNGram(int(ngram)))
    if settings.get("do_sample") and not ({"min_p", "typical_p"} & settings.keys()):
        settings["do_sample"] = False
        processors.append(
            NucleusSampler(
                float(settings.pop("temperature", 1.0)),
                settings.pop("top_p", None),
                settings.pop("top_k", None),
            )
        )
    if processors:
        settings["logits_processor"] = LogitsProcessorList(processors)
    return settings


def _eos_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    for value in (
        lm.tokenizer.eos_token_id,
        getattr(lm.model.generation_config, "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    if lm.tokenizer.pad_token_id is not None:
        ids.add(lm.tokenizer.pad_token_id)
    return ids


def _create(model: str) -> HFProvider:
    return HFProvider.for_model(model)


# Local models share one machine: a few calls in flight fill a batch (a provider object says how
# many: its batch size). One provider per model, since each holds its own weights.
PROVIDER = ProviderKind(
    prefix="hf",
    usage="hf:MODEL_ID_OR_PATH",
    create=_create,
    default_concurrency=8,
    one_per_model=True,
)
