"""Every renderer is safe for any string a profile can hold: parse the output back, compare.

Shell and docker lines go back through ``shlex.split`` (what a POSIX shell does to quoted
words), Kubernetes YAML through ``yaml.safe_load_all`` and then through the kubelet's own
``$(VAR)`` expansion rules, and the argv through vLLM's real argument parser. A fixed corpus of
hostile strings covers what people type by mistake or on purpose; hypothesis adds arbitrary
Unicode text on top.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vprof.common.errors import ProfileError
from vprof.registry import Profile, render, render_docker, render_k8s, render_shell
from vprof.registry.render import k8s_escape

HOSTILE = [
    "a;touch /tmp/pwned",
    "$(touch /tmp/pwned)",
    "`touch /tmp/pwned`",
    "$(HF_TOKEN)",
    "$$(HF_TOKEN)",
    "$$$(HF_TOKEN)",
    "${HOME}",
    "$HOME",
    "$",
    "a$",
    "'",
    "'\"'\"'",
    '"',
    "\\",
    "\\n",
    "\n",
    "a\nb",
    "date\n",
    "\r\n",
    "\t",
    " ",
    "",
    "-x",
    "--help",
    "-1",
    "-0.5",
    "-",
    "--port=1",
    "*",
    "~",
    "!!",
    "#not a comment",
    "&& rm -rf ~",
    "| cat /etc/passwd",
    "> /etc/passwd",
    "é",
    "日本語",
    "🙂",
    "\u2028line separator",
    "\u0085next line",
    "\u200bzero width",
    "\ufeffbom",
    "\u202eright-to-left",
    "\x1b[31mred",
    "\x07bell",
    "%s%n",
    "{}",
    "[1, 2]",
    "null",
    "true",
    "010",
    "1.10",
    ": x",
    "- y",
    "? z",
    "&anchor",
    "*alias",
    "!!python/object/apply:os.system ['id']",
    "{{ template }}",
    "a=b",
    "x" * 300,
]

# the kubelet's expansion: $$ → $, $(NAME) → the variable, any other $ kept
_K8S_REF = re.compile(r"\$(\$|\(([^)]*)\))?")


def kubelet_expand(text: str) -> str:
    """What the kubelet makes of ``text`` if every variable it names were defined (as
    ``<SUBSTITUTED>``): equal to ``text`` only when nothing was expanded."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        if match.group(2) is not None:
            return "<SUBSTITUTED>"
        return "$"

    return _K8S_REF.sub(one, text)


def test_the_kubelet_model_expands_what_the_kubelet_expands():
    assert kubelet_expand("$(HOME)") == "<SUBSTITUTED>"
    assert kubelet_expand("$$(HOME)") == "$(HOME)"
    assert kubelet_expand("a$b$") == "a$b$"
    for text in HOSTILE:
        assert kubelet_expand(k8s_escape(text)) == text


def profile_with(text: str, *, entrypoint: str = "serve") -> Profile:
    """One hostile string in every place a string can go."""
    return Profile(
        name=f"p{text}",
        description=text,
        model=f"org/m{text}",
        engine_args={
            "served-model-name": [text],
            "chat-template": text,
            "tokenizer": f"t{text}",
            "max-model-len": 512,
            "enable-prefix-caching": True,
        },
        env={"HOSTILE": text, "B": f"b{text}"},
        entrypoint=entrypoint,
    )


def assert_round_trips(profile: Profile) -> None:
    argv = render(profile)
    env = [f"{k}={v}" for k, v in profile.env.items()]

    # shell: the words a shell reads are exactly NAME=value … argv
    assert shlex.split(render_shell(profile)) == env + argv

    # docker: the -e pairs are the environment, the image's arguments are the flags
    words = shlex.split(render_docker(profile))
    pairs = [words[i + 1] for i, w in enumerate(words) if w == "-e"]
    assert pairs == env + ["HF_TOKEN"]
    tail = words[words.index("vllm/vllm-openai:latest") + 1 :]
    assert tail == ["--model", profile.model, *argv[3:]]

    # kubernetes: YAML parses to the same argv and env, and the kubelet expands nothing
    text = render_k8s(profile)
    lines = text.splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if line.startswith("apiVersion:"))]
    assert len(header) == 2 and all(line.startswith("# ") for line in header)
    deployment, service = yaml.safe_load_all(text)
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert deployment["metadata"]["annotations"]["vprof/profile"] == profile.name
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    expanded = [kubelet_expand(t) for t in container["command"] + container["args"]]
    assert expanded == argv
    k8s_env = [f"{e['name']}={kubelet_expand(e['value'])}" for e in container["env"][:-1]]
    assert k8s_env == env


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip_through_every_renderer(text):
    assert_round_trips(profile_with(text))


@pytest.mark.parametrize("text", ["a\x00b", "\x00", "\ud800"])
def test_what_no_command_line_can_hold_is_refused_naming_the_setting(text):
    base = profile_with("ok")
    cases = {
        "model": (replace(base, model=f"m{text}"), (render, render_shell, render_docker)),
        "served-model-name": (
            base.with_overrides(set_args={"served-model-name": [text]}),
            (render, render_shell, render_docker, render_k8s),
        ),
        "env.X": (replace(base, env={"X": text}), (render_shell, render_docker, render_k8s)),
    }
    for key, (profile, renderers) in cases.items():
        for renderer in renderers:
            with pytest.raises(ProfileError) as info:
                renderer(profile)
            assert info.value.key == key


def test_a_leading_dash_value_is_joined_to_its_flag():
    argv = render(profile_with("--port=1"))
    assert "--chat-template=--port=1" in argv and "--port=1" not in argv
    assert "--served-model-name=--port=1" in argv
    # negative numbers are values to argparse; they keep the usual two tokens
    assert render(Profile("n", "", "m", {"max-model-len": -1}))[-2:] == ["--max-model-len", "-1"]


def test_a_double_dash_value_is_refused_because_argparse_would_drop_it():
    with pytest.raises(ProfileError, match="'--' cannot be passed") as info:
        render(Profile("n", "", "m", {"chat-template": "--"}))
    assert info.value.key == "chat-template"


def test_a_model_with_a_leading_dash_is_refused():
    with pytest.raises(ProfileError, match="starts with '-'") as info:
        render(Profile("n", "", "--help"))
    assert info.value.key == "model" and "./--help" in info.value.hint


def test_a_multi_item_list_with_a_dashed_item_is_refused():
    profile = Profile("n", "", "m", {"served-model-name": ["a", "-b"]})
    with pytest.raises(ProfileError, match="'-b' starts with '-'"):
        render(profile)


@pytest.mark.parametrize("name", ["X;touch /tmp/pwned;Y", "date\n", "1X", "", "A B", "A=B"])
def test_environment_names_are_checked_by_every_renderer(name):
    profile = Profile("n", "", "m", env={name: "1"})
    for renderer in (render_shell, render_docker, render_k8s):
        with pytest.raises(ProfileError, match="not a valid environment variable name"):
            renderer(profile)


@pytest.fixture(scope="module")
def vllm_parser():
    """vLLM's real server parser (slow to import: once per module), or None without vLLM."""
    try:
        from vprof.registry.gen_vllm_args import _make_parser

        return _make_parser()[0]
    except ImportError:
        return None


def assert_vllm_reads(parser, text: str) -> None:
    profile = profile_with(text, entrypoint="openai-module")
    args = parser.parse_args(render(profile)[3:])
    # vLLM's optional string flags read "" (and "None") as unset, by design
    meant = None if text in ("", "None") else text
    assert args.model == profile.model
    assert args.served_model_name == [meant]
    assert args.chat_template == meant
    assert args.tokenizer == f"t{text}"


def test_the_argv_parses_back_with_vllms_own_parser(vllm_parser):
    if vllm_parser is None:
        pytest.skip("vLLM is not installed")
    for text in HOSTILE:
        assert_vllm_reads(vllm_parser, text)


# arbitrary text: every Unicode category but lone surrogates, NUL included
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=_TEXT)
def test_any_text_round_trips_or_is_refused(text, vllm_parser):
    profile = profile_with(text)
    if "\x00" in text or text == "--":
        with pytest.raises(ProfileError):
            render_shell(profile)
        return
    assert_round_trips(profile)
    if vllm_parser is not None:
        assert_vllm_reads(vllm_parser, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=_TEXT)
def test_any_environment_name_is_valid_or_refused(name):
    profile = Profile("n", "", "m", env={name: "1"})
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        assert shlex.split(render_shell(profile))[0] == f"{name}=1"
    else:
        with pytest.raises(ProfileError):
            render_shell(profile)
