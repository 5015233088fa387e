"""vprof's embedded tiny Llama model: real vLLM serves it on a CPU with no download.

The folder holds a ``config.json`` for ``LlamaForCausalLM``, a byte-level BPE tokenizer trained
deterministically on a generated corpus, a chat template and a generation config. It holds no
weights: serve it with ``--load-format dummy --dtype float32``; dummy loading makes vLLM
initialise random weights from the config, and float32 avoids a bfloat16 kernel that crashed
here (see ``TINY_MODEL_DTYPE``). Random weights emit random tokens, so load tests fix output
lengths with ``ignore_eos`` (and ``min_tokens``) rather than relying on the model to stop.
"""

from vprof.tinymodel.build import (
    TINY_MAX_POSITIONS,
    TINY_MODEL_DTYPE,
    TINY_MODEL_NAME,
    TINY_MODEL_VERSION,
    ensure_tiny_model,
    is_tiny_model_dir,
    tiny_model_dir,
)

__all__ = [
    "TINY_MAX_POSITIONS",
    "TINY_MODEL_DTYPE",
    "TINY_MODEL_NAME",
    "TINY_MODEL_VERSION",
    "ensure_tiny_model",
    "is_tiny_model_dir",
    "tiny_model_dir",
]
