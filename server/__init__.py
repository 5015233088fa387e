"""Server lifecycle: adapt a profile to this host, run vLLM as a child, read its log and metrics.

Modules: ``host`` (which vLLM is installed, adapting profiles to it), ``process``
(``ServerProcess``), ``logparse`` (effective settings and errors from the log, pure) and
``metrics`` (Prometheus ``/metrics`` scraping).
"""
