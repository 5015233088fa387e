"""Every command (and subcommand) has help with an example, reachable from `vprof --help`."""

from __future__ import annotations

import sys

import click
import pytest
from click.testing import CliRunner

from vprof.cli.main import COMMANDS, cli


def _commands():
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, f"{name} is in the command table but does not load"
        yield (name,), command
        if isinstance(command, click.Group):
            for sub in command.list_commands(click.Context(command)):
                yield (name, sub), command.get_command(click.Context(command), sub)


@pytest.mark.parametrize(
    ("path", "command"),
    list(_commands()),
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_command_help_shows_an_example(path, command):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"`vprof {' '.join(path)} --help` has no example"


def test_top_level_help_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    for name in COMMANDS:
        assert name in result.output


def test_ctrl_c_reaches_vprof_even_when_it_was_started_with_sigint_ignored(monkeypatch):
    # A shell without job control starts `vprof bench … &` with SIGINT ignored; vprof listens.
    import signal

    from vprof.cli.main import main

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    monkeypatch.setattr(sys, "argv", ["vprof", "--help"])
    try:
        with pytest.raises(SystemExit):
            main()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
