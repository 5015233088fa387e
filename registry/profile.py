"""The Profile: a named vLLM server configuration, resolved (``extends`` already applied)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vprof.common.errors import ProfileError
from vprof.registry.checks import ENV_NAME_HINT, env_name_problem, text_problem
from vprof.registry.render import render
from vprof.registry.vllm_args import flag_table

ENTRYPOINTS = ("serve", "openai-module", "api-server")
DEFAULT_PORT = 8000
DEFAULT_HOST = "127.0.0.1"
PARALLEL_ARGS = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")


def gpus_per_server(engine_args: Mapping[str, Any]) -> tuple[int, str]:
    """GPUs one server of these engine arguments uses (tensor × pipeline × data parallel: a
    `vllm serve` with data parallelism runs every rank in one server), and how that is known.

    Flags may be spelled as vLLM's aliases (``tp``); a size that is not a whole number from 1
    raises :class:`ProfileError` naming the flag.
    """
    aliases = flag_table().aliases
    canonical = {aliases.get(flag_key(k), flag_key(k)): v for k, v in engine_args.items()}
    gpus, parts = 1, []
    for key in PARALLEL_ARGS:
        value = canonical.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise ProfileError(f"{value!r} is not a parallel size (a whole number from 1)", key=key)
        gpus *= value
        parts.append(f"{key} {value}")
    return gpus, (" × ".join(parts) if parts else "no parallelism set: 1 GPU")


def flag_key(name: str) -> str:
    """A vLLM flag name as profiles spell it: no leading dashes, dashes not underscores."""
    return str(name).lstrip("-").replace("_", "-")


@dataclass(frozen=True)
class Profile:
    """A resolved server profile.

    ``engine_args`` holds vLLM flag names without dashes (``{"max-model-len": 4096,
    "enable-chunked-prefill": True}``); ``origins`` maps each setting (``model``,
    ``entrypoint``, ``description``, a flag name, or ``env.NAME``) to the ``path:line`` that set
    it, after ``extends`` has been applied, or to the command-line option that overrode it.
    """

    name: str
    description: str
    model: str
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    entrypoint: str = "serve"
    source: str = ""
    origins: Mapping[str, str] = field(default_factory=dict)
    extends: str | None = None

    @property
    def port(self) -> int:
        """The port the server listens on (vLLM's default 8000 unless the profile sets one)."""
        return int(self.engine_args.get("port") or DEFAULT_PORT)

    @property
    def host(self) -> str:
        """The host to reach the server on (loopback unless the profile sets one)."""
        return str(self.engine_args.get("host") or DEFAULT_HOST)

    def gpus_per_server(self) -> tuple[int, str]:
        """GPUs one server of this profile uses, and how that is known (see
        :func:`gpus_per_server`)."""
        return gpus_per_server(self.engine_args)

    def with_overrides(
        self,
        *,
        model: str | None = None,
        port: int | None = None,
        entrypoint: str | None = None,
        set_args: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Profile:
        """A copy with command-line overrides applied; a ``set_args`` value of None drops a flag.

        Origins of overridden values name the option (``--model``, ``--port``, ``--set``, …).
        Environment names and values are checked here (``ProfileError`` naming ``--env``);
        validate the result again for the rest.
        """
        for key, value in (env or {}).items():
            problem = env_name_problem(key)
            if problem:
                raise ProfileError(problem, key="--env", hint=ENV_NAME_HINT)
            problem = text_problem(str(value))
            if problem:
                raise ProfileError(f"the value of {key} {problem}", key="--env")
        engine_args = dict(self.engine_args)
        env_out = dict(self.env)
        origins = dict(self.origins)
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model
            origins["model"] = "--model"
        if entrypoint is not None:
            changes["entrypoint"] = entrypoint
            origins["entrypoint"] = "--entrypoint"
        for key, value in (set_args or {}).items():
            key = flag_key(key)
            if value is None:
                engine_args.pop(key, None)
                origins.pop(key, None)
            else:
                engine_args[key] = value
                origins[key] = "--set"
        if port is not None:
            engine_args["port"] = int(port)
            origins["port"] = "--port"
        for key, value in (env or {}).items():
            env_out[key] = str(value)
            origins[f"env.{key}"] = "--env"
        return replace(self, engine_args=engine_args, env=env_out, origins=origins, **changes)

    def identity(self) -> str:
        """``name-<hash>``: the name plus a hash of the rendered argv and environment.

        Two runs with the same identity ran the same server command. The argv is rendered with
        the default ``python3``, so the interpreter's path does not change the identity.
        """
        payload = json.dumps([render(self), sorted(self.env.items())], separators=(",", ":"))
        return f"{self.name}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON/YAML (run directories, ``--format json``)."""
        return {
            "name": self.name,
            "description": self.description,
            "extends": self.extends,
            "model": self.model,
            "entrypoint": self.entrypoint,
            "engine_args": dict(self.engine_args),
            "env": dict(self.env),
            "source": self.source,
            "origins": dict(self.origins),
        }
