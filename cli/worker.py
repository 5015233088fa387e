"""``vprof worker``: a Locust worker on this host that joins a bench's master."""

from __future__ import annotations

import click


@click.command(short_help="Join a bench's Locust master from this load host.")
@click.option(
    "--master",
    "master",
    required=True,
    metavar="HOST:PORT",
    help="The master's address: what its bench gave as --master-bind (its host's name or "
    "address when it bound 0.0.0.0).",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 512),
    default=1,
    show_default=True,
    help="Locust worker processes on this host (one per spare core); each joins the master.",
)
def worker(master: str, processes: int) -> None:
    """Run vprof's Locust users as a worker of a distributed bench (Locust's own --worker).

    The master sends the workload, tokenizer, traffic, seed and salt when its test starts, so
    this host needs only vprof installed; its records go back to the master's run folder. The
    worker ends when the master's test does.

    \b
    Example:
      vprof bench chunked-256 --url http://10.0.0.9:8000 --traffic poisson \\
          --workers-expected 2 --master-bind 0.0.0.0:5557      # on the master host
      vprof worker --master 10.0.0.4:5557 --processes 4        # on each of two load hosts
    """
    import os
    import sys

    from vprof.runs.distributed import worker_argv

    argv = worker_argv(master, processes)
    click.echo(f"vprof worker: joining the Locust master at {master}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # This process becomes the Locust worker: a signal sent to it (Ctrl-C, a pod's SIGTERM)
    # reaches Locust itself, which finishes its streams and ships their records first.
    os.execve(argv[0], argv, {**os.environ, "PYTHONUNBUFFERED": "1"})
