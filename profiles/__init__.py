"""The server profiles shipped with vprof (YAML package data, read by ``vprof.registry``)."""
