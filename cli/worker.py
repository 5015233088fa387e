"""``vprof worker``: a Locust worker on this host that joins a bench's master."""

from __future__ import annotations

import click

from vprof.cli.options import processes_option


@click.command(short_help="Join a bench's Locust master from this load host.")
@click.option(
    "--master",
    "master",
    required=True,
    metavar="HOST:PORT",
    help="The master's address: what its bench gave as --master-bind (its host's name or "
    "address when it bound 0.0.0.0).",
)
@processes_option
@click.option(
    "--once",
    is_flag=True,
    help="Leave after one test [default: join every test the master's bench runs, until "
    "Ctrl-C or SIGTERM].",
)
def worker(master: str, processes: int, once: bool) -> None:
    """Run vprof's Locust users as a worker of a distributed bench (Locust's own --worker).

    The master sends the workload, tokenizer, traffic, seed and salt when its test starts, so
    this host needs only vprof installed; its records go back to the master's run folder. Each
    run of a bench is a test of its own: the worker joins them one after another until Ctrl-C
    or SIGTERM (which let its streams finish and their records reach the master first).

    \b
    Example:
      vprof bench chunked-256 --url http://10.0.0.9:8000 --traffic poisson \\
          --workers-expected 2 --master-bind 0.0.0.0:5557      # on the master host
      vprof worker --master 10.0.0.4:5557 --processes 4        # on each of two load hosts
    """
    from vprof.runs.distributed import run_worker

    raise SystemExit(run_worker(master, processes, once=once, say=_say))


def _say(message: str) -> None:
    click.echo(message, err=True)
