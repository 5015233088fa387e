"""Write ``registry/vllm_args.json`` from the installed vLLM; see ``vprof.registry.gen_vllm_args``.

Usage::

    .venv/bin/python scripts/gen_vllm_args.py            # writes registry/vllm_args.json
    .venv/bin/python scripts/gen_vllm_args.py --check    # exit 1 if the committed file is stale
"""

from __future__ import annotations

import sys

from vprof.registry.gen_vllm_args import main

if __name__ == "__main__":
    sys.exit(main())
