"""Profile → launch command, as an argv, a shell line, a ``docker run`` line or Kubernetes YAML
(the server's, and a load generator's beside it).

All pure functions of the profile. The argv is what vprof executes (never through a shell);
the other forms are for people to paste or apply, and each is safe for any string a profile
can hold: shell and docker lines quote every token (environment names are checked, not
quoted), Kubernetes YAML comes from a safe dumper with ``$`` escaped from the kubelet's
``$(VAR)`` expansion, and a value vLLM's parser would take for an option (a leading ``-``) is
passed as ``--flag=value``. What no command line can carry (NUL, a lone surrogate) raises
``ProfileError`` naming the setting.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any

import yaml

from vprof.common.errors import ProfileError
from vprof.registry.checks import ENV_NAME_HINT, env_name_problem, text_problem
from vprof.registry.vllm_args import flag_table

if TYPE_CHECKING:  # rendered here, and a profile's identity is a hash of its rendering
    from vprof.registry.profile import Profile

DOCKER_IMAGE = "vllm/vllm-openai:latest"
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
_MODULES = {
    "openai-module": "vllm.entrypoints.openai.api_server",
    "api-server": "vllm.entrypoints.api_server",
}
# Containers must listen on all interfaces; vLLM's default host already does.
_NOT_IN_CONTAINERS = ("host",)


# argparse (and vLLM's parser on top of it) takes these for values; any other leading "-" may
# start an option (vLLM's parser even rewrites "-0.5" as a dotted config key)
_NEGATIVE_NUMBER = re.compile(r"-\d+")


def _checked(text: str, key: str) -> str:
    problem = text_problem(text)
    if problem:
        raise ProfileError(problem, key=key)
    return text


def _value_text(value: Any, key: str) -> str:
    if isinstance(value, (dict, list)):
        return _checked(json.dumps(value, separators=(",", ":")), key)
    text = _checked(str(value), key)
    if text == "--":  # argparse drops a "--" value, in either form, before it reaches vLLM
        raise ProfileError("'--' cannot be passed to vLLM as a value", key=key)
    return text


def _looks_like_option(text: str) -> bool:
    return text.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(text)


def flag_tokens(key: str, value: Any) -> list[str]:
    """argv tokens for one engine argument (``True`` → ``--flag``, ``False`` → ``--no-flag``).

    A value starting with ``-`` (other than a negative number) is joined to its flag
    (``--flag=-x``) so vLLM's parser does not read it as an option.
    """
    spec = flag_table().lookup(key)
    flag = f"--{_checked(str(key), key)}"

    def pair(text: str) -> list[str]:
        return [f"{flag}={text}"] if _looks_like_option(text) else [flag, text]

    if isinstance(value, bool):
        if value:
            return [flag]
        # store_true flags have no --no- form: leaving them out is how to say False
        return [f"--no-{key}"] if spec is None or spec.negatable else []
    if isinstance(value, list) and spec is not None and spec.is_list:
        items = [_value_text(item, key) for item in value]
        if spec.append:
            return [token for item in items for token in pair(item)]
        if len(items) == 1:
            return pair(items[0])
        dashed = next((item for item in items if _looks_like_option(item)), None)
        if dashed is not None:
            raise ProfileError(
                f"the list item {dashed!r} starts with '-', so vLLM would read it as an option",
                key=key,
                hint="give that value on its own (a one-item list is written --flag=value)",
            )
        return [flag, *items]
    return pair(_value_text(value, key))


def _model(profile: Profile) -> str:
    model = _checked(profile.model, "model")
    if model.startswith("-"):
        raise ProfileError(
            f"the model {model!r} starts with '-', so vLLM would read it as an option",
            key="model",
            hint="for a local folder write ./" + model,
        )
    return model


def _launcher(profile: Profile, python: str) -> list[str]:
    """The program part of the argv, up to and including the model."""
    if profile.entrypoint == "serve":
        return ["vllm", "serve", _model(profile)]
    module = _MODULES.get(profile.entrypoint)
    if module is None:
        raise ProfileError(
            f"unknown entrypoint {profile.entrypoint!r}",
            key="entrypoint",
            hint="choose serve, openai-module or api-server",
        )
    return [python, "-m", module, "--model", _model(profile)]


def _flags(profile: Profile, skip: tuple[str, ...] = ()) -> list[str]:
    argv: list[str] = []
    for key, value in profile.engine_args.items():
        if key not in skip and value is not None:
            argv += flag_tokens(key, value)
    return argv


def render(profile: Profile, *, python: str = "python3") -> list[str]:
    """The argv that starts ``profile``'s server (``python`` runs the module entrypoints)."""
    return _launcher(profile, python) + _flags(profile)


def _env(profile: Profile) -> list[tuple[str, str]]:
    """The profile's environment, every name and value checked for a command line."""
    pairs = []
    for name, value in profile.env.items():
        problem = env_name_problem(name)
        if problem:
            raise ProfileError(problem, key="env", hint=ENV_NAME_HINT)
        pairs.append((name, _checked(str(value), f"env.{name}")))
    return pairs


def render_shell(profile: Profile, *, python: str = "python3") -> str:
    """One shell line: ``NAME=value … <argv>``, every token quoted safely."""
    env = [f"{name}={shlex.quote(value)}" for name, value in _env(profile)]
    return " ".join([*env, shlex.join(render(profile, python=python))])


def _image(image: str, key: str = "--image") -> str:
    if _checked(image, key).startswith("-") or not image.strip():
        raise ProfileError(f"{image!r} is not a container image", key=key)
    return image


def render_docker(profile: Profile, *, image: str = DOCKER_IMAGE, gpus: str = "all") -> str:
    """A ``docker run`` line for vLLM's official image (GPU, host IPC, HF cache mounted)."""
    port = profile.port
    head = ["docker", "run", "--rm", "--gpus", gpus, "--ipc=host", "-p", f"{port}:{port}"]
    for name, value in _env(profile):
        head += ["-e", f"{name}={value}"]
    head += ["-e", "HF_TOKEN"]  # passed through from the caller's environment when set
    if profile.entrypoint == "api-server":
        # the image's entrypoint is the OpenAI server; the legacy server needs python itself
        head += ["--entrypoint", "python3"]
        tail = ["-m", _MODULES["api-server"], "--model", _model(profile)]
    else:
        tail = ["--model", _model(profile)]
    tail += _flags(profile, skip=_NOT_IN_CONTAINERS)
    # double quotes so the shell expands $HOME; every other token is single-quoted as needed
    volume = f'-v "$HOME/.cache/huggingface:{HF_CACHE_IN_CONTAINER}"'
    return " ".join([shlex.join(head), volume, shlex.join([_image(image), *tail])])


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared dicts (the labels) out in full: kubectl users read these files."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_name(profile_name: str) -> str:
    """A DNS-1123 name for the profile's Kubernetes objects (``vllm-chunked-256``)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", profile_name.lower()).strip("-")
    return f"vllm-{cleaned}"[:63].rstrip("-")


def k8s_escape(text: str) -> str:
    """``text`` safe from the kubelet's ``$(VAR)`` expansion in command, args and env values:
    the kubelet turns ``$$`` into ``$``, so doubling every ``$`` leaves the text as written."""
    return text.replace("$", "$$")


def _comment(text: str) -> str:
    """``text`` on one line of printable characters, for a YAML ``#`` comment."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def render_k8s(profile: Profile, *, replicas: int = 1, image: str = DOCKER_IMAGE) -> str:
    """A Deployment (GPU limits, /health probes, the argv as command/args) and a Service."""
    name = k8s_name(profile.name)
    port = profile.port
    argv = [k8s_escape(token) for token in _launcher(profile, "python3")]
    argv += [k8s_escape(token) for token in _flags(profile, skip=_NOT_IN_CONTAINERS)]
    split = 2 if profile.entrypoint == "serve" else 3  # "vllm serve" | "python3 -m module"
    gpus, _ = profile.gpus_per_server()
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}
    env: list[dict[str, Any]] = [{"name": k, "value": k8s_escape(v)} for k, v in _env(profile)]
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
        "image": _image(image),
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
    service = _service(name, labels, "http", port)
    header = (
        f"# vprof profile {_comment(profile.name)}: {_comment(profile.description)}\n"
        f"# {replicas} replica(s) × {gpus} GPU(s); replace the hf-cache emptyDir with a "
        "PersistentVolumeClaim to keep weights across restarts.\n"
    )
    body = yaml.dump_all([deployment, service], Dumper=_NoAliasDumper, sort_keys=False)
    return header + body


LOAD_IMAGE = "vprof:latest"  # any image with vprof installed (pip install vprof)
MASTER_PORT = 5557  # Locust's own
RUNS_IN_CONTAINER = "/runs"


def render_k8s_load(
    profile: Profile,
    *,
    workers: int,
    image: str = LOAD_IMAGE,
    workload: str = "chat",
    traffic: tuple[str, ...] = ("steady",),
) -> str:
    """A master Job (``vprof bench`` against the profile's Service, waiting for ``workers``
    Locust workers), a Service its workers reach it at, and a Deployment of those workers.

    Rendered here, beside ``render_k8s``, because it is made from the same profile: the Job
    measures the Service ``render_k8s`` makes (its name and port) and labels its runs with the
    profile's name, one ``kubectl apply -f -`` takes both, and it keeps this module's rules —
    pure, safe for any string, no Locust imported. The workers are Locust's own distributed
    mode (``vprof worker``; see ``vprof.runs.distributed``): the bench waits for them and sends
    them the workload, traffic and seeds.
    """
    if workers < 1:
        raise ProfileError(f"must be at least 1, got {workers}", key="--load-workers")
    server = k8s_name(profile.name)
    master = f"{server}-load-master"[:63].rstrip("-")
    worker = f"{server}-load-worker"[:63].rstrip("-")
    url = f"http://{server}:{profile.port}"
    bench = ["vprof", "bench", profile.name, "--url", url, "--workload", workload]
    for shape in traffic:
        bench += ["--traffic", shape]
    bench += [
        "--workers-expected",
        str(workers),
        "--master-bind",
        f"0.0.0.0:{MASTER_PORT}",
        "--fetch-tokenizer",
        "--out",
        RUNS_IN_CONTAINER,
    ]
    image = _image(image, "--load-image")
    master_labels = _labels("vprof-load-master", master)
    worker_labels = _labels("vprof-load-worker", worker)
    hf_token = {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}},
    }
    wait_for_server = (
        "import time, urllib.request\n"
        "while True:\n"
        "    try:\n"
        f"        urllib.request.urlopen({url + '/health'!r}, timeout=5)\n"
        "        break\n"
        "    except Exception:\n"
        "        time.sleep(5)\n"
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": master, "labels": master_labels},
        "spec": {
            "backoffLimit": 0,  # a failed bench keeps its pod and log; re-apply to run again
            "template": {
                "metadata": {"labels": master_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "wait-for-server",
                            "image": image,
                            "command": ["python3", "-c", k8s_escape(wait_for_server)],
                        }
                    ],
                    "containers": [
                        {
                            "name": "bench",
                            "image": image,
                            "command": [
                                k8s_escape(_checked(t, "--workload/--traffic")) for t in bench
                            ],
                            "env": [hf_token],
                            "ports": [{"name": "locust", "containerPort": MASTER_PORT}],
                            "volumeMounts": [{"name": "runs", "mountPath": RUNS_IN_CONTAINER}],
                        }
                    ],
                    "volumes": [{"name": "runs", "emptyDir": {}}],
                },
            },
        },
    }
    service = _service(master, master_labels, "locust", MASTER_PORT)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": worker, "labels": worker_labels},
        "spec": {
            "replicas": int(workers),
            "selector": {"matchLabels": worker_labels},
            "template": {
                "metadata": {"labels": worker_labels},
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "command": ["vprof", "worker", "--master", f"{master}:{MASTER_PORT}"],
                            # one Locust process: a core of its own keeps its timing honest
                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }
    header = (
        f"# vprof load generator for {_comment(profile.name)}: a master Job running vprof bench "
        f"against {url}, waiting for {workers} Locust worker(s) from the Deployment below.\n"
        f"# The image needs vprof installed; replace the runs emptyDir with a "
        "PersistentVolumeClaim to keep the run folders, and delete the workers when the Job "
        "is done.\n"
    )
    body = yaml.dump_all([service, job, deployment], Dumper=_NoAliasDumper, sort_keys=False)
    return header + body


def _service(name: str, labels: dict[str, str], port_name: str, port: int) -> dict[str, Any]:
    """A Service of ``port`` (named ``port_name`` in its pods) for the pods with ``labels``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": port_name, "port": port, "targetPort": port_name}],
        },
    }


def _labels(kind: str, name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": kind, "app.kubernetes.io/instance": name}
