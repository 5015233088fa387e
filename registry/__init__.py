"""Named vLLM server profiles: loading with ``extends`` and layering, validation, rendering.

Imports only the standard library and PyYAML, so registry commands start fast; it never imports
vLLM (its flag table is ``vllm_args.json``, written by ``vprof.registry.gen_vllm_args``, which
runs in a child process when another vLLM is installed).
"""

from vprof.common.errors import ProfileError
from vprof.registry.loader import get_profile, load_profiles
from vprof.registry.overrides import parse_set_args, resolve_profile
from vprof.registry.profile import Profile
from vprof.registry.render import (
    render,
    render_docker,
    render_k8s,
    render_k8s_load,
    render_shell,
)
from vprof.registry.validate import validate

__all__ = [
    "Profile",
    "ProfileError",
    "get_profile",
    "load_profiles",
    "parse_set_args",
    "render",
    "render_docker",
    "render_k8s",
    "render_k8s_load",
    "render_shell",
    "resolve_profile",
    "validate",
]
