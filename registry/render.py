"""Profile → launch command, as an argv, a shell line, a ``docker run`` line or Kubernetes YAML.

All pure functions of the profile. The argv is what vprof executes (never through a shell);
the other forms are for people to paste or apply.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml

from vprof.registry.profile import Profile
from vprof.registry.vllm_args import flag_table

DOCKER_IMAGE = "vllm/vllm-openai:latest"
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
_MODULES = {
    "openai-module": "vllm.entrypoints.openai.api_server",
    "api-server": "vllm.entrypoints.api_server",
}
# Containers must listen on all interfaces; vLLM's default host already does.
_NOT_IN_CONTAINERS = ("host",)


def _value_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def flag_tokens(key: str, value: Any) -> list[str]:
    """argv tokens for one engine argument (``True`` → ``--flag``, ``False`` → ``--no-flag``)."""
    spec = flag_table().lookup(key)
    flag = f"--{key}"
    if isinstance(value, bool):
        if value:
            return [flag]
        # store_true flags have no --no- form: leaving them out is how to say False
        return [f"--no-{key}"] if spec is None or spec.negatable else []
    if isinstance(value, list) and spec is not None and spec.is_list:
        if spec.append:
            return [token for item in value for token in (flag, _value_text(item))]
        return [flag, *(_value_text(item) for item in value)]
    return [flag, _value_text(value)]


def _launcher(profile: Profile, python: str) -> list[str]:
    """The program part of the argv, up to and including the model."""
    if profile.entrypoint == "serve":
        return ["vllm", "serve", profile.model]
    module = _MODULES.get(profile.entrypoint)
    if module is None:
        from vprof.common.errors import ProfileError

        raise ProfileError(
            f"unknown entrypoint {profile.entrypoint!r}",
            key="entrypoint",
            hint="choose serve, openai-module or api-server",
        )
    return [python, "-m", module, "--model", profile.model]


def _flags(profile: Profile, skip: tuple[str, ...] = ()) -> list[str]:
    argv: list[str] = []
    for key, value in profile.engine_args.items():
        if key not in skip and value is not None:
            argv += flag_tokens(key, value)
    return argv


def render(profile: Profile, *, python: str = "python3") -> list[str]:
    """The argv that starts ``profile``'s server (``python`` runs the module entrypoints)."""
    return _launcher(profile, python) + _flags(profile)


def render_shell(profile: Profile, *, python: str = "python3") -> str:
    """One shell line: ``NAME=value … <argv>``, every token quoted safely."""
    env = [f"{name}={shlex.quote(value)}" for name, value in profile.env.items()]
    return " ".join([*env, shlex.join(render(profile, python=python))])


def render_docker(profile: Profile, *, image: str = DOCKER_IMAGE, gpus: str = "all") -> str:
    """A ``docker run`` line for vLLM's official image (GPU, host IPC, HF cache mounted)."""
    port = profile.port
    head = ["docker", "run", "--rm", "--gpus", gpus, "--ipc=host", "-p", f"{port}:{port}"]
    for name, value in profile.env.items():
        head += ["-e", f"{name}={value}"]
    head += ["-e", "HF_TOKEN"]  # passed through from the caller's environment when set
    if profile.entrypoint == "api-server":
        # the image's entrypoint is the OpenAI server; the legacy server needs python itself
        head += ["--entrypoint", "python3"]
        tail = ["-m", _MODULES["api-server"], "--model", profile.model]
    else:
        tail = ["--model", profile.model]
    tail += _flags(profile, skip=_NOT_IN_CONTAINERS)
    # double quotes so the shell expands $HOME; every other token is single-quoted as needed
    volume = f'-v "$HOME/.cache/huggingface:{HF_CACHE_IN_CONTAINER}"'
    return " ".join([shlex.join(head), volume, shlex.join([image, *tail])])


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared dicts (the labels) out in full: kubectl users read these files."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_name(profile_name: str) -> str:
    """A DNS-1123 name for the profile's Kubernetes objects (``vllm-chunked-256``)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", profile_name.lower()).strip("-")
    return f"vllm-{cleaned}"[:63].rstrip("-")


def _gpus_per_replica(profile: Profile) -> int:
    size = 1
    for key in ("tensor-parallel-size", "pipeline-parallel-size"):
        value = profile.engine_args.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            size *= value
    return size


def render_k8s(profile: Profile, *, replicas: int = 1, image: str = DOCKER_IMAGE) -> str:
    """A Deployment (GPU limits, /health probes, the argv as command/args) and a Service."""
    name = k8s_name(profile.name)
    port = profile.port
    argv = _launcher(profile, "python3") + _flags(profile, skip=_NOT_IN_CONTAINERS)
    split = 2 if profile.entrypoint == "serve" else 3  # "vllm serve" | "python3 -m module"
    gpus = _gpus_per_replica(profile)
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}
    env = [{"name": k, "value": v} for k, v in profile.env.items()]
    env.append(
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}},
        }
    )

    def probe(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": period_s,
            "failureThreshold": failures,
        }

    container = {
        "name": "vllm",
        "image": image,
        "command": argv[:split],
        "args": argv[split:],
        "env": env,
        "ports": [{"name": "http", "containerPort": port}],
        "resources": {
            "limits": {"nvidia.com/gpu": gpus},
            "requests": {"nvidia.com/gpu": gpus},
        },
        # loading weights and compiling can take many minutes: the startup probe allows 30
        "startupProbe": probe(10, 180),
        "readinessProbe": probe(5, 3),
        "livenessProbe": probe(10, 3),
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "hf-cache", "mountPath": HF_CACHE_IN_CONTAINER},
        ],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "vprof/profile": profile.name,
                "vprof/identity": profile.identity(),
            },
        },
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        # vLLM's workers share tensors through /dev/shm (docker's --ipc=host)
                        {"name": "shm", "emptyDir": {"medium": "Memory"}},
                        {"name": "hf-cache", "emptyDir": {}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        },
    }
    header = (
        f"# vprof profile {profile.name}: {profile.description}\n"
        f"# {replicas} replica(s) × {gpus} GPU(s); replace the hf-cache emptyDir with a "
        "PersistentVolumeClaim to keep weights across restarts.\n"
    )
    body = yaml.dump_all([deployment, service], Dumper=_NoAliasDumper, sort_keys=False)
    return header + body
